/**
 * Typed M3 errors, decoded from the `grpc-status-details-bin` trailer.
 *
 * Every M3 error status is a `google.rpc.Status` whose details carry one
 * `google.rpc.ErrorInfo` (domain `m3grpc.dev`, reason from m3.v1.ErrorReason)
 * and, depending on the reason, `BadRequest`, `PreconditionFailure`,
 * `ResourceInfo` or `RetryInfo`. The reason picks the class; a status without
 * a known M3 reason (transport failures, a call deadline, an unknown reason)
 * becomes a plain `M3Error` that carries only what the status code says.
 */
import { fromBinary } from "@bufbuild/protobuf";
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import { anyUnpack, durationMs } from "@bufbuild/protobuf/wkt";
import type { Any } from "@bufbuild/protobuf/wkt";
import { ConnectError } from "@connectrpc/connect";
import { Code as RpcCode } from "./gen/google/rpc/code_pb.js";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  PreconditionFailureSchema,
  ResourceInfoSchema,
  RetryInfoSchema,
} from "./gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "./gen/google/rpc/status_pb.js";

/** The ErrorInfo domain of every M3 error. */
export const ERROR_DOMAIN = "m3grpc.dev";

/** A gRPC status code by its canonical name, e.g. `"INVALID_ARGUMENT"`. */
export type StatusCodeName = keyof typeof RpcCode;

/** One bad field of a request (from `google.rpc.BadRequest`). */
export interface FieldViolation {
  /** A path into the request, e.g. `responses['shipping_address'].content.city`. */
  readonly field: string;
  readonly description: string;
}

/** One failed precondition (from `google.rpc.PreconditionFailure`). */
export interface PreconditionViolation {
  /** The reason, e.g. `MANAGED_INPUT_STATE_INVALID`. */
  readonly type: string;
  /** The round ID, else the execution ID. */
  readonly subject: string;
  readonly description: string;
}

/** The resource an error is about (from `google.rpc.ResourceInfo`). */
export interface ResourceInfo {
  /** e.g. `m3grpc.dev/ElicitationRound`, `m3grpc.dev/Execution`, `m3grpc.dev/ServerBinding`. */
  readonly resourceType: string;
  readonly resourceName: string;
}

/** Everything an `M3Error` is built from. */
export interface M3ErrorInit {
  readonly code: StatusCodeName;
  /** The ErrorInfo reason; empty when the status carried no M3 ErrorInfo. */
  readonly reason?: string;
  readonly metadata?: Readonly<Record<string, string>>;
  readonly fieldViolations?: readonly FieldViolation[];
  readonly preconditionViolations?: readonly PreconditionViolation[];
  readonly resourceInfo?: ResourceInfo;
  readonly retryAfterSeconds?: number;
  readonly cause?: unknown;
}

/**
 * Base of every error `M3Client` throws. Instances of this class itself (not
 * a subclass) stand for a status without a known M3 reason: act on `code`.
 */
export class M3Error extends Error {
  /** The gRPC status code name, e.g. `"NOT_FOUND"`. */
  readonly code: StatusCodeName;
  /** The ErrorInfo reason, e.g. `"ROUND_NOT_FOUND"`; empty when there was none. */
  readonly reason: string;
  /** ErrorInfo metadata (all values are strings). */
  readonly metadata: Readonly<Record<string, string>>;
  /** BadRequest field violations; empty unless the request was invalid. */
  readonly fieldViolations: readonly FieldViolation[];
  /** PreconditionFailure violations; empty when none were sent. */
  readonly preconditionViolations: readonly PreconditionViolation[];
  /** ResourceInfo; set for the *_NOT_FOUND reasons. */
  readonly resourceInfo: ResourceInfo | undefined;
  /** RetryInfo's retry delay in seconds; set for WORK_QUEUE_FULL, RATE_LIMITED and STORAGE_UNAVAILABLE. */
  readonly retryAfterSeconds: number | undefined;

  constructor(message: string, init: M3ErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.reason = init.reason ?? "";
    this.metadata = init.metadata ?? {};
    this.fieldViolations = init.fieldViolations ?? [];
    this.preconditionViolations = init.preconditionViolations ?? [];
    this.resourceInfo = init.resourceInfo;
    this.retryAfterSeconds = init.retryAfterSeconds;
  }

  override toString(): string {
    const details = this.fieldViolations.map((v) => `${v.field}: ${v.description}`).join("; ");
    const head = `${this.name} [${this.code}${this.reason ? ` ${this.reason}` : ""}]: ${this.message}`;
    return details ? `${head} (${details})` : head;
  }
}

/** INVALID_ARGUMENT: a submission or another ExecutionService request is invalid. */
export class ModelValidationError extends M3Error {
  static readonly reason = "MODEL_VALIDATION_FAILED";
}

