/** The TypeScript client of the M3 gRPC service (package m3.v1). */
export * from "./client.js";
export * from "./errors.js";
// The generated m3.v1 messages and enums (ExecutionOutcome, ManagedInputStatus, ...).
export * from "./gen/m3/v1/elicitation_pb.js";
export * from "./gen/m3/v1/elicitation_service_pb.js";
export * from "./gen/m3/v1/error_reason_pb.js";
export * from "./gen/m3/v1/execution_pb.js";
export * from "./gen/m3/v1/execution_service_pb.js";
