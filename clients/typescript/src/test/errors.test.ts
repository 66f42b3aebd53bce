/**
 * Error decoding: google.rpc.Status in grpc-status-details-bin -> typed M3Error.
 * The last tests go through a real gRPC round trip against an in-process
 * connect-node server (loopback), with no m3grpc service involved.
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import { anyPack, durationFromMs } from "@bufbuild/protobuf/wkt";
import type { Any } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  ERROR_DOMAIN,
  ErrorReason,
  ExecutionStatus,
  ExecutionNotFoundError,
  ExecutionService,
  InternalError,
  M3Client,
  M3Error,
  ManagedInputConflictError,
  ManagedInputInvalidError,
  ManagedInputStateError,
  ResultWaitTimeoutError,
  OperationTimeoutError,
  RoundNotFoundError,
  ManagedInputStatus,
  ModelValidationError,
  StorageUnavailableError,
  WatchEventKind,
  WorkQueueFullError,
  RateLimitedError,
  errorClassFor,
  toM3Error,
} from "../index.js";
import type { WatchEvent } from "../index.js";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  PreconditionFailureSchema,
  ResourceInfoSchema,
  RetryInfoSchema,
} from "../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../gen/google/rpc/status_pb.js";

function pack<Desc extends DescMessage>(schema: Desc, init: MessageInitShape<Desc>): Any {
  return anyPack(schema, create(schema, init));
}

/** A ConnectError as the gRPC transport builds it: the status trailer kept in `metadata`. */
function grpcError(code: Code, message: string, details: Any[], base64 = (b: Buffer) => b.toString("base64")): ConnectError {
  const status = create(StatusSchema, { code, message, details });
  const trailer = base64(Buffer.from(toBinary(StatusSchema, status)));
  return new ConnectError(message, code, { "grpc-status-details-bin": trailer });
}

function errorInfo(reason: string, metadata: Record<string, string> = {}): Any {
  return pack(ErrorInfoSchema, { reason, domain: ERROR_DOMAIN, metadata });
}

test("every ErrorReason has a typed class with that reason", () => {
  for (const [name, value] of Object.entries(ErrorReason)) {
    if (typeof value !== "number" || value === ErrorReason.UNSPECIFIED) {
      continue;
    }
    const cls = errorClassFor(name);
    assert.ok(cls, `no class for ${name}`);
    assert.equal(cls.reason, name);
  }
});

test("MANAGED_INPUT_INVALID with BadRequest", () => {
  const error = toM3Error(
    grpcError(Code.InvalidArgument, "the responses do not answer the pending round", [
      errorInfo("MANAGED_INPUT_INVALID", { round_id: "rnd_1" }),
      pack(BadRequestSchema, {
        fieldViolations: [
          { field: "responses['shipping_address']", description: "missing" },
          { field: "responses['wrong_key']", description: "unexpected" },
        ],
      }),
    ]),
  );
  assert.ok(error instanceof ManagedInputInvalidError);
  assert.equal(error.name, "ManagedInputInvalidError");
  assert.equal(error.code, "INVALID_ARGUMENT");
  assert.equal(error.reason, "MANAGED_INPUT_INVALID");
  assert.equal(error.message, "the responses do not answer the pending round");
  assert.deepEqual(error.metadata, { round_id: "rnd_1" });
  assert.deepEqual(
    error.fieldViolations.map((v) => v.field),
    ["responses['shipping_address']", "responses['wrong_key']"],
  );
  assert.ok(error.cause instanceof ConnectError);
});

test("MANAGED_INPUT_CONFLICT exposes conflictKind", () => {
  const error = toM3Error(
    grpcError(Code.Aborted, "key reused", [
      errorInfo("MANAGED_INPUT_CONFLICT", { conflict_kind: "idempotency_key_reused", round_id: "rnd_1" }),
    ]),
  );
  assert.ok(error instanceof ManagedInputConflictError);
  assert.equal(error.code, "ABORTED");
  assert.equal(error.conflictKind, "idempotency_key_reused");
});

test("ROUND_NOT_FOUND is a ManagedInputStateError with ResourceInfo (unpadded base64 trailer)", () => {
  const error = toM3Error(
    grpcError(
      Code.NotFound,
      "no round",
      [
        errorInfo("ROUND_NOT_FOUND", { round_id: "rnd_x" }),
        pack(ResourceInfoSchema, { resourceType: "m3grpc.dev/ElicitationRound", resourceName: "rnd_x" }),
      ],
      (b) => b.toString("base64").replace(/=+$/, ""),
    ),
  );
  assert.ok(error instanceof RoundNotFoundError);
  assert.ok(error instanceof ManagedInputStateError);
  assert.equal(error.code, "NOT_FOUND");
  assert.deepEqual(error.resourceInfo, { resourceType: "m3grpc.dev/ElicitationRound", resourceName: "rnd_x" });
});

