package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/m3grpc/m3grpc/clients/go/m3"
)

const (
	pollInterval = 50 * time.Millisecond
	pollLimit    = 60 * time.Second
	watchLimit   = 60 * time.Second
)

// step is one step of a scenario; which fields apply depends on Op (see
// tests/scenarios/README.md).
type step struct {
	Op             string                  `json:"op"`
	As             string                  `json:"as"`
	HumanInput     string                  `json:"human_input"`
	Agent          *agentStep              `json:"agent"`
	RequestID      string                  `json:"request_id"`
	Execution      string                  `json:"execution"`
	ExecutionID    string                  `json:"execution_id"`
	SameRoundAs    string                  `json:"same_round_as"`
	Round          string                  `json:"round"`
	IdempotencyKey string                  `json:"idempotency_key"`
	Responses      map[string]responseStep `json:"responses"`
	TimeoutSeconds *float64                `json:"timeout_seconds"`
	Cursor         string                  `json:"cursor"`
	Kinds          []string                `json:"kinds"`
	Take           int                     `json:"take"`
	UntilEnd       bool                    `json:"until_end"`
	CursorAs       string                  `json:"cursor_as"`
	Names          []string                `json:"names"`
	IncludeTools   bool                    `json:"include_tools"`
	Expect         map[string]any          `json:"expect"`
	ExpectError    *expectedError          `json:"expect_error"`
}

type agentStep struct {
	Harness             string   `json:"harness"`
	Models              []string `json:"models"`
	Prompt              string   `json:"prompt"`
	Server              string   `json:"server"`
	Tools               []string `json:"tools"`
	RoundTimeoutSeconds *float64 `json:"round_timeout_seconds"`
}

type responseStep struct {
	Action  string         `json:"action"`
	Content map[string]any `json:"content"`
}

