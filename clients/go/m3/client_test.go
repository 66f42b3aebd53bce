package m3_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	m3v1 "github.com/m3grpc/m3grpc/clients/go/gen/m3/v1"
	"github.com/m3grpc/m3grpc/clients/go/m3"
)

// fakeService records requests and answers with canned responses, over a
// real gRPC transport (bufconn), so details survive the wire as they would.
type fakeService struct {
	m3v1.UnimplementedExecutionServiceServer
	m3v1.UnimplementedElicitationServiceServer

	submitted      *m3v1.SubmitRequest
	responded      *m3v1.RespondRequest
	resultDeadline time.Duration
	watched        *m3v1.WatchPendingRequest
	watchEvents    []*m3v1.WatchPendingResponse
	watchEnd       error
	watchClosed    chan struct{}
}

func (f *fakeService) Submit(_ context.Context, req *m3v1.SubmitRequest) (*m3v1.SubmitResponse, error) {
	f.submitted = req
	if req.GetAgent().GetServer() == "nowhere" {
		st, _ := status.New(codes.NotFound, "no server binding 'nowhere'").WithDetails(
			&errdetails.ErrorInfo{Reason: "SERVER_BINDING_NOT_FOUND", Domain: m3.ErrorDomain,
				Metadata: map[string]string{"server": "nowhere"}},
			&errdetails.ResourceInfo{ResourceType: "m3grpc.dev/ServerBinding", ResourceName: "nowhere"})
		return nil, st.Err()
	}
	state := &m3v1.ExecutionState{ExecutionId: "exe_1", Lifecycle: m3.ExecutionStatusQueued}
	return &m3v1.SubmitResponse{ExecutionId: "exe_1", State: state}, nil
}

func (f *fakeService) Result(ctx context.Context, req *m3v1.ResultRequest) (*m3v1.ResultResponse, error) {
	if d, ok := ctx.Deadline(); ok {
		f.resultDeadline = time.Until(d)
	}
	return &m3v1.ResultResponse{Result: &m3v1.ExecutionResult{ExecutionId: req.GetExecutionId(), Outcome: m3.OutcomeSucceeded}}, nil
}

func (f *fakeService) GetPending(_ context.Context, req *m3v1.GetPendingRequest) (*m3v1.GetPendingResponse, error) {
	if req.GetExecutionId() == "exe_idle" {
		return &m3v1.GetPendingResponse{}, nil
	}
	return &m3v1.GetPendingResponse{Round: &m3v1.PendingElicitationRound{RoundId: "rnd_1", ExecutionId: req.GetExecutionId()}}, nil
}

func (f *fakeService) Respond(_ context.Context, req *m3v1.RespondRequest) (*m3v1.RespondResponse, error) {
	f.responded = req
	return &m3v1.RespondResponse{RoundId: req.GetRoundId(), Status: m3.ManagedInputStatusResponseValidated}, nil
}