/** INVALID_ARGUMENT: a malformed managed-input request; the round is unchanged. */
export class ManagedInputInvalidError extends M3Error {
  static readonly reason = "MANAGED_INPUT_INVALID";
}

/** The documented values of ErrorInfo metadata `conflict_kind`. */
export type ConflictKind =
  | "stale_lease"
  | "idempotency_key_reused"
  | "concurrent_update"
  | "request_id_reused";

/** ABORTED: a write lost a race or reused a key; `conflictKind` says which. */
export class ManagedInputConflictError extends M3Error {
  static readonly reason = "MANAGED_INPUT_CONFLICT";

  /** From metadata `conflict_kind`; undefined for a value this client does not know. */
  get conflictKind(): ConflictKind | undefined {
    const kind = this.metadata["conflict_kind"];
    return CONFLICT_KINDS.find((known) => known === kind);
  }
}

const CONFLICT_KINDS: readonly ConflictKind[] = [
  "stale_lease",
  "idempotency_key_reused",
  "concurrent_update",
  "request_id_reused",
];

/** FAILED_PRECONDITION: the response or transition is invalid for the round's state. */
export class ManagedInputStateError extends M3Error {
  static readonly reason: string = "MANAGED_INPUT_STATE_INVALID";
}

/** NOT_FOUND: no round with that ID (a `ManagedInputStateError`, as in the Python client). */
export class RoundNotFoundError extends ManagedInputStateError {
  static override readonly reason = "ROUND_NOT_FOUND";
}

/** FAILED_PRECONDITION: the round cannot be recovered; no response can resume it. */
export class ManagedInputRecoveryError extends M3Error {
  static readonly reason = "MANAGED_INPUT_RECOVERY_UNAVAILABLE";
}

/** DEADLINE_EXCEEDED: an operation, or a round's deadline, ran out of time. */
export class OperationTimeoutError extends M3Error {
  static readonly reason: string = "OPERATION_TIMEOUT";
}

/** DEADLINE_EXCEEDED: `result()` waited its timeout; the execution keeps running. */
export class ResultWaitTimeoutError extends OperationTimeoutError {
  static override readonly reason = "RESULT_WAIT_TIMEOUT";
}

/** NOT_FOUND: no execution with that ID. */
export class ExecutionNotFoundError extends M3Error {
  static readonly reason = "EXECUTION_NOT_FOUND";
}

/** NOT_FOUND: the spec names a server binding the service does not have. */
export class ServerBindingNotFoundError extends M3Error {
  static readonly reason = "SERVER_BINDING_NOT_FOUND";
}

/** RESOURCE_EXHAUSTED: the work queue is full; retry after `retryAfterSeconds`. */
export class WorkQueueFullError extends M3Error {
  static readonly reason = "WORK_QUEUE_FULL";
}

/**
 * RESOURCE_EXHAUSTED: the caller's principal used up its rate limit for this
 * method (`metadata.method`); nothing was done. The same call (same request ID
 * or idempotency key) succeeds after `retryAfterSeconds`.
 */
export class RateLimitedError extends M3Error {
  static readonly reason = "RATE_LIMITED";
}

/** FAILED_PRECONDITION: no plan rule answered an elicitation (seen as a failure code). */
export class ElicitationNotAnsweredError extends M3Error {
  static readonly reason = "ELICITATION_NOT_ANSWERED";
}

/** FAILED_PRECONDITION: an operation asked more rounds than its round limit. */
export class RoundLimitExceededError extends M3Error {
  static readonly reason = "ROUND_LIMIT_EXCEEDED";
}

/** UNAVAILABLE: the service is shutting down; reconnect and resume with the last cursor. */
export class ServiceShuttingDownError extends M3Error {
  static readonly reason = "SERVICE_SHUTTING_DOWN";
}

/**
 * UNAUTHENTICATED: the call carried no credentials, or ones the service does not
 * accept; `metadata.credentials` is `missing` or `invalid`.
 */
export class UnauthenticatedError extends M3Error {
  static readonly reason = "UNAUTHENTICATED";
}

/**
 * UNAVAILABLE: the database is down, full, or refused the commit; nothing took
 * effect. Retry after `retryAfterSeconds` with the same request ID or idempotency key.
 */
export class StorageUnavailableError extends M3Error {
  static readonly reason = "STORAGE_UNAVAILABLE";
}

/**
 * INTERNAL: the service failed unexpectedly (reason `INTERNAL`, or status code
 * INTERNAL without an M3 reason). The request may or may not have taken effect.
 */
export class InternalError extends M3Error {
  static readonly reason = "INTERNAL";
}

