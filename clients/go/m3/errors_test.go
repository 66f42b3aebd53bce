package m3_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	m3v1 "github.com/m3grpc/m3grpc/clients/go/gen/m3/v1"
	"github.com/m3grpc/m3grpc/clients/go/m3"
)

// statusError builds the error a gRPC call returns for a status with details.
func statusError(t *testing.T, code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	t.Helper()
	st, err := status.New(code, msg).WithDetails(details...)
	if err != nil {
		t.Fatalf("WithDetails: %v", err)
	}
	return st.Err()
}

func info(reason string, metadata map[string]string) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: reason, Domain: m3.ErrorDomain, Metadata: metadata}
}

func decode(t *testing.T, err error) *m3.Error {
	t.Helper()
	wrapped := m3.FromError(err)
	var e *m3.Error
	if !errors.As(wrapped, &e) {
		t.Fatalf("errors.As(%v, *m3.Error) = false", wrapped)
	}
	return e
}

func TestManagedInputInvalidWithFieldViolations(t *testing.T) {
	err := statusError(t, codes.InvalidArgument, "invalid responses",
		info("MANAGED_INPUT_INVALID", map[string]string{"round_id": "rnd_1"}),
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "responses['shipping_address'].content.street", Description: "7 is not of type 'string'"},
			{Field: "responses['wrong_key']", Description: "not a request key"},
		}},
	)
	e := decode(t, err)
	if e.Code != codes.InvalidArgument || e.Reason != m3.ReasonManagedInputInvalid || e.Message != "invalid responses" {
		t.Errorf("got code %v reason %q message %q", e.Code, e.Reason, e.Message)
	}
	if e.Metadata["round_id"] != "rnd_1" {
		t.Errorf("metadata = %v", e.Metadata)
	}
	want := []m3.FieldViolation{
		{Field: "responses['shipping_address'].content.street", Description: "7 is not of type 'string'"},
		{Field: "responses['wrong_key']", Description: "not a request key"},
	}
	if fmt.Sprint(e.FieldViolations) != fmt.Sprint(want) {
		t.Errorf("field violations = %v, want %v", e.FieldViolations, want)
	}
	wrapped := m3.FromError(err)
	if !errors.Is(wrapped, m3.ErrManagedInputInvalid) {
		t.Error("errors.Is(err, ErrManagedInputInvalid) = false")
	}
	if errors.Is(wrapped, m3.ErrModelValidationFailed) || errors.Is(wrapped, m3.ErrManagedInputConflict) {
		t.Error("matches the sentinel of another reason")
	}
	// Wrapped further by the caller: still found.
	outer := fmt.Errorf("answering: %w", wrapped)
	if !errors.Is(outer, m3.ErrManagedInputInvalid) {
		t.Error("errors.Is through fmt.Errorf %w = false")
	}
	for _, part := range []string{"MANAGED_INPUT_INVALID", "INVALID_ARGUMENT", "invalid responses", "content.street"} {
		if !strings.Contains(e.Error(), part) {
			t.Errorf("Error() = %q lacks %q", e.Error(), part)
		}
	}
}

func TestConflictKindAndStatusInterop(t *testing.T) {
	err := statusError(t, codes.Aborted, "idempotency key reused",
		info("MANAGED_INPUT_CONFLICT", map[string]string{"conflict_kind": "idempotency_key_reused", "round_id": "rnd_1"}))
	wrapped := m3.FromError(err)
	e := decode(t, err)
	if !errors.Is(wrapped, m3.ErrManagedInputConflict) {
		t.Error("errors.Is(err, ErrManagedInputConflict) = false")
	}
	if e.ConflictKind() != m3.ConflictIdempotencyKeyReused {
		t.Errorf("ConflictKind() = %q", e.ConflictKind())
	}
	// The *Error still reads as the gRPC status it came from.
	if status.Code(wrapped) != codes.Aborted {
		t.Errorf("status.Code = %v", status.Code(wrapped))
	}
	st, ok := status.FromError(wrapped)
	if !ok || st.Message() != "idempotency key reused" || len(st.Details()) != 1 {
		t.Errorf("status.FromError = %v, %v", st, ok)
	}
}

