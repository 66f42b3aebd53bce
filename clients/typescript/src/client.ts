/**
 * M3Client: a thin wrapper over the generated m3.v1 stubs, speaking the gRPC
 * protocol over HTTP/2 with @connectrpc/connect-node: plaintext (h2c) by
 * default, TLS (optionally mutual) with `tls`, a bearer token with `token`.
 *
 * Inputs use plain values ("managed", "accept", seconds); outputs are the
 * generated protobuf-es messages (enums such as `ExecutionOutcome.SUCCEEDED`
 * are re-exported from the package). Every failed call throws an `M3Error`
 * (a subclass per ErrorInfo reason, see errors.ts).
 */
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { createClient } from "@connectrpc/connect";
import type { CallOptions as ConnectCallOptions, Client, Interceptor } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { InternalError, ModelValidationError, toM3Error } from "./errors.js";
import { ElicitationAction } from "./gen/m3/v1/elicitation_pb.js";
import type { PendingElicitationRound, ManagedInputStatus } from "./gen/m3/v1/elicitation_pb.js";
import { ElicitationService } from "./gen/m3/v1/elicitation_service_pb.js";
import type { RespondResponse } from "./gen/m3/v1/elicitation_service_pb.js";
import { HumanInput } from "./gen/m3/v1/execution_pb.js";
import type {
  ElicitationPlanSchema,
  ExecutionResult,
  ExecutionState,
  OperationStepSchema,
  PermissionPolicy,
} from "./gen/m3/v1/execution_pb.js";
import { ExecutionService, WatchEventKind } from "./gen/m3/v1/execution_service_pb.js";
import type { ServerInfo, SubmitResponse, WatchPendingResponse } from "./gen/m3/v1/execution_service_pb.js";

/** What happens at an elicitation no plan answers (`HumanInput`). */
export type HumanInputMode = "fail" | "managed";

/** How one elicitation request is answered (`ElicitationAction`). */
export type ResponseAction = "accept" | "decline" | "cancel";

/** One answer to one request of a round. */
export interface ElicitationAnswer {
  readonly action: ResponseAction;
  /** The accepted content of a form request; omit it for URL, decline and cancel. */
  readonly content?: JsonObject;
}

/** Per-call options. */
export interface CallOptions {
  /** Aborting it cancels the call (it then fails with code CANCELLED). */
  readonly signal?: AbortSignal;
  /** The call's deadline in milliseconds; overrides the client's `timeoutMs`. */
  readonly timeoutMs?: number;
  /** Metadata (request headers) of this call, added to the client's `metadata`. */
  readonly metadata?: Readonly<Record<string, string>>;
}

/** TLS for the connection; each PEM is the file's contents (a string or a Buffer). */
export interface TlsOptions {
  /** The CA that signed the server's certificate; default: Node's built-in roots. */
  readonly rootCa?: string | Buffer;
  /** This client's certificate and key (mutual TLS); give both or neither. */
  readonly clientCert?: string | Buffer;
  readonly clientKey?: string | Buffer;
  /** The name to verify the server's certificate against (and send as SNI). */
  readonly serverName?: string;
}

/** Options of `new M3Client(target, options)`. */
export interface M3ClientOptions {
  /**
   * The deadline, in milliseconds, of every call except `result()` waits and
   * `watchPending()` streams. Default 30 000; `null`: no deadline.
   */
  readonly timeoutMs?: number | null;
  /**
   * Connect interceptors run on every call, e.g. one that injects the active
   * OpenTelemetry trace context (`traceparent`) into the request headers, so the
   * service's spans join the caller's trace.
   */
  readonly interceptors?: Interceptor[];
  /** Connect with TLS (`https`); without it plaintext h2c, unless the target is an `https://` URL. */
  readonly tls?: TlsOptions;
  /** A bearer token, sent with every call as `authorization: Bearer <token>`. */
  readonly token?: string;
  /** Metadata (request headers) sent with every call. */
  readonly metadata?: Readonly<Record<string, string>>;
}

/**
 * A harness that runs the agent: `"scripted"` (built in; runs `script`), `"codex"`
 * (OpenAI's Codex CLI), `"claude-code"` (Anthropic's Claude Code CLI), or another the
 * service registers.
 */
export type Harness = "scripted" | "codex" | "claude-code" | (string & {});