/** A typed error class: constructible from an `M3ErrorInit`, with its ErrorInfo reason. */
export interface M3ErrorClass {
  new (message: string, init: M3ErrorInit): M3Error;
  readonly reason: string;
}

const CLASSES: readonly M3ErrorClass[] = [
  ModelValidationError,
  ManagedInputInvalidError,
  ManagedInputConflictError,
  ManagedInputStateError,
  RoundNotFoundError,
  ManagedInputRecoveryError,
  OperationTimeoutError,
  ResultWaitTimeoutError,
  ExecutionNotFoundError,
  ServerBindingNotFoundError,
  WorkQueueFullError,
  RateLimitedError,
  ElicitationNotAnsweredError,
  RoundLimitExceededError,
  ServiceShuttingDownError,
  UnauthenticatedError,
  StorageUnavailableError,
  InternalError,
];

const BY_REASON: ReadonlyMap<string, M3ErrorClass> = new Map(CLASSES.map((cls) => [cls.reason, cls]));

/** The typed error class of an ErrorInfo reason, or undefined for an unknown reason. */
export function errorClassFor(reason: string): M3ErrorClass | undefined {
  return BY_REASON.get(reason);
}

/** The `StatusCodeName` of a numeric gRPC status code (`"UNKNOWN"` for an invalid one). */
export function statusCodeName(code: number): StatusCodeName {
  const name = RpcCode[code];
  return name === undefined ? "UNKNOWN" : (name as StatusCodeName);
}

/**
 * The typed error a failed call stands for. A `ConnectError` (what the
 * transport throws) becomes an `M3Error` (a subclass for a known reason);
 * an `M3Error` is returned as is; anything else (a bug, not an RPC failure)
 * is returned unchanged.
 */
export function toM3Error(error: ConnectError | M3Error): M3Error;
export function toM3Error(error: unknown): unknown;
export function toM3Error(error: unknown): unknown {
  if (error instanceof M3Error || !(error instanceof ConnectError)) {
    return error;
  }
  const details = statusDetails(error);
  const info = unpackFirst(details, ErrorInfoSchema);
  const reason = info !== undefined && info.domain === ERROR_DOMAIN ? info.reason : "";
  const code = statusCodeName(error.code);
  const badRequest = unpackFirst(details, BadRequestSchema);
  const precondition = unpackFirst(details, PreconditionFailureSchema);
  const resource = unpackFirst(details, ResourceInfoSchema);
  const retry = unpackFirst(details, RetryInfoSchema);
  const init: M3ErrorInit = {
    code,
    reason,
    metadata: info !== undefined ? { ...info.metadata } : {},
    fieldViolations: (badRequest?.fieldViolations ?? []).map((v) => ({
      field: v.field,
      description: v.description,
    })),
    preconditionViolations: (precondition?.violations ?? []).map((v) => ({
      type: v.type,
      subject: v.subject,
      description: v.description,
    })),
    resourceInfo:
      resource === undefined
        ? undefined
        : { resourceType: resource.resourceType, resourceName: resource.resourceName },
    retryAfterSeconds:
      retry?.retryDelay === undefined ? undefined : durationMs(retry.retryDelay) / 1000,
    cause: error,
  };
  const cls = errorClassFor(reason) ?? (code === "INTERNAL" ? InternalError : M3Error);
  return new cls(error.rawMessage, init);
}

const STATUS_DETAILS_HEADER = "grpc-status-details-bin";

/**
 * The `google.rpc.Status` details of a failed call: decoded from the
 * `grpc-status-details-bin` trailer (which the gRPC transport keeps in the
 * error's metadata), else from the details the transport parsed itself.
 */
function statusDetails(error: ConnectError): readonly Any[] {
  const header = error.metadata.get(STATUS_DETAILS_HEADER);
  if (header !== null) {
    try {
      // A binary header is unpadded or padded base64; a repeated one is joined with ", ".
      const bytes = Buffer.from(header.split(",")[0]!.trim(), "base64");
      return fromBinary(StatusSchema, bytes).details;
    } catch {
      // Unreadable trailer: fall back to the transport's parsed details.
    }
  }
  return error.details.flatMap((detail): Any[] =>
    "type" in detail
      ? [
          {
            $typeName: "google.protobuf.Any",
            typeUrl: `type.googleapis.com/${detail.type}`,
            value: detail.value,
          },
        ]
      : [],
  );
}

function unpackFirst<Desc extends DescMessage>(
  details: readonly Any[],
  schema: Desc,
): MessageShape<Desc> | undefined {
  for (const detail of details) {
    try {
      const message = anyUnpack(detail, schema);
      if (message !== undefined) {
        return message;
      }
    } catch {
      // A detail whose bytes do not parse is skipped.
    }
  }
  return undefined;
}
