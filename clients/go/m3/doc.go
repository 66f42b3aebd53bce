// Package m3 is the Go client of the M3 gRPC service (package m3.v1): it
// submits executions, reads and answers their managed-input rounds, and
// watches pending rounds as an iterator.
//
//	client, err := m3.Dial("127.0.0.1:50051")
//	...
//	exe, err := client.Submit(ctx, m3.AgentSpec{Harness: "scripted", Server: "shipping",
//		Tools: []string{"shipping:book_shipment"}}, m3.WithHumanInput(m3.HumanInputManaged))
//	round, err := client.GetPending(ctx, exe.GetExecutionId()) // nil until a round is pending
//	_, err = client.Respond(ctx, round.GetRoundId(), map[string]m3.Response{
//		"shipping_address": m3.Accept(map[string]any{"street": "1 Main Street", "city": "Pune"}),
//	}, "address-"+round.GetRoundId())
//	result, err := client.Result(ctx, exe.GetExecutionId(), time.Minute)
//
// Errors: a failed call returns an *Error (use errors.As) carrying the
// status code, the google.rpc.ErrorInfo reason and metadata, the BadRequest
// field violations and the RetryInfo delay; errors.Is matches it against the
// Err* sentinel of its reason (e.g. ErrManagedInputInvalid). A status
// without an M3 ErrorInfo (a transport failure, a context's deadline) is an
// *Error too, with an empty Reason: act on its Code (INTERNAL matches
// ErrInternal).
//
// The generated stubs and messages are in package
// github.com/m3grpc/m3grpc/clients/go/gen/m3/v1 (import it as m3v1).
package m3
