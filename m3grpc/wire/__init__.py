"""The wire layer: the m3.v1 contract's generated code (`gen`) and every conversion
between its messages and M3's models, each concept with both directions side by side:

- `convert`     Struct, Timestamp, Duration and the enums
- `messages`    elicitation requests, rounds, responses, execution states and results
- `spec_codec`  execution specs <-> SubmitRequest
- `requests`    the remote client's request building (argument checks, Respond, Result waits)
- `events`      WatchPending events <-> typed events
- `status`      typed errors <-> google.rpc.Status (`status_for` / `error_from_status`)

It depends on the light model modules (`m3grpc.types`, `errors`, `specs`, `servers`,
`fieldpath`: pydantic and the standard library), grpcio, grpcio-status and protobuf;
never on the server's packages (runtime, storage, harness) or their dependencies
(sqlalchemy, mcp, jsonschema). See docs/architecture.md.
"""
