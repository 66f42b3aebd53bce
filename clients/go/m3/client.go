package m3

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	m3v1 "github.com/m3grpc/m3grpc/clients/go/gen/m3/v1"
)

// ResultDeadlineMargin is added to Result's timeout to get the call's gRPC
// deadline, so that the typed ErrResultWaitTimeout arrives before the
// call's own deadline cuts the wait short.
const ResultDeadlineMargin = 5 * time.Second

// WaitForever, as the timeout of Client.Result, waits until the execution
// finishes, bounded only by the context.
const WaitForever time.Duration = -1

// Client is a client of an M3 service (`m3grpc serve`). It is safe for
// concurrent use. Failed calls return an *Error (see errors.go) when the
// service sent an M3 error, and the gRPC error unchanged otherwise.
type Client struct {
	conn         *grpc.ClientConn // owned; nil when made with New
	executions   m3v1.ExecutionServiceClient
	elicitations m3v1.ElicitationServiceClient
}

// Dial makes a client of the service at target ("host:port"). By default
// the connection is plaintext (the service listens on loopback) and sends
// keepalive pings so idle WatchPending streams survive; opts are applied
// after those defaults (e.g. grpc.WithTransportCredentials for TLS). Dial
// does not wait for the service: the first call connects. Close the client
// when done.
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, PermitWithoutStream: true}),
	}, opts...)
	conn, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, fmt.Errorf("m3: dial %s: %w", target, err)
	}
	c := New(conn)
	c.conn = conn
	return c, nil
}

// New makes a client over an existing connection, which the caller keeps
// owning (Close does not close it).
func New(conn grpc.ClientConnInterface) *Client {
	return &Client{
		executions:   m3v1.NewExecutionServiceClient(conn),
		elicitations: m3v1.NewElicitationServiceClient(conn),
	}
}

// Close closes the connection Dial opened; it does nothing for a client
// made with New.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// ExecutionService is the generated ExecutionService stub, for calls this
// wrapper does not cover. Wrap its errors with FromError.
func (c *Client) ExecutionService() m3v1.ExecutionServiceClient { return c.executions }

// ElicitationService is the generated ElicitationService stub (GetRound,
// ListRounds, ...). Wrap its errors with FromError.
func (c *Client) ElicitationService() m3v1.ElicitationServiceClient { return c.elicitations }

// FromError converts the error of a generated-stub call as the client's own
// methods do: an *Error for any gRPC status, the error unchanged otherwise.
func FromError(err error) error { return wrapError(err) }

// Submit submits an agent run and returns at once with its initial state
// (usually QUEUED); GetExecutionId() names it in the other calls.
func (c *Client) Submit(ctx context.Context, spec AgentSpec, opts ...SubmitOption) (*ExecutionState, error) {
	agent := &m3v1.AgentSpec{
		Harness:          spec.Harness,
		Models:           spec.Models,
		Prompt:           spec.Prompt,
		Server:           spec.Server,
		Tools:            spec.Tools,
		Script:           spec.Script,
		ElicitationPlan:  spec.ElicitationPlan,
		PermissionPolicy: spec.PermissionPolicy,
		RoundLimit:       spec.RoundLimit,
	}
	if spec.RoundTimeout != 0 {
		agent.RoundTimeout = durationpb.New(spec.RoundTimeout)
	}
	return c.submit(ctx, &m3v1.SubmitRequest{Spec: &m3v1.SubmitRequest_Agent{Agent: agent}}, opts)
}

// SubmitOperation submits a single MCP operation without an agent.
// HumanInputManaged is not allowed with it.
func (c *Client) SubmitOperation(ctx context.Context, spec *m3v1.OperationSpec, opts ...SubmitOption) (*ExecutionState, error) {
	return c.submit(ctx, &m3v1.SubmitRequest{Spec: &m3v1.SubmitRequest_Operation{Operation: spec}}, opts)
}

func (c *Client) submit(ctx context.Context, req *m3v1.SubmitRequest, opts []SubmitOption) (*ExecutionState, error) {
	for _, opt := range opts {
		opt(req)
	}
	resp, err := c.executions.Submit(ctx, req)
	if err != nil {
		return nil, wrapError(err)
	}
	return resp.GetState(), nil
}