func (f *fakeService) WatchPending(req *m3v1.WatchPendingRequest, stream grpc.ServerStreamingServer[m3v1.WatchPendingResponse]) error {
	defer close(f.watchClosed)
	f.watched = req
	for _, ev := range f.watchEvents {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	if f.watchEnd != nil {
		return f.watchEnd
	}
	if req.GetExecutionId() != "" {
		return nil // a filtered stream ends after the execution finished
	}
	<-stream.Context().Done() // an unfiltered stream runs until the client leaves
	return stream.Context().Err()
}

func startFake(t *testing.T, f *fakeService) *m3.Client {
	t.Helper()
	f.watchClosed = make(chan struct{})
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	m3v1.RegisterExecutionServiceServer(srv, f)
	m3v1.RegisterElicitationServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return m3.New(conn)
}

func TestSubmitBuildsTheRequest(t *testing.T) {
	f := &fakeService{}
	c := startFake(t, f)
	state, err := c.Submit(context.Background(), m3.AgentSpec{
		Harness: "scripted", Prompt: "Book it.", Server: "shipping",
		Tools: []string{"shipping:book_shipment"}, RoundTimeout: 1500 * time.Millisecond,
	}, m3.WithHumanInput(m3.HumanInputManaged), m3.WithRequestID("req-1"))
	if err != nil {
		t.Fatal(err)
	}
	if state.GetExecutionId() != "exe_1" {
		t.Errorf("state = %v", state)
	}
	want := &m3v1.SubmitRequest{
		Spec: &m3v1.SubmitRequest_Agent{Agent: &m3v1.AgentSpec{
			Harness: "scripted", Prompt: "Book it.", Server: "shipping",
			Tools:        []string{"shipping:book_shipment"},
			RoundTimeout: &durationpb.Duration{Seconds: 1, Nanos: 500_000_000},
		}},
		HumanInput: m3v1.HumanInput_HUMAN_INPUT_MANAGED,
		RequestId:  "req-1",
	}
	if !proto.Equal(f.submitted, want) {
		t.Errorf("submitted %v\nwant      %v", f.submitted, want)
	}

	// No round timeout: the field stays unset (rounds wait indefinitely).
	if _, err := c.Submit(context.Background(), m3.AgentSpec{Harness: "scripted", Server: "shipping"}); err != nil {
		t.Fatal(err)
	}
	if f.submitted.GetAgent().GetRoundTimeout() != nil || f.submitted.GetHumanInput() != m3v1.HumanInput_HUMAN_INPUT_UNSPECIFIED {
		t.Errorf("submitted %v", f.submitted)
	}
}

func TestErrorsCrossTheWire(t *testing.T) {
	c := startFake(t, &fakeService{})
	_, err := c.Submit(context.Background(), m3.AgentSpec{Harness: "scripted", Server: "nowhere"})
	var e *m3.Error
	if !errors.As(err, &e) || !errors.Is(err, m3.ErrServerBindingNotFound) {
		t.Fatalf("err = %v", err)
	}
	if e.Code != codes.NotFound || e.Metadata["server"] != "nowhere" || e.Resource.GetResourceType() != "m3grpc.dev/ServerBinding" {
		t.Errorf("got %+v", e)
	}
	// A method the service does not implement: an *Error without a reason.
	_, err = c.Snapshot(context.Background(), "exe_1")
	if !errors.As(err, &e) || e.Reason != "" || e.Code != codes.Unimplemented || status.Code(err) != codes.Unimplemented {
		t.Errorf("err = %v", err)
	}
}

func TestResultDeadlineCoversTheTimeout(t *testing.T) {
	f := &fakeService{}
	c := startFake(t, f)
	res, err := c.Result(context.Background(), "exe_1", 2*time.Second)
	if err != nil || res.GetOutcome() != m3.OutcomeSucceeded {
		t.Fatalf("Result = %v, %v", res, err)
	}
	if f.resultDeadline <= 2*time.Second || f.resultDeadline > 2*time.Second+m3.ResultDeadlineMargin {
		t.Errorf("call deadline %v, want in (2s, 2s+margin]", f.resultDeadline)
	}
	f.resultDeadline = 0
	if _, err := c.Result(context.Background(), "exe_1", m3.WaitForever); err != nil {
		t.Fatal(err)
	}
	if f.resultDeadline != 0 {
		t.Errorf("WaitForever set a call deadline of %v", f.resultDeadline)
	}
}

func TestGetPendingAndRespond(t *testing.T) {
	f := &fakeService{}
	c := startFake(t, f)
	ctx := context.Background()
	round, err := c.GetPending(ctx, "exe_idle")
	if err != nil || round != nil {
		t.Fatalf("GetPending(idle) = %v, %v; want nil, nil", round, err)
	}
	round, err = c.GetPending(ctx, "exe_1")
	if err != nil || round.GetRoundId() != "rnd_1" {
		t.Fatalf("GetPending = %v, %v", round, err)
	}
	res, err := c.Respond(ctx, round.GetRoundId(), map[string]m3.Response{
		"address": m3.Accept(map[string]any{"street": "1 Main Street", "floor": 3}),
		"consent": m3.Decline(),
		"other":   m3.Dismiss(),
	}, "key-1")
	if err != nil || res.GetStatus() != m3.ManagedInputStatusResponseValidated || res.GetReplayed() {
		t.Fatalf("Respond = %v, %v", res, err)
	}
	got := f.responded
	if got.GetIdempotencyKey() != "key-1" || got.GetRoundId() != "rnd_1" {
		t.Errorf("responded %v", got)
	}
	address := got.GetResponses()["address"]
	if address.GetAction() != m3.ActionAccept || address.GetContent().AsMap()["floor"] != float64(3) {
		t.Errorf("address = %v", address)
	}
	if got.GetResponses()["consent"].GetContent() != nil || got.GetResponses()["other"].GetAction() != m3.ActionCancel {
		t.Errorf("responses = %v", got.GetResponses())
	}
	// Content that is not JSON fails locally, before any call.
	if _, err := c.Respond(ctx, "rnd_1", map[string]m3.Response{"x": m3.Accept(map[string]any{"f": func() {}})}, "k"); err == nil {
		t.Error("Respond with non-JSON content succeeded")
	}
}

func watchEvents() []*m3v1.WatchPendingResponse {
	return []*m3v1.WatchPendingResponse{
		{Cursor: "c1", Event: &m3v1.WatchPendingResponse_RoundPending{RoundPending: &m3v1.PendingElicitationRound{RoundId: "rnd_1"}}},
		{Cursor: "c2", Event: &m3v1.WatchPendingResponse_RoundLeftPending{RoundLeftPending: &m3v1.RoundLeftPending{RoundId: "rnd_1", Status: m3.ManagedInputStatusResponseValidated}}},
		{Cursor: "c3"}, // an event kind this client does not know: skipped
		{Cursor: "c4", Event: &m3v1.WatchPendingResponse_ExecutionFinished{ExecutionFinished: &m3v1.ExecutionState{Outcome: m3.OutcomeSucceeded}}},
	}
}

func TestWatchPendingUntilTheServerEndsIt(t *testing.T) {
	f := &fakeService{watchEvents: watchEvents()}
	c := startFake(t, f)
	var kinds, cursors []string
	for ev, err := range c.WatchPending(context.Background(), m3.WatchOptions{ExecutionID: "exe_1"}) {
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, ev.Kind.String())
		cursors = append(cursors, ev.Cursor)
		switch ev.Kind {
		case m3.EventRoundPending:
			if ev.Round.GetRoundId() != "rnd_1" {
				t.Errorf("round = %v", ev.Round)
			}
		case m3.EventRoundLeftPending:
			if ev.Left.GetStatus() != m3.ManagedInputStatusResponseValidated {
				t.Errorf("left = %v", ev.Left)
			}
		case m3.EventExecutionFinished:
			if ev.Finished.GetOutcome() != m3.OutcomeSucceeded {
				t.Errorf("finished = %v", ev.Finished)
			}
		}
	}
	if got := strings.Join(kinds, ",") + " " + strings.Join(cursors, ","); got != "round_pending,round_left_pending,execution_finished c1,c2,c4" {
		t.Errorf("events = %s", got)
	}
}

