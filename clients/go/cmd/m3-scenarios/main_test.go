package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/m3grpc/m3grpc/clients/go/m3"
)

func TestDecodeStepSubstitutesTheRunToken(t *testing.T) {
	st, err := decodeStep(json.RawMessage(`{"op": "submit", "as": "exe", "request_id": "{run}-replay",
		"agent": {"harness": "scripted", "prompt": "p {run}", "server": "shipping", "tools": ["{run}"]}}`), "tok")
	if err != nil {
		t.Fatal(err)
	}
	if st.RequestID != "tok-replay" || st.Agent.Prompt != "p tok" || st.Agent.Tools[0] != "tok" {
		t.Errorf("step = %+v, agent %+v", st, st.Agent)
	}
}

func TestDecodeStepRefusesUnknownFields(t *testing.T) {
	if _, err := decodeStep(json.RawMessage(`{"op": "cancel", "execution": "exe", "surprise": 1}`), "tok"); err == nil {
		t.Error("a step with an unknown field was accepted")
	}
}

func TestEnumNames(t *testing.T) {
	h, err := parseEnum[m3.HumanInput]("MANAGED")
	if err != nil || h != m3.HumanInputManaged {
		t.Errorf("parseEnum(MANAGED) = %v, %v", h, err)
	}
	if _, err := parseEnum[m3.Action]("MAYBE"); err == nil {
		t.Error("parseEnum accepted MAYBE")
	}
	for want, value := range map[string]protoreflect.Enum{
		"SUCCEEDED":          m3.OutcomeSucceeded,
		"WAITING_FOR_INPUT":  m3.ExecutionStatusWaitingForInput,
		"RESPONSE_VALIDATED": m3.ManagedInputStatusResponseValidated,
		"TOOL":               m3.OperationKindTool,
		"UNSPECIFIED":        m3.ExecutionOutcome(0),
	} {
		if got := enumName(value); got != want {
			t.Errorf("enumName(%v) = %s, want %s", value, got, want)
		}
	}
}

func TestCheckError(t *testing.T) {
	st, _ := status.New(codes.Aborted, "key reused").WithDetails(&errdetails.ErrorInfo{
		Reason: "MANAGED_INPUT_CONFLICT", Domain: m3.ErrorDomain,
		Metadata: map[string]string{"conflict_kind": "idempotency_key_reused", "round_id": "rnd_1"},
	})
	err := m3.FromError(st.Err())
	ok := &expectedError{Code: "ABORTED", Reason: "MANAGED_INPUT_CONFLICT",
		Metadata: map[string]string{"conflict_kind": "idempotency_key_reused"}}
	if e := checkError(err, ok); e != nil {
		t.Errorf("checkError = %v", e)
	}
	for _, bad := range []*expectedError{
		{Code: "FAILED_PRECONDITION"},
		{Reason: "MANAGED_INPUT_INVALID"},
		{Metadata: map[string]string{"conflict_kind": "stale_lease"}},
		{FieldViolations: []string{"responses['x']"}},
	} {
		if checkError(err, bad) == nil {
			t.Errorf("checkError accepted %s", describe(bad))
		}
	}
}

func TestRunPrintsTheSummary(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"--target", "127.0.0.1:1"}, &out, &errs); code != 2 {
		t.Errorf("exit code without --scenarios = %d, want 2", code)
	}
	if !strings.Contains(errs.String(), "usage:") {
		t.Errorf("stderr = %q", errs.String())
	}
}
