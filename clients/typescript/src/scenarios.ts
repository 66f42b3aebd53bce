/**
 * The TypeScript driver of the cross-language scenario suite
 * (tests/scenarios/README.md). It runs every scenario through M3Client.
 *
 *     node dist/scenarios.js --target HOST:PORT --scenarios tests/scenarios/scenarios.json [--ca CA.pem] [NAME ...]
 *
 * With --ca it connects with TLS; $M3_SCENARIO_TOKEN, when set, is sent as a bearer token.
 *
 * A relative --scenarios path is resolved against the directory npm was
 * started from (INIT_CWD) when run as an npm script, else the current one.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { M3Client } from "./client.js";
import type { ElicitationAnswer, HumanInputMode, ResponseAction, WatchEvent } from "./client.js";
import { M3Error, errorClassFor } from "./errors.js";
import { ManagedInputStatus } from "./gen/m3/v1/elicitation_pb.js";
import type { PendingElicitationRound } from "./gen/m3/v1/elicitation_pb.js";
import { ExecutionStatus, ExecutionOutcome, OperationKind } from "./gen/m3/v1/execution_pb.js";
import type { ExecutionResult } from "./gen/m3/v1/execution_pb.js";

const LANGUAGE = "typescript";
const POLL_INTERVAL_MS = 50;
const WAIT_LIMIT_MS = 60_000;

/** A step's expectation did not hold (or the step is malformed). */
class StepFailed extends Error {}

function check(condition: boolean, message: string): asserts condition {
  if (!condition) {
    throw new StepFailed(message);
  }
}

function show(value: unknown): string {
  return value === undefined ? "undefined" : JSON.stringify(value);
}

function expectEqual(what: string, actual: JsonValue | undefined, expected: JsonValue | undefined): void {
  check(
    JSON.stringify(actual) === JSON.stringify(expected),
    `${what}: expected ${show(expected)}, got ${show(actual)}`,
  );
}

// --- reading the JSON steps ---------------------------------------------------------

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function object(value: JsonValue | undefined, what: string): JsonObject {
  check(isObject(value), `${what} must be an object`);
  return value;
}

function optionalString(value: JsonValue | undefined, what: string): string | undefined {
  check(value === undefined || typeof value === "string", `${what} must be a string`);
  return value;
}

function string(value: JsonValue | undefined, what: string): string {
  check(typeof value === "string", `${what} must be a string`);
  return value;
}

function optionalNumber(value: JsonValue | undefined, what: string): number | undefined {
  check(value === undefined || typeof value === "number", `${what} must be a number`);
  return value;
}

function strings(value: JsonValue | undefined, what: string): string[] {
  check(
    Array.isArray(value) && value.every((item) => typeof item === "string"),
    `${what} must be a list of strings`,
  );
  return value as string[];
}

function onlyKeys(value: JsonObject, allowed: readonly string[], what: string): void {
  const unknown = Object.keys(value).filter((key) => !allowed.includes(key));
  check(unknown.length === 0, `${what}: unsupported keys ${show(unknown)}`);
}

/** `{run}` in every string value becomes the run token. */
function substitute(value: JsonValue, run: string): JsonValue {
  if (typeof value === "string") {
    return value.replaceAll("{run}", run);
  }
  if (Array.isArray(value)) {
    return value.map((item) => substitute(item, run));
  }
  if (isObject(value)) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, substitute(item, run)]));
  }
  return value;
}

// --- labels -------------------------------------------------------------------------

function eventLabel(event: WatchEvent): string {
  switch (event.kind) {
    case "round_pending":
      return "round_pending";
    case "round_left_pending":
      return `round_left_pending:${ManagedInputStatus[event.status]}`;
    case "execution_finished":
      return `execution_finished:${ExecutionOutcome[event.state.outcome]}`;
  }
}