/** An agent run (the fields of `AgentSpec`) plus how to submit it. */
export interface SubmitOptions {
  /** The name of a server binding configured on the service, e.g. `"shipping"`. */
  readonly server: string;
  /** The task given to the agent (ignored by the `scripted` harness). */
  readonly prompt?: string;
  /** The harness that runs the agent; default `"scripted"`. */
  readonly harness?: Harness;
  readonly models?: readonly string[];
  /** Tool selections, each `"<server>:<tool>"`. */
  readonly tools?: readonly string[];
  /** The `scripted` harness's operations. */
  readonly script?: readonly MessageInitShape<typeof OperationStepSchema>[];
  /** Predefined answers; must be unset with `humanInput: "managed"`. */
  readonly elicitationPlan?: MessageInitShape<typeof ElicitationPlanSchema>;
  readonly permissionPolicy?: PermissionPolicy;
  /** The most input rounds one operation may ask (1..1000); default: the server's (8). */
  readonly roundLimit?: number;
  /** With managed input, how long each pending round waits, in seconds; default: forever. */
  readonly roundTimeoutSeconds?: number;
  /** Default `"fail"`. */
  readonly humanInput?: HumanInputMode;
  /** AIP-155 request ID: a retry with the same ID returns the same execution. */
  readonly requestId?: string;
}

/** Arguments of `respond()`. */
export interface RespondOptions {
  readonly roundId: string;
  /** One answer per request key of the round: exactly the round's keys. */
  readonly responses: Readonly<Record<string, ElicitationAnswer>>;
  /** Unique per intended answer; reuse it (with the same responses) on retry. */
  readonly idempotencyKey: string;
}

/** Options of `result()`. */
export interface ResultOptions {
  /**
   * How long the server waits for the execution to finish, in seconds
   * (`ResultWaitTimeoutError` when it runs out). Omitted: wait until it finishes.
   */
  readonly timeoutSeconds?: number;
  readonly signal?: AbortSignal;
  /** Metadata (request headers) of this call, added to the client's `metadata`. */
  readonly metadata?: Readonly<Record<string, string>>;
}

/** Options of `watchPending()`. */
export interface WatchOptions {
  /** Only this execution's events; the stream ends after it finishes. */
  readonly executionId?: string;
  /** Resume right after the event that carried this cursor. */
  readonly cursor?: string;
  /**
   * Only events of these kinds (skipped ones still move the cursor);
   * omitted or empty: every kind. Without "round_pending" there is no opening
   * snapshot; with `executionId` the stream still ends when it finishes.
   */
  readonly kinds?: readonly WatchEvent["kind"][];
  /** Aborting it ends the stream (with an M3Error of code CANCELLED). */
  readonly signal?: AbortSignal;
  /** Metadata (request headers) of this call, added to the client's `metadata`. */
  readonly metadata?: Readonly<Record<string, string>>;
}

/** A round is pending (in the opening snapshot) or became pending. */
export interface RoundPendingEvent {
  readonly kind: "round_pending";
  readonly cursor: string;
  readonly round: PendingElicitationRound;
}

/** A round left pending (answered, or failed). Ignore it for a round not seen pending. */
export interface RoundLeftPendingEvent {
  readonly kind: "round_left_pending";
  readonly cursor: string;
  readonly roundId: string;
  readonly executionId: string;
  /** `ManagedInputStatus.RESPONSE_VALIDATED` or `ManagedInputStatus.FAILED`. */
  readonly status: ManagedInputStatus;
}

/** An execution finished; its final state. */
export interface ExecutionFinishedEvent {
  readonly kind: "execution_finished";
  readonly cursor: string;
  readonly state: ExecutionState;
}

/** One WatchPending event; pass its `cursor` to resume after it. */
export type WatchEvent = RoundPendingEvent | RoundLeftPendingEvent | ExecutionFinishedEvent;

const WATCH_EVENT_KIND: Readonly<Record<WatchEvent["kind"], WatchEventKind>> = {
  round_pending: WatchEventKind.ROUND_PENDING,
  round_left_pending: WatchEventKind.ROUND_LEFT_PENDING,
  execution_finished: WatchEventKind.EXECUTION_FINISHED,
};

const HUMAN_INPUT: Readonly<Record<HumanInputMode, HumanInput>> = {
  fail: HumanInput.FAIL,
  managed: HumanInput.MANAGED,
};

const ACTIONS: Readonly<Record<ResponseAction, ElicitationAction>> = {
  accept: ElicitationAction.ACCEPT,
  decline: ElicitationAction.DECLINE,
  cancel: ElicitationAction.CANCEL,
};

/** Result waits get this much longer as the call deadline than the server-side timeout. */
const RESULT_DEADLINE_MARGIN_MS = 5_000;

/**
 * A client of an `m3grpc serve` service. Call `close()` when done: the HTTP/2
 * connection otherwise keeps the process alive.
 */
export class M3Client {
  readonly target: string;
  private readonly timeoutMs: number | undefined;
  private readonly headers: Readonly<Record<string, string>>;
  private readonly session: Http2SessionManager;
  private readonly executions: Client<typeof ExecutionService>;
  private readonly elicitation: Client<typeof ElicitationService>;