func TestWatchPendingSendsTheKinds(t *testing.T) {
	f := &fakeService{watchEvents: watchEvents()}
	c := startFake(t, f)
	opts := m3.WatchOptions{ExecutionID: "exe_1", Kinds: []m3.EventKind{m3.EventExecutionFinished, m3.EventRoundPending}}
	for _, err := range c.WatchPending(context.Background(), opts) {
		if err != nil {
			t.Fatal(err)
		}
	}
	<-f.watchClosed // the request was recorded before
	want := []m3v1.WatchEventKind{
		m3v1.WatchEventKind_WATCH_EVENT_KIND_EXECUTION_FINISHED,
		m3v1.WatchEventKind_WATCH_EVENT_KIND_ROUND_PENDING,
	}
	if got := f.watched.GetKinds(); !slices.Equal(got, want) {
		t.Errorf("kinds = %v, want %v", got, want)
	}
}

func TestWatchPendingRejectsAnUnknownKind(t *testing.T) {
	c := startFake(t, &fakeService{})
	var failures []error
	for _, err := range c.WatchPending(context.Background(), m3.WatchOptions{Kinds: []m3.EventKind{m3.EventRoundPending, 0}}) {
		failures = append(failures, err)
	}
	if len(failures) != 1 || failures[0] == nil || !strings.Contains(failures[0].Error(), "kinds[1]") {
		t.Errorf("failures = %v", failures)
	}
}