// ListServers returns the server bindings configured on the service (all
// of them, or those named), sorted by name. With includeTools the service
// connects to each server and lists its tools; a server that cannot be
// listed has GetToolsError set instead. An unknown name fails with
// ErrServerBindingNotFound (its metadata "known_servers" lists the names).
func (c *Client) ListServers(ctx context.Context, names []string, includeTools bool) ([]*ServerInfo, error) {
	resp, err := c.executions.ListServers(ctx, &m3v1.ListServersRequest{Names: names, IncludeTools: includeTools})
	if err != nil {
		return nil, wrapError(err)
	}
	return resp.GetServers(), nil
}

// Snapshot returns the execution's current state without waiting.
func (c *Client) Snapshot(ctx context.Context, executionID string) (*ExecutionState, error) {
	resp, err := c.executions.Snapshot(ctx, &m3v1.SnapshotRequest{ExecutionId: executionID})
	if err != nil {
		return nil, wrapError(err)
	}
	return resp.GetState(), nil
}

// Result waits up to timeout for the execution to finish and returns its
// terminal result. When the timeout runs out first it fails with
// ErrResultWaitTimeout and the execution keeps running. A zero timeout
// does not wait; WaitForever (any negative timeout) waits until the
// execution finishes, bounded only by ctx. The call's deadline is timeout +
// ResultDeadlineMargin, or ctx's if that is sooner.
func (c *Client) Result(ctx context.Context, executionID string, timeout time.Duration) (*ExecutionResult, error) {
	req := &m3v1.ResultRequest{ExecutionId: executionID}
	if timeout >= 0 {
		req.Timeout = durationpb.New(timeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+ResultDeadlineMargin)
		defer cancel()
	}
	resp, err := c.executions.Result(ctx, req)
	if err != nil {
		return nil, wrapError(err)
	}
	return resp.GetResult(), nil
}

// Cancel requests cancellation of the execution and returns its state.
// Cancellation is asynchronous (use Result to wait for the CANCELLED
// outcome); cancelling a finished execution changes nothing.
func (c *Client) Cancel(ctx context.Context, executionID string) (*ExecutionState, error) {
	resp, err := c.executions.Cancel(ctx, &m3v1.CancelRequest{ExecutionId: executionID})
	if err != nil {
		return nil, wrapError(err)
	}
	return resp.GetState(), nil
}

// GetPending returns the execution's pending round, or nil when none is
// pending. It fails with ErrManagedInputStateInvalid when storage holds
// more than one pending round for the execution.
func (c *Client) GetPending(ctx context.Context, executionID string) (*PendingRound, error) {
	resp, err := c.elicitations.GetPending(ctx, &m3v1.GetPendingRequest{ExecutionId: executionID})
	if err != nil {
		return nil, wrapError(err)
	}
	return resp.GetRound(), nil
}

// Respond answers every request of a pending round, keyed by request key
// (exactly the keys of the round's GetRequests()). Invalid responses fail
// with ErrManagedInputInvalid (see Error.FieldViolations) and leave the
// round pending. Respond is idempotent per idempotencyKey: repeating it
// with the same key and responses returns Replayed = true; reusing the key
// for other responses fails with ErrManagedInputConflict.
func (c *Client) Respond(ctx context.Context, roundID string, responses map[string]Response, idempotencyKey string) (*RespondResult, error) {
	wire := make(map[string]*m3v1.ElicitationResponse, len(responses))
	for key, r := range responses {
		msg := &m3v1.ElicitationResponse{Action: r.Action}
		if r.Content != nil {
			content, err := structpb.NewStruct(r.Content)
			if err != nil {
				return nil, fmt.Errorf("m3: responses[%q].content: %w", key, err)
			}
			msg.Content = content
		}
		wire[key] = msg
	}
	resp, err := c.elicitations.Respond(ctx, &m3v1.RespondRequest{
		RoundId:        roundID,
		Responses:      wire,
		IdempotencyKey: idempotencyKey,
	})
	if err != nil {
		return nil, wrapError(err)
	}
	return resp, nil
}