function firstText(result: ExecutionResult): string | undefined {
  const content = result.operations[0]?.result?.["content"];
  if (!Array.isArray(content)) {
    return undefined;
  }
  for (const block of content) {
    if (isObject(block) && block["type"] === "text" && typeof block["text"] === "string") {
      return block["text"];
    }
  }
  return undefined;
}

const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

// --- one scenario -------------------------------------------------------------------

type Op = (step: JsonObject, expect: JsonObject) => Promise<void>;

class ScenarioRun {
  private readonly executions = new Map<string, string>();
  private readonly rounds = new Map<string, PendingElicitationRound>();
  private readonly cursors = new Map<string, string>();
  private readonly ops: Readonly<Record<string, Op>> = {
    submit: (step, expect) => this.submit(step, expect),
    wait_pending: (step, expect) => this.waitPending(step, expect),
    get_pending: (step, expect) => this.getPending(step, expect),
    snapshot: (step, expect) => this.snapshot(step, expect),
    respond: (step, expect) => this.respond(step, expect),
    result: (step, expect) => this.result(step, expect),
    cancel: (step, expect) => this.cancel(step, expect),
    watch: (step, expect) => this.watch(step, expect),
    list_servers: (step, expect) => this.listServers(step, expect),
  };

  constructor(private readonly client: M3Client) {}

  async runStep(step: JsonObject): Promise<void> {
    const op = this.ops[string(step["op"], "op")];
    check(op !== undefined, `unknown op ${show(step["op"])}`);
    const expect = step["expect"] === undefined ? {} : object(step["expect"], "expect");
    const expectError = step["expect_error"] === undefined ? undefined : object(step["expect_error"], "expect_error");
    try {
      await op(step, expect);
    } catch (error) {
      if (!(error instanceof M3Error)) {
        throw error;
      }
      check(expectError !== undefined, `unexpected ${error.toString()}`);
      checkError(error, expectError);
      return;
    }
    check(expectError === undefined, `expected error ${show(expectError)}, the call succeeded`);
  }

  private execution(step: JsonObject): string {
    if (step["execution_id"] !== undefined) {
      return string(step["execution_id"], "execution_id");
    }
    return this.saved(this.executions, string(step["execution"], "execution"), "execution");
  }

  private saved<T>(names: Map<string, T>, name: string, what: string): T {
    const value = names.get(name);
    check(value !== undefined, `no saved ${what} ${show(name)}`);
    return value;
  }

  private async submit(step: JsonObject, expect: JsonObject): Promise<void> {
    onlyKeys(expect, ["same_execution_as"], "expect");
    const agent = object(step["agent"], "agent");
    onlyKeys(agent, ["harness", "prompt", "server", "tools", "models", "round_timeout_seconds", "round_limit"], "agent");
    const humanInput = (optionalString(step["human_input"], "human_input") ?? "FAIL").toLowerCase();
    const submitted = await this.client.submit({
      harness: optionalString(agent["harness"], "agent.harness"),
      prompt: optionalString(agent["prompt"], "agent.prompt"),
      server: string(agent["server"], "agent.server"),
      tools: agent["tools"] === undefined ? undefined : strings(agent["tools"], "agent.tools"),
      models: agent["models"] === undefined ? undefined : strings(agent["models"], "agent.models"),
      roundTimeoutSeconds: optionalNumber(agent["round_timeout_seconds"], "agent.round_timeout_seconds"),
      roundLimit: optionalNumber(agent["round_limit"], "agent.round_limit"),
      humanInput: humanInput as HumanInputMode,
      requestId: optionalString(step["request_id"], "request_id"),
    });
    this.executions.set(string(step["as"], "as"), submitted.executionId);
    if (expect["same_execution_as"] !== undefined) {
      const other = this.saved(this.executions, string(expect["same_execution_as"], "same_execution_as"), "execution");
      expectEqual("execution_id", submitted.executionId, other);
    }
  }