type expectedError struct {
	Code            string            `json:"code,omitempty"`
	Reason          string            `json:"reason,omitempty"`
	FieldViolations []string          `json:"field_violations,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
}

// callFailed is a failed client call; with expect_error it is what the step
// checks, otherwise it fails the step.
type callFailed struct{ err error }

func (c *callFailed) Error() string { return "unexpected error: " + c.err.Error() }
func (c *callFailed) Unwrap() error { return c.err }

func failedCall(err error) error { return &callFailed{err: err} }

// runner holds one scenario's saved names.
type runner struct {
	client     *m3.Client
	executions map[string]string
	rounds     map[string]*m3.PendingRound
	cursors    map[string]string
}

func newRunner(client *m3.Client) *runner {
	return &runner{
		client:     client,
		executions: map[string]string{},
		rounds:     map[string]*m3.PendingRound{},
		cursors:    map[string]string{},
	}
}

// run performs one step and checks its expect or expect_error.
func (r *runner) run(st step) error {
	if st.Expect != nil && st.ExpectError != nil {
		return errors.New("bad step: both expect and expect_error")
	}
	exp := &expectation{values: st.Expect, used: map[string]bool{}}
	op, ok := map[string]func(step, *expectation) error{
		"submit":       r.submit,
		"wait_pending": r.waitPending,
		"get_pending":  r.getPending,
		"snapshot":     r.snapshot,
		"respond":      r.respond,
		"result":       r.result,
		"cancel":       r.cancel,
		"watch":        r.watch,
		"list_servers": r.listServers,
	}[st.Op]
	if !ok {
		return fmt.Errorf("bad step: unknown op %q", st.Op)
	}
	err := op(st, exp)
	var failed *callFailed
	switch {
	case errors.As(err, &failed) && st.ExpectError != nil:
		return checkError(failed.err, st.ExpectError)
	case err != nil:
		return err
	case st.ExpectError != nil:
		return fmt.Errorf("expected error %s, the call succeeded", describe(st.ExpectError))
	}
	if unused := exp.unused(); len(unused) > 0 {
		return fmt.Errorf("bad step: expect keys not supported by %s: %s", st.Op, strings.Join(unused, ", "))
	}
	return nil
}

// cleanup cancels the scenario's executions (best effort).
func (r *runner) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for _, id := range r.executions {
		_, _ = r.client.Cancel(ctx, id)
	}
}

func checkError(err error, want *expectedError) error {
	var e *m3.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("expected the typed error %s, got %v", describe(want), err)
	}
	if want.Code != "" && m3.CodeName(e.Code) != want.Code {
		return fmt.Errorf("status code: expected %s, got %s (%v)", want.Code, m3.CodeName(e.Code), e)
	}
	if want.Reason != "" {
		if string(e.Reason) != want.Reason {
			return fmt.Errorf("ErrorInfo reason: expected %s, got %s (%v)", want.Reason, e.Reason, e)
		}
		if sentinel := sentinelOf(want.Reason); sentinel == nil || !errors.Is(err, sentinel) {
			return fmt.Errorf("errors.Is(err, sentinel of %s) is false", want.Reason)
		}
	}
	if want.FieldViolations != nil {
		got := make([]string, 0, len(e.FieldViolations))
		for _, v := range e.FieldViolations {
			got = append(got, v.Field)
		}
		wantFields := slices.Clone(want.FieldViolations)
		sort.Strings(got)
		sort.Strings(wantFields)
		if !slices.Equal(got, wantFields) {
			return fmt.Errorf("field violations: expected %q, got %q", wantFields, got)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(want.Metadata)) {
		if got, ok := e.Metadata[key]; !ok || got != want.Metadata[key] {
			return fmt.Errorf("metadata[%s]: expected %q, got %q (present: %v)", key, want.Metadata[key], got, ok)
		}
	}
	return nil
}

// sentinelOf is the m3 sentinel error of a reason, to check that errors.Is
// works as documented.
func sentinelOf(reason string) error {
	return map[string]error{
		"MODEL_VALIDATION_FAILED":            m3.ErrModelValidationFailed,
		"MANAGED_INPUT_INVALID":              m3.ErrManagedInputInvalid,
		"MANAGED_INPUT_CONFLICT":             m3.ErrManagedInputConflict,
		"MANAGED_INPUT_STATE_INVALID":        m3.ErrManagedInputStateInvalid,
		"ROUND_NOT_FOUND":                    m3.ErrRoundNotFound,
		"MANAGED_INPUT_RECOVERY_UNAVAILABLE": m3.ErrManagedInputRecoveryUnavailable,
		"OPERATION_TIMEOUT":                  m3.ErrOperationTimeout,
		"EXECUTION_NOT_FOUND":                m3.ErrExecutionNotFound,
		"RESULT_WAIT_TIMEOUT":                m3.ErrResultWaitTimeout,
		"WORK_QUEUE_FULL":                    m3.ErrWorkQueueFull,
		"SERVER_BINDING_NOT_FOUND":           m3.ErrServerBindingNotFound,
		"ELICITATION_NOT_ANSWERED":           m3.ErrElicitationNotAnswered,
		"ROUND_LIMIT_EXCEEDED":               m3.ErrRoundLimitExceeded,
		"INTERNAL":                           m3.ErrInternal,
		"SERVICE_SHUTTING_DOWN":              m3.ErrServiceShuttingDown,
		"UNAUTHENTICATED":                    m3.ErrUnauthenticated,
		"RATE_LIMITED":                       m3.ErrRateLimited,
	}[reason]
}

func describe(e *expectedError) string {
	data, _ := json.Marshal(e)
	return string(data)
}

// -- saved names ---------------------------------------------------------------------

func (r *runner) executionID(st step) (string, error) {
	if st.ExecutionID != "" {
		return st.ExecutionID, nil
	}
	id, ok := r.executions[st.Execution]
	if !ok {
		return "", fmt.Errorf("bad step: no saved execution %q", st.Execution)
	}
	return id, nil
}

func (r *runner) savedRound(name string) (*m3.PendingRound, error) {
	round, ok := r.rounds[name]
	if !ok {
		return nil, fmt.Errorf("bad step: no saved round %q", name)
	}
	return round, nil
}

func callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

// -- operations ----------------------------------------------------------------------

func (r *runner) submit(st step, exp *expectation) error {
	if st.Agent == nil || st.As == "" {
		return errors.New("bad step: submit needs agent and as")
	}
	spec := m3.AgentSpec{
		Harness: st.Agent.Harness,
		Models:  st.Agent.Models,
		Prompt:  st.Agent.Prompt,
		Server:  st.Agent.Server,
		Tools:   st.Agent.Tools,
	}
	if s := st.Agent.RoundTimeoutSeconds; s != nil {
		spec.RoundTimeout = seconds(*s)
	}
	var opts []m3.SubmitOption
	if st.HumanInput != "" {
		h, err := parseEnum[m3.HumanInput](st.HumanInput)
		if err != nil {
			return err
		}
		opts = append(opts, m3.WithHumanInput(h))
	}
	if st.RequestID != "" {
		opts = append(opts, m3.WithRequestID(st.RequestID))
	}
	ctx, cancel := callContext()
	defer cancel()
	state, err := r.client.Submit(ctx, spec, opts...)
	if err != nil {
		return failedCall(err)
	}
	r.executions[st.As] = state.GetExecutionId()
	if name, ok := exp.get("same_execution_as"); ok {
		id, found := r.executions[fmt.Sprint(name)]
		if !found {
			return fmt.Errorf("bad step: no saved execution %q", name)
		}
		return compare("execution_id", state.GetExecutionId(), id)
	}
	return nil
}

func (r *runner) waitPending(st step, exp *expectation) error {
	id, err := r.executionID(st)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(pollLimit)
	var round *m3.PendingRound
	for {
		ctx, cancel := callContext()
		round, err = r.client.GetPending(ctx, id)
		cancel()
		if err != nil {
			return failedCall(err)
		}
		if round != nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no round became pending within %s", pollLimit)
		}
		time.Sleep(pollInterval)
	}
	if st.As != "" {
		r.rounds[st.As] = round
	}
	if st.SameRoundAs != "" {
		saved, err := r.savedRound(st.SameRoundAs)
		if err != nil {
			return err
		}
		if err := compare("round_id", round.GetRoundId(), saved.GetRoundId()); err != nil {
			return err
		}
	}
	keys := slices.Sorted(maps.Keys(round.GetRequests()))
	checks := []error{
		exp.sortedList("request_keys", keys),
		exp.equal("operation_kind", enumName(round.GetOperationKind())),
		exp.equal("operation_name", round.GetOperationName()),
		exp.equal("server", round.GetServer()),
		exp.equal("round_index", round.GetRoundIndex()),
		exp.equal("has_deadline", round.GetDeadline() != nil),
	}
	return errors.Join(checks...)
}

func (r *runner) getPending(st step, exp *expectation) error {
	id, err := r.executionID(st)
	if err != nil {
		return err
	}
	ctx, cancel := callContext()
	defer cancel()
	round, err := r.client.GetPending(ctx, id)
	if err != nil {
		return failedCall(err)
	}
	if none, ok := exp.get("none"); ok {
		switch {
		case none == true && round != nil:
			return fmt.Errorf("expected nothing pending, got round %s", round.GetRoundId())
		case none == false && round == nil:
			return errors.New("expected a pending round, got none")
		}
	}
	return nil
}

func (r *runner) snapshot(st step, exp *expectation) error {
	id, err := r.executionID(st)
	if err != nil {
		return err
	}
	ctx, cancel := callContext()
	defer cancel()
	state, err := r.client.Snapshot(ctx, id)
	if err != nil {
		return failedCall(err)
	}
	return errors.Join(
		exp.equal("lifecycle", enumName(state.GetLifecycle())),
		exp.equal("outcome", enumName(state.GetOutcome())),
	)
}

func (r *runner) respond(st step, exp *expectation) error {
	round, err := r.savedRound(st.Round)
	if err != nil {
		return err
	}
	responses := make(map[string]m3.Response, len(st.Responses))
	for key, resp := range st.Responses {
		action, err := parseEnum[m3.Action](resp.Action)
		if err != nil {
			return err
		}
		responses[key] = m3.Response{Action: action, Content: resp.Content}
	}
	ctx, cancel := callContext()
	defer cancel()
	res, err := r.client.Respond(ctx, round.GetRoundId(), responses, st.IdempotencyKey)
	if err != nil {
		return failedCall(err)
	}
	return errors.Join(
		exp.equal("status", enumName(res.GetStatus())),
		exp.equal("replayed", res.GetReplayed()),
	)
}

func (r *runner) result(st step, exp *expectation) error {
	id, err := r.executionID(st)
	if err != nil {
		return err
	}
	if st.TimeoutSeconds == nil {
		return errors.New("bad step: result needs timeout_seconds")
	}
	res, err := r.client.Result(context.Background(), id, seconds(*st.TimeoutSeconds))
	if err != nil {
		return failedCall(err)
	}
	checks := []error{
		exp.equal("outcome", enumName(res.GetOutcome())),
		exp.equal("failure_code", res.GetFailureCode()),
		// An agent harness's final message (codex); "" when the harness reports none.
		exp.equal("agent_final_message", res.GetAgent().GetFinalMessage()),
	}
	if _, ok := exp.get("operation_text"); ok {
		var text any // null when there is no operation or no text content
		if ops := res.GetOperations(); len(ops) > 0 {
			if t, ok := firstText(ops[0]); ok {
				text = t
			}
		}
		checks = append(checks, exp.equal("operation_text", text))
	}
	return errors.Join(checks...)
}

// firstText is the text of the first content block with a text, in an
// operation's MCP result.
func firstText(op *m3.OperationResult) (string, bool) {
	content := op.GetResult().GetFields()["content"].GetListValue()
	for _, block := range content.GetValues() {
		if text, ok := block.GetStructValue().GetFields()["text"]; ok {
			return text.GetStringValue(), true
		}
	}
	return "", false
}

func (r *runner) cancel(st step, _ *expectation) error {
	id, err := r.executionID(st)
	if err != nil {
		return err
	}
	ctx, cancel := callContext()
	defer cancel()
	if _, err := r.client.Cancel(ctx, id); err != nil {
		return failedCall(err)
	}
	return nil
}

func (r *runner) listServers(st step, exp *expectation) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers, err := r.client.ListServers(ctx, st.Names, st.IncludeTools)
	if err != nil {
		return failedCall(err)
	}
	names := make([]string, 0, len(servers))
	tools := map[string][]string{}
	toolErrors := map[string]string{}
	for _, s := range servers {
		names = append(names, s.GetName())
		tools[s.GetName()] = []string{}
		for _, t := range s.GetTools() {
			tools[s.GetName()] = append(tools[s.GetName()], t.GetName())
		}
		if s.GetToolsError() != nil {
			toolErrors[s.GetName()] = s.GetToolsError().GetCode()
		}
	}
	return errors.Join(
		exp.equal("servers", names),
		exp.equal("tools", tools),
		exp.equal("tools_errors", toolErrors),
	)
}

func (r *runner) watch(st step, exp *expectation) error {
	id, err := r.executionID(st)
	if err != nil {
		return err
	}
	opts := m3.WatchOptions{ExecutionID: id}
	if st.Cursor != "" {
		cursor, ok := r.cursors[st.Cursor]
		if !ok {
			return fmt.Errorf("bad step: no saved cursor %q", st.Cursor)
		}
		opts.Cursor = cursor
	}
	for _, name := range st.Kinds {
		kind, ok := eventKinds[name]
		if !ok {
			return fmt.Errorf("bad step: unknown event kind %q in kinds", name)
		}
		opts.Kinds = append(opts.Kinds, kind)
	}
	if (st.Take > 0) == st.UntilEnd {
		return errors.New("bad step: watch needs exactly one of take and until_end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchLimit)
	defer cancel()
	var events []m3.Event
	for ev, err := range r.client.WatchPending(ctx, opts) {
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("the watch stream did not deliver its events within %s (got %d)", watchLimit, len(events))
			}
			return failedCall(err)
		}
		events = append(events, ev)
		if st.Take > 0 && len(events) == st.Take {
			break // closes the stream
		}
	}
	labels := make([]string, len(events))
	for i, ev := range events {
		labels[i] = eventLabel(ev)
	}
	if err := exp.equal("events", labels); err != nil {
		return err
	}
	if len(events) == 0 {
		return errors.New("the watch returned no event")
	}
	if st.CursorAs != "" {
		r.cursors[st.CursorAs] = events[len(events)-1].Cursor
	}
	if st.As != "" {
		var round *m3.PendingRound
		for _, ev := range events {
			if ev.Kind == m3.EventRoundPending {
				round = ev.Round
			}
		}
		if round == nil {
			return errors.New("no round_pending event to save")
		}
		r.rounds[st.As] = round
	}
	return nil
}

// eventKinds: a watch step's kinds, by the names the scenario file uses.
var eventKinds = map[string]m3.EventKind{
	"round_pending":      m3.EventRoundPending,
	"round_left_pending": m3.EventRoundLeftPending,
	"execution_finished": m3.EventExecutionFinished,
}

func eventLabel(ev m3.Event) string {
	switch ev.Kind {
	case m3.EventRoundLeftPending:
		return ev.Kind.String() + ":" + enumName(ev.Left.GetStatus())
	case m3.EventExecutionFinished:
		return ev.Kind.String() + ":" + enumName(ev.Finished.GetOutcome())
	}
	return ev.Kind.String()
}

// -- expectations --------------------------------------------------------------------

// expectation is a step's `expect` object; it remembers which keys the
// operation checked, so that a key it does not support fails the step.
type expectation struct {
	values map[string]any
	used   map[string]bool
}

func (e *expectation) get(key string) (any, bool) {
	v, ok := e.values[key]
	e.used[key] = true
	return v, ok
}

// equal compares an expected value with the actual one by their JSON forms
// (so 0 equals int32(0) and a list equals a []string).
func (e *expectation) equal(key string, actual any) error {
	want, ok := e.get(key)
	if !ok {
		return nil
	}
	return compare(key, actual, want)
}

// sortedList compares an expected list of strings, sorted, with a sorted actual one.
func (e *expectation) sortedList(key string, actual []string) error {
	want, ok := e.get(key)
	if !ok {
		return nil
	}
	items, isList := want.([]any)
	if !isList {
		return fmt.Errorf("bad step: expect %s must be a list", key)
	}
	wantStrings := make([]string, len(items))
	for i, item := range items {
		wantStrings[i] = fmt.Sprint(item)
	}
	sort.Strings(wantStrings)
	return compare(key, actual, wantStrings)
}

func (e *expectation) unused() []string {
	var out []string
	for key := range e.values {
		if !e.used[key] {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

func compare(what string, actual, expected any) error {
	a, _ := json.Marshal(actual)
	x, _ := json.Marshal(expected)
	if string(a) != string(x) {
		return fmt.Errorf("%s: expected %s, got %s", what, x, a)
	}
	return nil
}

// -- enums ---------------------------------------------------------------------------

// enumName is a proto enum value's name without its prefix, as the scenario
// file spells it: EXECUTION_OUTCOME_SUCCEEDED -> SUCCEEDED.
func enumName(e protoreflect.Enum) string {
	values := e.Descriptor().Values()
	v := values.ByNumber(e.Number())
	if v == nil {
		return strconv.Itoa(int(e.Number()))
	}
	return strings.TrimPrefix(string(v.Name()), enumPrefix(values))
}

func enumPrefix(values protoreflect.EnumValueDescriptors) string {
	return strings.TrimSuffix(string(values.ByNumber(0).Name()), "UNSPECIFIED")
}

// parseEnum reads an enum value named without its prefix (MANAGED, ACCEPT).
func parseEnum[E interface {
	protoreflect.Enum
	~int32
}](name string) (E, error) {
	var zero E
	values := zero.Descriptor().Values()
	v := values.ByName(protoreflect.Name(enumPrefix(values) + name))
	if v == nil {
		return zero, fmt.Errorf("bad step: %q is not a %s value", name, zero.Descriptor().Name())
	}
	return E(v.Number()), nil
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}