  /** @param target `host:port` (e.g. `"127.0.0.1:50051"`) or an `http://`/`https://` URL. */
  constructor(target: string, options: M3ClientOptions = {}) {
    this.target = target;
    this.timeoutMs = options.timeoutMs === null ? undefined : (options.timeoutMs ?? 30_000);
    const tls = options.tls;
    if ((tls?.clientCert === undefined) !== (tls?.clientKey === undefined)) {
      throw new TypeError("tls.clientCert and tls.clientKey go together (mutual TLS)");
    }
    const scheme = tls === undefined ? "http" : "https";
    const baseUrl = /^https?:\/\//.test(target) ? target : `${scheme}://${target}`;
    const headers: Record<string, string> = {};
    for (const [key, value] of Object.entries(options.metadata ?? {})) headers[key.toLowerCase()] = value;
    if (options.token !== undefined) headers["authorization"] = `Bearer ${options.token}`;
    this.headers = headers;
    // Keep idle WatchPending streams alive through proxies (the server allows pings every 10 s).
    this.session = new Http2SessionManager(
      baseUrl,
      { pingIntervalMs: 30_000 },
      tls === undefined
        ? undefined
        : { ca: tls.rootCa, cert: tls.clientCert, key: tls.clientKey, servername: tls.serverName },
    );
    const transport = createGrpcTransport({
      baseUrl,
      sessionManager: this.session,
      interceptors: options.interceptors ?? [],
    });
    this.executions = createClient(ExecutionService, transport);
    this.elicitation = createClient(ElicitationService, transport);
  }

  /** Closes the HTTP/2 connection; calls in flight fail. */
  close(): void {
    this.session.abort();
  }

  /** Submits an agent run; returns its execution ID and initial state (usually QUEUED). */
  async submit(options: SubmitOptions, call?: CallOptions): Promise<SubmitResponse> {
    const humanInput = options.humanInput ?? "fail";
    if (!Object.hasOwn(HUMAN_INPUT, humanInput)) {
      throw new ModelValidationError("invalid submission", {
        code: "INVALID_ARGUMENT",
        reason: ModelValidationError.reason,
        fieldViolations: [
          { field: "human_input", description: `must be "fail" or "managed", got ${JSON.stringify(humanInput)}` },
        ],
      });
    }
    const request = {
      spec: {
        case: "agent" as const,
        value: {
          harness: options.harness ?? "scripted",
          models: [...(options.models ?? [])],
          prompt: options.prompt ?? "",
          server: options.server,
          tools: [...(options.tools ?? [])],
          script: [...(options.script ?? [])],
          elicitationPlan: options.elicitationPlan,
          permissionPolicy: options.permissionPolicy,
          roundLimit: options.roundLimit ?? 0,
          roundTimeout:
            options.roundTimeoutSeconds === undefined
              ? undefined
              : durationFromMs(options.roundTimeoutSeconds * 1000),
        },
      },
      humanInput: HUMAN_INPUT[humanInput],
      requestId: options.requestId ?? "",
    };
    return this.unary(() => this.executions.submit(request, this.callOptions(call)));
  }

  /**
   * The server bindings configured on the service (all, or those in `names`),
   * sorted by name. With `includeTools` the service connects to each server and
   * lists its tools; a server that cannot be listed has `toolsError` set
   * instead. An unknown name throws `ServerBindingNotFoundError` (its metadata
   * `known_servers` lists the configured names).
   */
  async listServers(
    options: { readonly names?: readonly string[]; readonly includeTools?: boolean } = {},
    call?: CallOptions,
  ): Promise<ServerInfo[]> {
    const response = await this.unary(() =>
      this.executions.listServers(
        { names: [...(options.names ?? [])], includeTools: options.includeTools ?? false },
        this.callOptions(call),
      ),
    );
    return response.servers;
  }

  /** The execution's current state, without waiting. */
  async snapshot(executionId: string, call?: CallOptions): Promise<ExecutionState> {
    const response = await this.unary(() =>
      this.executions.snapshot({ executionId }, this.callOptions(call)),
    );
    return required(response.state, "Snapshot", "state");
  }

  /**
   * Waits until the execution finishes and returns its result. With
   * `timeoutSeconds`, throws `ResultWaitTimeoutError` when it runs out (the
   * execution keeps running).
   */
  async result(executionId: string, options: ResultOptions = {}): Promise<ExecutionResult> {
    const seconds = options.timeoutSeconds === undefined ? undefined : Math.max(options.timeoutSeconds, 0);
    const response = await this.unary(() =>
      this.executions.result(
        {
          executionId,
          timeout: seconds === undefined ? undefined : durationFromMs(seconds * 1000),
        },
        {
          signal: options.signal,
          timeoutMs: seconds === undefined ? undefined : seconds * 1000 + RESULT_DEADLINE_MARGIN_MS,
          headers: this.headersWith(options.metadata),
        },
      ),
    );
    return required(response.result, "Result", "result");
  }