  private async waitPending(step: JsonObject, expect: JsonObject): Promise<void> {
    onlyKeys(
      expect,
      ["request_keys", "operation_kind", "operation_name", "server", "round_index", "has_deadline"],
      "expect",
    );
    const executionId = this.execution(step);
    const deadline = Date.now() + WAIT_LIMIT_MS;
    let round = await this.client.getPending(executionId);
    while (round === undefined && Date.now() < deadline) {
      await sleep(POLL_INTERVAL_MS);
      round = await this.client.getPending(executionId);
    }
    check(round !== undefined, "no round became pending within 60 s");
    if (step["as"] !== undefined) {
      this.rounds.set(string(step["as"], "as"), round);
    }
    if (step["same_round_as"] !== undefined) {
      const other = this.saved(this.rounds, string(step["same_round_as"], "same_round_as"), "round");
      expectEqual("round_id", round.roundId, other.roundId);
    }
    if (expect["request_keys"] !== undefined) {
      expectEqual("request keys", Object.keys(round.requests).sort(), strings(expect["request_keys"], "request_keys").sort());
    }
    if (expect["operation_kind"] !== undefined) {
      expectEqual("operation_kind", OperationKind[round.operationKind], expect["operation_kind"]);
    }
    if (expect["operation_name"] !== undefined) {
      expectEqual("operation_name", round.operationName, expect["operation_name"]);
    }
    if (expect["server"] !== undefined) {
      expectEqual("server", round.server, expect["server"]);
    }
    if (expect["round_index"] !== undefined) {
      expectEqual("round_index", round.roundIndex, expect["round_index"]);
    }
    if (expect["has_deadline"] !== undefined) {
      expectEqual("has deadline", round.deadline !== undefined, expect["has_deadline"]);
    }
  }

  private async getPending(step: JsonObject, expect: JsonObject): Promise<void> {
    onlyKeys(expect, ["none"], "expect");
    const round = await this.client.getPending(this.execution(step));
    if (expect["none"] === true) {
      check(round === undefined, `expected nothing pending, got round ${round?.roundId ?? ""}`);
    } else if (expect["none"] === false) {
      check(round !== undefined, "expected a pending round, got none");
    }
  }

  private async snapshot(step: JsonObject, expect: JsonObject): Promise<void> {
    onlyKeys(expect, ["lifecycle", "outcome"], "expect");
    const state = await this.client.snapshot(this.execution(step));
    if (expect["lifecycle"] !== undefined) {
      expectEqual("lifecycle", ExecutionStatus[state.lifecycle], expect["lifecycle"]);
    }
    if (expect["outcome"] !== undefined) {
      expectEqual("outcome", ExecutionOutcome[state.outcome], expect["outcome"]);
    }
  }

  private async respond(step: JsonObject, expect: JsonObject): Promise<void> {
    onlyKeys(expect, ["status", "replayed"], "expect");
    const round = this.saved(this.rounds, string(step["round"], "round"), "round");
    const responses: Record<string, ElicitationAnswer> = {};
    for (const [key, value] of Object.entries(object(step["responses"], "responses"))) {
      const answer = object(value, `responses.${key}`);
      onlyKeys(answer, ["action", "content"], `responses.${key}`);
      const action = string(answer["action"], `responses.${key}.action`).toLowerCase() as ResponseAction;
      responses[key] =
        answer["content"] === undefined
          ? { action }
          : { action, content: object(answer["content"], `responses.${key}.content`) };
    }
    const outcome = await this.client.respond({
      roundId: round.roundId,
      responses,
      idempotencyKey: string(step["idempotency_key"], "idempotency_key"),
    });
    if (expect["status"] !== undefined) {
      expectEqual("status", ManagedInputStatus[outcome.status], expect["status"]);
    }
    if (expect["replayed"] !== undefined) {
      expectEqual("replayed", outcome.replayed, expect["replayed"]);
    }
  }