func TestSubclassSentinels(t *testing.T) {
	notFound := m3.FromError(statusError(t, codes.NotFound, "no round",
		info("ROUND_NOT_FOUND", map[string]string{"round_id": "rnd_x"}),
		&errdetails.ResourceInfo{ResourceType: "m3grpc.dev/ElicitationRound", ResourceName: "rnd_x"}))
	if !errors.Is(notFound, m3.ErrRoundNotFound) || !errors.Is(notFound, m3.ErrManagedInputStateInvalid) {
		t.Error("ROUND_NOT_FOUND should match ErrRoundNotFound and its parent ErrManagedInputStateInvalid")
	}
	var e *m3.Error
	if errors.As(notFound, &e); e.Resource.GetResourceName() != "rnd_x" {
		t.Errorf("Resource = %v", e.Resource)
	}
	state := m3.FromError(statusError(t, codes.FailedPrecondition, "not pending",
		info("MANAGED_INPUT_STATE_INVALID", map[string]string{"round_id": "rnd_x", "status": "failed"}),
		&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{
			{Type: "MANAGED_INPUT_STATE_INVALID", Subject: "rnd_x", Description: "not pending"},
		}}))
	if errors.Is(state, m3.ErrRoundNotFound) {
		t.Error("the parent must not match the child's sentinel")
	}
	if errors.As(state, &e); len(e.Preconditions) != 1 || e.Preconditions[0].GetSubject() != "rnd_x" {
		t.Errorf("Preconditions = %v", e.Preconditions)
	}

	wait := m3.FromError(statusError(t, codes.DeadlineExceeded, "still running",
		info("RESULT_WAIT_TIMEOUT", map[string]string{"execution_id": "exe_1", "timeout": "0.200s"})))
	if !errors.Is(wait, m3.ErrResultWaitTimeout) || !errors.Is(wait, m3.ErrOperationTimeout) {
		t.Error("RESULT_WAIT_TIMEOUT should match ErrResultWaitTimeout and ErrOperationTimeout")
	}
	if errors.As(wait, &e); !e.Timeout() || e.Metadata["timeout"] != "0.200s" {
		t.Errorf("Timeout() = %v, metadata %v", e.Timeout(), e.Metadata)
	}
}

func TestRetryAfter(t *testing.T) {
	e := decode(t, statusError(t, codes.ResourceExhausted, "queue full",
		info("WORK_QUEUE_FULL", map[string]string{"queue_capacity": "256"}),
		&errdetails.RetryInfo{RetryDelay: durationpb.New(2500 * time.Millisecond)}))
	if e.RetryAfter != 2500*time.Millisecond || !errors.Is(e, m3.ErrWorkQueueFull) {
		t.Errorf("RetryAfter = %v, reason %q", e.RetryAfter, e.Reason)
	}
	// Without RetryInfo: the Python client's default of one second.
	e = decode(t, statusError(t, codes.ResourceExhausted, "queue full", info("WORK_QUEUE_FULL", nil)))
	if e.RetryAfter != time.Second {
		t.Errorf("default RetryAfter = %v", e.RetryAfter)
	}
	if e.Metadata == nil {
		t.Error("Metadata must never be nil")
	}
	// A database outage: retryable after its RetryInfo delay.
	e = decode(t, statusError(t, codes.Unavailable, "database down", info("STORAGE_UNAVAILABLE", nil),
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}))
	if e.RetryAfter != time.Second || !errors.Is(e, m3.ErrStorageUnavailable) || e.Code != codes.Unavailable {
		t.Errorf("STORAGE_UNAVAILABLE: RetryAfter = %v, reason %q", e.RetryAfter, e.Reason)
	}
	// RATE_LIMITED: the delay until the principal's bucket has a token again.
	e = decode(t, statusError(t, codes.ResourceExhausted, "rate limit of Submit reached",
		info("RATE_LIMITED", map[string]string{"method": "Submit", "per_second": "0.5", "burst": "2"}),
		&errdetails.RetryInfo{RetryDelay: durationpb.New(250 * time.Millisecond)}))
	if e.RetryAfter != 250*time.Millisecond || !errors.Is(e, m3.ErrRateLimited) || e.Metadata["method"] != "Submit" {
		t.Errorf("RetryAfter = %v, reason %q, metadata %v", e.RetryAfter, e.Reason, e.Metadata)
	}
	// Other reasons: nothing to wait for.
	e = decode(t, statusError(t, codes.NotFound, "no execution", info("EXECUTION_NOT_FOUND", nil)))
	if e.RetryAfter != 0 {
		t.Errorf("RetryAfter = %v", e.RetryAfter)
	}
}