test("MANAGED_INPUT_STATE_INVALID carries PreconditionFailure", () => {
  const error = toM3Error(
    grpcError(Code.FailedPrecondition, "round is failed", [
      errorInfo("MANAGED_INPUT_STATE_INVALID", { round_id: "rnd_1", status: "failed" }),
      pack(PreconditionFailureSchema, {
        violations: [{ type: "MANAGED_INPUT_STATE_INVALID", subject: "rnd_1", description: "round is failed" }],
      }),
    ]),
  );
  assert.ok(error instanceof ManagedInputStateError);
  assert.ok(!(error instanceof RoundNotFoundError));
  assert.deepEqual(error.preconditionViolations, [
    { type: "MANAGED_INPUT_STATE_INVALID", subject: "rnd_1", description: "round is failed" },
  ]);
});

test("WORK_QUEUE_FULL carries retryAfterSeconds from RetryInfo", () => {
  const error = toM3Error(
    grpcError(Code.ResourceExhausted, "queue full", [
      errorInfo("WORK_QUEUE_FULL", { queue_capacity: "256" }),
      pack(RetryInfoSchema, { retryDelay: durationFromMs(1500) }),
    ]),
  );
  assert.ok(error instanceof WorkQueueFullError);
  assert.equal(error.retryAfterSeconds, 1.5);
  assert.equal(error.metadata["queue_capacity"], "256");
});

test("STORAGE_UNAVAILABLE is retryable after its RetryInfo delay", () => {
  const error = toM3Error(
    grpcError(Code.Unavailable, "database down", [
      errorInfo("STORAGE_UNAVAILABLE"),
      pack(RetryInfoSchema, { retryDelay: durationFromMs(1000) }),
    ]),
  );
  assert.ok(error instanceof StorageUnavailableError);
  assert.equal(error.code, "UNAVAILABLE");
  assert.equal(error.retryAfterSeconds, 1);
});

test("RATE_LIMITED carries retryAfterSeconds from RetryInfo", () => {
  const error = toM3Error(
    grpcError(Code.ResourceExhausted, "rate limit of Submit reached", [
      errorInfo("RATE_LIMITED", { method: "Submit", per_second: "0.5", burst: "2" }),
      pack(RetryInfoSchema, { retryDelay: durationFromMs(250) }),
    ]),
  );
  assert.ok(error instanceof RateLimitedError);
  assert.equal(error.code, "RESOURCE_EXHAUSTED");
  assert.equal(error.retryAfterSeconds, 0.25);
  assert.equal(error.metadata["method"], "Submit");
});

test("RESULT_WAIT_TIMEOUT is an OperationTimeoutError", () => {
  const error = toM3Error(grpcError(Code.DeadlineExceeded, "still running", [errorInfo("RESULT_WAIT_TIMEOUT")]));
  assert.ok(error instanceof ResultWaitTimeoutError);
  assert.ok(error instanceof OperationTimeoutError);
  assert.equal(error.code, "DEADLINE_EXCEEDED");
});

test("INTERNAL, unknown reasons, foreign domains and bare statuses", () => {
  const internal = toM3Error(grpcError(Code.Internal, "internal error", [errorInfo("INTERNAL")]));
  assert.ok(internal instanceof InternalError);

  const bareInternal = toM3Error(new ConnectError("boom", Code.Internal));
  assert.ok(bareInternal instanceof InternalError);
  assert.equal(bareInternal.reason, "");

  const unknown = toM3Error(grpcError(Code.FailedPrecondition, "new", [errorInfo("SOMETHING_NEW", { a: "b" })]));
  assert.equal(unknown.constructor, M3Error);
  assert.equal(unknown.code, "FAILED_PRECONDITION");
  assert.equal(unknown.reason, "SOMETHING_NEW");
  assert.deepEqual(unknown.metadata, { a: "b" });

  const foreign = toM3Error(
    grpcError(Code.NotFound, "elsewhere", [pack(ErrorInfoSchema, { reason: "EXECUTION_NOT_FOUND", domain: "example.com" })]),
  );
  assert.equal(foreign.constructor, M3Error);
  assert.equal(foreign.reason, "");

  const transport = toM3Error(new ConnectError("connect ECONNREFUSED", Code.Unavailable));
  assert.equal(transport.constructor, M3Error);
  assert.equal(transport.code, "UNAVAILABLE");
});

test("details parsed by the transport are used when the trailer is absent", () => {
  const error = new ConnectError("no execution", Code.NotFound);
  const info = create(ErrorInfoSchema, { reason: "EXECUTION_NOT_FOUND", domain: ERROR_DOMAIN, metadata: { execution_id: "e" } });
  error.details = [{ type: "google.rpc.ErrorInfo", value: toBinary(ErrorInfoSchema, info) }];
  const typed = toM3Error(error);
  assert.ok(typed instanceof ExecutionNotFoundError);
  assert.deepEqual(typed.metadata, { execution_id: "e" });
});

test("non-RPC errors pass through unchanged", () => {
  const bug = new TypeError("bug");
  assert.equal(toM3Error(bug), bug);
});