  private async result(step: JsonObject, expect: JsonObject): Promise<void> {
    onlyKeys(expect, ["outcome", "failure_code", "operation_text", "agent_final_message"], "expect");
    const result = await this.client.result(this.execution(step), {
      timeoutSeconds: optionalNumber(step["timeout_seconds"], "timeout_seconds"),
    });
    if (expect["outcome"] !== undefined) {
      expectEqual("outcome", ExecutionOutcome[result.outcome], expect["outcome"]);
    }
    if (expect["failure_code"] !== undefined) {
      expectEqual("failure_code", result.failureCode, expect["failure_code"]);
    }
    if (expect["operation_text"] !== undefined) {
      expectEqual("operation text", firstText(result), expect["operation_text"]);
    }
    if (expect["agent_final_message"] !== undefined) {
      // An agent harness's final message (codex); "" when the harness reports none.
      const message = result.agent?.finalMessage ?? "";
      expectEqual("agent final message", message, expect["agent_final_message"]);
    }
  }

  private async cancel(step: JsonObject, expect: JsonObject): Promise<void> {
    onlyKeys(expect, [], "expect");
    await this.client.cancel(this.execution(step));
  }

  private async listServers(step: JsonObject, expect: JsonObject): Promise<void> {
    onlyKeys(expect, ["servers", "tools", "tools_errors"], "expect");
    const names = step["names"] === undefined ? [] : strings(step["names"], "names");
    const servers = await this.client.listServers(
      { names, includeTools: step["include_tools"] === true },
      { timeoutMs: 120_000 },
    );
    const tools: JsonObject = {};
    const toolsErrors: JsonObject = {};
    for (const server of servers) {
      tools[server.name] = server.tools.map((tool) => tool.name);
      if (server.toolsError !== undefined) {
        toolsErrors[server.name] = server.toolsError.code;
      }
    }
    if (expect["servers"] !== undefined) {
      expectEqual("servers", servers.map((server) => server.name), expect["servers"]);
    }
    if (expect["tools"] !== undefined) {
      expectEqual("tools", tools, expect["tools"]);
    }
    if (expect["tools_errors"] !== undefined) {
      expectEqual("tools_errors", toolsErrors, expect["tools_errors"]);
    }
  }

  private async watch(step: JsonObject, expect: JsonObject): Promise<void> {
    onlyKeys(expect, ["events"], "expect");
    const take = optionalNumber(step["take"], "take");
    check((take === undefined) !== (step["until_end"] !== true), "a watch needs exactly one of take / until_end");
    const cursorName = optionalString(step["cursor"], "cursor");
    // An unknown kind is the client's to reject (ModelValidationError before the call).
    const kinds = step["kinds"] === undefined ? undefined : (strings(step["kinds"], "kinds") as WatchEvent["kind"][]);
    const limit = new AbortController();
    const timer = setTimeout(() => limit.abort(), WAIT_LIMIT_MS);
    const events: WatchEvent[] = [];
    try {
      const stream = this.client.watchPending({
        executionId: this.execution(step),
        cursor: cursorName === undefined ? undefined : this.saved(this.cursors, cursorName, "cursor"),
        kinds,
        signal: limit.signal,
      });
      for await (const event of stream) {
        events.push(event);
        if (take !== undefined && events.length >= take) {
          break; // closes the stream
        }
      }
    } catch (error) {
      if (limit.signal.aborted) {
        throw new StepFailed(`the watch did not ${take === undefined ? "end" : `yield ${take} events`} within 60 s (got ${show(events.map(eventLabel))})`);
      }
      throw error;
    } finally {
      clearTimeout(timer);
    }
    if (expect["events"] !== undefined) {
      expectEqual("events", events.map(eventLabel), strings(expect["events"], "events"));
    }
    const last = events.at(-1);
    check(last !== undefined, "the watch returned no event");
    if (step["cursor_as"] !== undefined) {
      this.cursors.set(string(step["cursor_as"], "cursor_as"), last.cursor);
    }
    if (step["as"] !== undefined) {
      const pending = events.filter((event) => event.kind === "round_pending").at(-1);
      check(pending !== undefined, "no round_pending event to save");
      this.rounds.set(string(step["as"], "as"), pending.round);
    }
  }
}