  /** Requests cancellation (asynchronous; idempotent); returns the state after it was recorded. */
  async cancel(
    executionId: string,
    options: CallOptions & { readonly requestId?: string } = {},
  ): Promise<ExecutionState> {
    const response = await this.unary(() =>
      this.executions.cancel(
        { executionId, requestId: options.requestId ?? "" },
        this.callOptions(options),
      ),
    );
    return required(response.state, "Cancel", "state");
  }

  /** The execution's pending round, or undefined when none is pending. */
  async getPending(executionId: string, call?: CallOptions): Promise<PendingElicitationRound | undefined> {
    const response = await this.unary(() =>
      this.elicitation.getPending({ executionId }, this.callOptions(call)),
    );
    return response.round;
  }

  /**
   * Answers every request of a pending round. Repeating it with the same
   * idempotency key and responses is a replay (`replayed: true`).
   */
  async respond(options: RespondOptions, call?: CallOptions): Promise<RespondResponse> {
    const responses = Object.fromEntries(
      Object.entries(options.responses).map(([key, answer]) => [
        key,
        {
          // An unknown action goes out as UNSPECIFIED, which the service rejects.
          action: Object.hasOwn(ACTIONS, answer.action) ? ACTIONS[answer.action] : ElicitationAction.UNSPECIFIED,
          content: answer.content,
        },
      ]),
    );
    return this.unary(() =>
      this.elicitation.respond(
        { roundId: options.roundId, responses, idempotencyKey: options.idempotencyKey },
        this.callOptions(call),
      ),
    );
  }

  /**
   * Managed-input events as an async iterator: without a cursor, every round
   * pending now, then live events; with one, every event after it. Breaking
   * out of the `for await` loop ends the stream.
   */
  async *watchPending(options: WatchOptions = {}): AsyncGenerator<WatchEvent, void, undefined> {
    const kinds = watchEventKinds(options.kinds ?? []);
    const done = new AbortController();
    const signal = options.signal === undefined ? done.signal : AbortSignal.any([options.signal, done.signal]);
    const stream = this.executions.watchPending(
      { executionId: options.executionId ?? "", cursor: options.cursor ?? "", kinds },
      { signal, headers: this.headersWith(options.metadata) },
    );
    try {
      for await (const message of stream) {
        const event = watchEvent(message);
        if (event !== undefined) {
          yield event;
        }
      }
    } catch (error) {
      throw toM3Error(error);
    } finally {
      done.abort(); // the consumer stopped early (or the stream ended): release the stream
    }
  }

  private callOptions(call: CallOptions = {}): ConnectCallOptions {
    return { signal: call.signal, timeoutMs: call.timeoutMs ?? this.timeoutMs, headers: this.headersWith(call.metadata) };
  }

  private headersWith(metadata: Readonly<Record<string, string>> | undefined): Record<string, string> {
    const headers = { ...this.headers };
    for (const [key, value] of Object.entries(metadata ?? {})) headers[key.toLowerCase()] = value;
    return headers;
  }

  private async unary<T>(invoke: () => Promise<T>): Promise<T> {
    try {
      return await invoke();
    } catch (error) {
      throw toM3Error(error);
    }
  }
}

/** A response field the contract says is always set. */
function required<T>(value: T | undefined, method: string, field: string): T {
  if (value === undefined) {
    throw new InternalError(`${method} response has no ${field}`, { code: "INTERNAL", reason: "" });
  }
  return value;
}

/** `WatchPendingRequest.kinds` for event kind strings; an unknown one (from untyped JS) fails like the service would. */
function watchEventKinds(kinds: readonly WatchEvent["kind"][]): WatchEventKind[] {
  return kinds.map((kind, index) => {
    if (!Object.hasOwn(WATCH_EVENT_KIND, kind)) {
      throw new ModelValidationError("invalid kinds", {
        code: "INVALID_ARGUMENT",
        reason: ModelValidationError.reason,
        fieldViolations: [
          {
            field: `kinds[${index}]`,
            description: `must be one of ${Object.keys(WATCH_EVENT_KIND).join(", ")}, got ${JSON.stringify(kind)}`,
          },
        ],
      });
    }
    return WATCH_EVENT_KIND[kind];
  });
}

/** The typed event of a WatchPending message, or undefined for an event kind this client does not know. */
function watchEvent(message: WatchPendingResponse): WatchEvent | undefined {
  const { cursor, event } = message;
  switch (event.case) {
    case "roundPending":
      return { kind: "round_pending", cursor, round: event.value };
    case "roundLeftPending":
      return {
        kind: "round_left_pending",
        cursor,
        roundId: event.value.roundId,
        executionId: event.value.executionId,
        status: event.value.status,
      };
    case "executionFinished":
      return { kind: "execution_finished", cursor, state: event.value };
    default:
      return undefined;
  }
}