func TestWatchPendingBreakClosesTheStream(t *testing.T) {
	f := &fakeService{watchEvents: watchEvents()[:1]}
	c := startFake(t, f)
	for ev, err := range c.WatchPending(context.Background(), m3.WatchOptions{}) {
		if err != nil || ev.Cursor != "c1" {
			t.Fatalf("ev = %v, err = %v", ev, err)
		}
		break
	}
	select {
	case <-f.watchClosed:
	case <-time.After(5 * time.Second):
		t.Fatal("the server stream was not closed after the loop broke")
	}
}

func TestWatchPendingYieldsTheFailureLast(t *testing.T) {
	st, _ := status.New(codes.Unavailable, "shutting down").WithDetails(
		&errdetails.ErrorInfo{Reason: "SERVICE_SHUTTING_DOWN", Domain: m3.ErrorDomain})
	f := &fakeService{watchEvents: watchEvents()[:1], watchEnd: st.Err()}
	c := startFake(t, f)
	var last string
	var failure error
	for ev, err := range c.WatchPending(context.Background(), m3.WatchOptions{ExecutionID: "exe_1"}) {
		if err != nil {
			failure = err
			continue
		}
		last = ev.Cursor
	}
	if last != "c1" || !errors.Is(failure, m3.ErrServiceShuttingDown) {
		t.Errorf("last cursor %q, failure %v", last, failure)
	}
}

// listServersFake answers ListServers like the service: the named bindings, or
// SERVER_BINDING_NOT_FOUND with the known names.
type listServersFake struct {
	fakeService
	got *m3v1.ListServersRequest
}

func (f *listServersFake) ListServers(_ context.Context, req *m3v1.ListServersRequest) (*m3v1.ListServersResponse, error) {
	f.got = req
	for _, name := range req.GetNames() {
		if name != "shipping" {
			st, _ := status.New(codes.NotFound, "no server binding named '"+name+"'; configured: shipping").WithDetails(
				&errdetails.ErrorInfo{Reason: "SERVER_BINDING_NOT_FOUND", Domain: m3.ErrorDomain,
					Metadata: map[string]string{"server": name, "known_servers": "shipping"}})
			return nil, st.Err()
		}
	}
	info := &m3v1.ServerInfo{Name: "shipping", Transport: m3v1.ServerTransport_SERVER_TRANSPORT_STDIO}
	if req.GetIncludeTools() {
		info.Tools = []*m3v1.ToolInfo{{Name: "book_shipment", Description: "Book a shipment."}}
	}
	return &m3v1.ListServersResponse{Servers: []*m3v1.ServerInfo{info}}, nil
}

func TestListServers(t *testing.T) {
	f := &listServersFake{}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	m3v1.RegisterExecutionServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := m3.New(conn)
	t.Cleanup(func() { _ = c.Close() })

	servers, err := c.ListServers(context.Background(), []string{"shipping"}, true)
	if err != nil || len(servers) != 1 || servers[0].GetTools()[0].GetName() != "book_shipment" {
		t.Fatalf("ListServers = %v, %v", servers, err)
	}
	if !f.got.GetIncludeTools() || len(f.got.GetNames()) != 1 {
		t.Errorf("request = %v", f.got)
	}
	_, err = c.ListServers(context.Background(), []string{"shiping"}, false)
	var e *m3.Error
	if !errors.Is(err, m3.ErrServerBindingNotFound) || !errors.As(err, &e) || e.Metadata["known_servers"] != "shipping" {
		t.Errorf("err = %v", err)
	}
}