// --- through a real gRPC round trip (in-process connect-node server on loopback) -------

async function withServer(
  routes: (router: ConnectRouter) => void,
  body: (client: M3Client) => Promise<void>,
): Promise<void> {
  const server = http2.createServer(connectNodeAdapter({ routes }));
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  const { port } = server.address() as AddressInfo;
  const client = new M3Client(`127.0.0.1:${port}`);
  try {
    await body(client);
  } finally {
    client.close();
    await new Promise<void>((closed) => server.close(() => closed()));
  }
}

test("a status with details sent over gRPC becomes the typed error", async () => {
  await withServer(
    (router) =>
      router.service(ExecutionService, {
        snapshot(request) {
          throw new ConnectError(`no execution '${request.executionId}'`, Code.NotFound, undefined, [
            { desc: ErrorInfoSchema, value: { reason: "EXECUTION_NOT_FOUND", domain: ERROR_DOMAIN, metadata: { execution_id: request.executionId } } },
            { desc: ResourceInfoSchema, value: { resourceType: "m3grpc.dev/Execution", resourceName: request.executionId } },
          ]);
        },
      }),
    async (client) => {
      await assert.rejects(client.snapshot("exe_missing"), (error: unknown) => {
        assert.ok(error instanceof ExecutionNotFoundError);
        assert.equal(error.code, "NOT_FOUND");
        assert.equal(error.message, "no execution 'exe_missing'");
        assert.deepEqual(error.metadata, { execution_id: "exe_missing" });
        assert.equal(error.resourceInfo?.resourceName, "exe_missing");
        return true;
      });
    },
  );
});

test("watchPending yields typed events with cursors, and typed errors", async () => {
  const requestedKinds: WatchEventKind[][] = [];
  await withServer(
    (router) =>
      router.service(ExecutionService, {
        async *watchPending(request) {
          requestedKinds.push([...request.kinds]);
          if (request.cursor === "bad") {
            throw new ConnectError("unreadable cursor", Code.InvalidArgument, undefined, [
              { desc: ErrorInfoSchema, value: { reason: "MANAGED_INPUT_INVALID", domain: ERROR_DOMAIN } },
              { desc: BadRequestSchema, value: { fieldViolations: [{ field: "cursor", description: "unreadable" }] } },
            ]);
          }
          yield { cursor: "c1", event: { case: "roundPending", value: { roundId: "rnd_1", executionId: request.executionId } } };
          yield {
            cursor: "c2",
            event: { case: "roundLeftPending", value: { roundId: "rnd_1", executionId: request.executionId, status: ManagedInputStatus.RESPONSE_VALIDATED } },
          };
          yield {
            cursor: "c3",
            event: { case: "executionFinished", value: { executionId: request.executionId, lifecycle: ExecutionStatus.FINISHED } },
          };
        },
      }),
    async (client) => {
      const events: WatchEvent[] = [];
      for await (const event of client.watchPending({ executionId: "exe_1" })) {
        events.push(event);
      }
      assert.deepEqual(
        events.map((e) => [e.kind, e.cursor]),
        [
          ["round_pending", "c1"],
          ["round_left_pending", "c2"],
          ["execution_finished", "c3"],
        ],
      );
      const first = events[0];
      assert.ok(first?.kind === "round_pending" && first.round.roundId === "rnd_1");

      // Breaking out early ends the stream cleanly.
      for await (const event of client.watchPending({ executionId: "exe_1", kinds: ["round_pending", "execution_finished"] })) {
        assert.equal(event.cursor, "c1");
        break;
      }
      for await (const _ of client.watchPending({ kinds: ["round_left_pending"] })) {
        break;
      }
      // The kind strings reach the request as WatchEventKind numbers; none: every kind.
      assert.deepEqual(requestedKinds, [
        [],
        [WatchEventKind.ROUND_PENDING, WatchEventKind.EXECUTION_FINISHED],
        [WatchEventKind.ROUND_LEFT_PENDING],
      ]);

      // An unknown kind (untyped JS) fails before any request, as the service would.
      await assert.rejects(
        (async () => {
          const kinds = ["round_pending", "bogus"] as unknown as WatchEvent["kind"][];
          for await (const _ of client.watchPending({ kinds })) {
            // no events expected
          }
        })(),
        (error: unknown) => {
          assert.ok(error instanceof ModelValidationError);
          assert.equal(error.fieldViolations[0]?.field, "kinds[1]");
          return true;
        },
      );
      assert.equal(requestedKinds.length, 3);

      await assert.rejects(
        (async () => {
          for await (const _ of client.watchPending({ executionId: "exe_1", cursor: "bad" })) {
            // no events expected
          }
        })(),
        (error: unknown) => {
          assert.ok(error instanceof ManagedInputInvalidError);
          assert.deepEqual(error.fieldViolations, [{ field: "cursor", description: "unreadable" }]);
          return true;
        },
      );
    },
  );
});