func TestEveryWireReasonHasASentinel(t *testing.T) {
	for number, name := range m3v1.ErrorReason_name {
		if number == 0 {
			continue
		}
		reason := strings.TrimPrefix(name, "ERROR_REASON_")
		err := m3.FromError(statusError(t, codes.Unknown, "x", info(reason, nil)))
		matched := false
		for _, s := range allSentinels {
			if errors.Is(err, s) && strings.HasSuffix(s.Error(), reason) {
				matched = true
			}
		}
		if !matched {
			t.Errorf("reason %s has no sentinel", reason)
		}
	}
}

var allSentinels = []error{
	m3.ErrModelValidationFailed, m3.ErrManagedInputInvalid, m3.ErrManagedInputConflict,
	m3.ErrManagedInputStateInvalid, m3.ErrRoundNotFound, m3.ErrManagedInputRecoveryUnavailable,
	m3.ErrOperationTimeout, m3.ErrExecutionNotFound, m3.ErrResultWaitTimeout, m3.ErrWorkQueueFull,
	m3.ErrServerBindingNotFound, m3.ErrElicitationNotAnswered, m3.ErrRoundLimitExceeded,
	m3.ErrInternal, m3.ErrServiceShuttingDown, m3.ErrUnauthenticated, m3.ErrRateLimited,
	m3.ErrStorageUnavailable,
}

func TestUnknownReasonKeepsItsCode(t *testing.T) {
	e := decode(t, statusError(t, codes.Unavailable, "later", info("SOMETHING_NEW", map[string]string{"k": "v"})))
	if e.Code != codes.Unavailable || e.Reason != "SOMETHING_NEW" || e.Metadata["k"] != "v" {
		t.Errorf("got %+v", e)
	}
	for _, s := range allSentinels {
		if errors.Is(e, s) {
			t.Errorf("unknown reason matches %v", s)
		}
	}
}

func TestStatusesWithoutAnM3ReasonAreErrorsToo(t *testing.T) {
	cases := map[string]struct {
		err      error
		code     codes.Code
		internal bool
	}{
		"no details":   {status.Error(codes.DeadlineExceeded, "context deadline exceeded"), codes.DeadlineExceeded, false},
		"unavailable":  {status.Error(codes.Unavailable, "connection refused"), codes.Unavailable, false},
		"internal":     {status.Error(codes.Internal, "boom"), codes.Internal, true},
		"other domain": {statusError(t, codes.NotFound, "x", &errdetails.ErrorInfo{Reason: "ROUND_NOT_FOUND", Domain: "example.com"}), codes.NotFound, false},
	}
	for name, c := range cases {
		got := m3.FromError(c.err)
		var e *m3.Error
		if !errors.As(got, &e) {
			t.Fatalf("%s: errors.As found no *m3.Error in %v", name, got)
		}
		if e.Code != c.code || e.Reason != "" || e.Metadata == nil {
			t.Errorf("%s: got code %v reason %q metadata %v", name, e.Code, e.Reason, e.Metadata)
		}
		if status.Code(got) != c.code {
			t.Errorf("%s: status.Code = %v, want %v", name, status.Code(got), c.code)
		}
		if errors.Is(got, m3.ErrRoundNotFound) {
			t.Errorf("%s: matches a sentinel", name)
		}
		if errors.Is(got, m3.ErrInternal) != c.internal {
			t.Errorf("%s: errors.Is(ErrInternal) = %v", name, !c.internal)
		}
	}
	plain := errors.New("plain")
	if m3.FromError(plain) != plain {
		t.Error("FromError changed an error that is not a status")
	}
	if m3.FromError(nil) != nil {
		t.Error("FromError(nil) != nil")
	}
	if m3.ErrorFromStatus(status.New(codes.OK, "")) != nil {
		t.Error("ErrorFromStatus(OK) != nil")
	}
}

func TestCodeName(t *testing.T) {
	for code, want := range map[codes.Code]string{
		codes.InvalidArgument:    "INVALID_ARGUMENT",
		codes.Canceled:           "CANCELLED",
		codes.FailedPrecondition: "FAILED_PRECONDITION",
		codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	} {
		if got := m3.CodeName(code); got != want {
			t.Errorf("CodeName(%v) = %q, want %q", code, got, want)
		}
	}
}