/** The call failed with the typed error for the expected reason, with that code, violations and metadata. */
function checkError(error: M3Error, expected: JsonObject): void {
  onlyKeys(expected, ["code", "reason", "field_violations", "metadata"], "expect_error");
  if (expected["code"] !== undefined) {
    expectEqual("status code", error.code, expected["code"]);
  }
  if (expected["reason"] !== undefined) {
    const reason = string(expected["reason"], "reason");
    expectEqual("ErrorInfo reason", error.reason, reason);
    const cls = errorClassFor(reason);
    check(cls !== undefined, `no typed error class for reason ${reason}`);
    check(error.constructor === cls, `expected a ${cls.name}, got a ${error.constructor.name}`);
  }
  if (expected["field_violations"] !== undefined) {
    const fields = [...new Set(error.fieldViolations.map((violation) => violation.field))].sort();
    const wanted = [...new Set(strings(expected["field_violations"], "field_violations"))].sort();
    expectEqual("field violations", fields, wanted);
  }
  if (expected["metadata"] !== undefined) {
    for (const [key, value] of Object.entries(object(expected["metadata"], "metadata"))) {
      expectEqual(`metadata[${key}]`, error.metadata[key], value);
    }
  }
}

function failure(error: unknown): string {
  if (error instanceof StepFailed) {
    return error.message;
  }
  return error instanceof Error ? error.toString() : String(error);
}

// --- main ---------------------------------------------------------------------------

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    options: { target: { type: "string" }, scenarios: { type: "string" }, ca: { type: "string" } },
    allowPositionals: true,
  });
  if (values.target === undefined || values.scenarios === undefined) {
    process.stderr.write("usage: scenarios --target HOST:PORT --scenarios FILE [NAME ...]\n");
    return 2;
  }
  const path = resolve(process.env["INIT_CWD"] ?? process.cwd(), values.scenarios);
  const suite = object(JSON.parse(readFileSync(path, "utf8")) as JsonValue, "scenario file");
  const scenarios = (Array.isArray(suite["scenarios"]) ? suite["scenarios"] : []).map((item) => object(item, "scenario"));
  const known = new Set(scenarios.map((scenario) => scenario["name"]));
  const missing = positionals.filter((name) => !known.has(name));
  if (missing.length > 0) {
    process.stderr.write(`unknown scenarios: ${missing.join(", ")}\n`);
    return 2;
  }
  const runToken = randomUUID().replaceAll("-", "").slice(0, 10);
  const token = process.env["M3_SCENARIO_TOKEN"];
  const client = new M3Client(values.target, {
    tls: values.ca === undefined ? undefined : { rootCa: readFileSync(resolve(process.env["INIT_CWD"] ?? process.cwd(), values.ca)) },
    token: token === undefined || token === "" ? undefined : token,
  });
  let passed = 0;
  let failed = 0;
  try {
    for (const scenario of scenarios) {
      const name = String(scenario["name"]);
      if (positionals.length > 0 && !positionals.includes(name)) {
        continue;
      }
      const run = new ScenarioRun(client);
      const steps = substitute(scenario["steps"] ?? [], runToken);
      let ok = true;
      for (const [index, raw] of (Array.isArray(steps) ? steps : []).entries()) {
        const op = isObject(raw) ? String(raw["op"]) : "?";
        try {
          await run.runStep(object(raw, "step"));
        } catch (error) {
          console.log(`FAIL ${LANGUAGE} ${name} step ${index} (${op}): ${failure(error)}`);
          ok = false;
          break;
        }
        console.log(`ok   ${LANGUAGE} ${name} step ${index} (${op})`);
      }
      if (ok) {
        passed += 1;
      } else {
        failed += 1;
      }
    }
  } finally {
    client.close();
  }
  console.log(`${LANGUAGE}: ${passed} passed, ${failed} failed`);
  return failed === 0 && passed > 0 ? 0 : 1;
}

process.exitCode = await main();
