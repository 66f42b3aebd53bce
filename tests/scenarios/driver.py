"""The Python driver of the cross-language scenario suite (see README.md here).

    python tests/scenarios/driver.py --target HOST:PORT --scenarios tests/scenarios/scenarios.json

It runs every scenario through the Python remote client (m3grpc.client).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

import grpc

from m3grpc.client import (
    ExecutionFinished,
    RemoteExecutionHandle,
    RemoteMCPTestKit,
    RoundLeftPending,
    RoundPending,
    TlsOptions,
    WatchEvent,
)
from m3grpc.errors import M3Error, ManagedInputConflict, ManagedInputValidationError
from m3grpc.types import ElicitationResponse, PendingElicitationRound

LANGUAGE = "python"


class StepFailed(Exception):
    pass


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise StepFailed(message)


def _expect_equal(what: str, actual: object, expected: object) -> None:
    _check(actual == expected, f"{what}: expected {expected!r}, got {actual!r}")


def _substitute(value: Any, run: str) -> Any:
    if isinstance(value, str):
        return value.replace("{run}", run)
    if isinstance(value, list):
        return [_substitute(item, run) for item in value]
    if isinstance(value, dict):
        return {key: _substitute(item, run) for key, item in value.items()}
    return value


def _enum(value: Any) -> str:
    """A model enum/literal as the scenario file spells it (proto name without prefix)."""
    text = value.value if hasattr(value, "value") else str(value)
    return text.upper()


def _first_text(result: Mapping[str, Any] | None) -> str | None:
    for block in (result or {}).get("content", []):
        if "text" in block:
            return str(block["text"])
    return None


# A watch step's `kinds`, as the client names them.
_EVENT_CLASSES: dict[str, type[WatchEvent]] = {
    "round_pending": RoundPending,
    "round_left_pending": RoundLeftPending,
    "execution_finished": ExecutionFinished,
}


def _event_label(event: WatchEvent) -> str:
    if isinstance(event, RoundPending):
        return "round_pending"
    if isinstance(event, RoundLeftPending):
        return f"round_left_pending:{_enum(event.status)}"
    assert isinstance(event, ExecutionFinished)
    return f"execution_finished:{_enum(event.state.outcome)}"


class ScenarioRun:
    def __init__(self, kit: RemoteMCPTestKit) -> None:
        self.kit = kit
        self.executions: dict[str, str] = {}
        self.rounds: dict[str, PendingElicitationRound] = {}
        self.cursors: dict[str, str] = {}

    def handle(self, step: Mapping[str, Any]) -> RemoteExecutionHandle:
        if "execution_id" in step:
            return self.kit.handle(step["execution_id"])
        return self.kit.handle(self.executions[step["execution"]])

    def run_step(self, step: Mapping[str, Any]) -> None:
        expect_error = step.get("expect_error")
        try:
            getattr(self, f"op_{step['op']}")(step, step.get("expect", {}))
        except M3Error as error:
            if expect_error is None:
                raise StepFailed(f"unexpected {type(error).__name__}: {error}") from error
            self.check_error(error, expect_error)
            return
        _check(expect_error is None, f"expected error {expect_error}, the call succeeded")

    @staticmethod
    def check_error(error: M3Error, expected: Mapping[str, Any]) -> None:
        cause = error.__cause__
        code = cause.code().name if isinstance(cause, grpc.RpcError) else None
        if "code" in expected:
            _expect_equal("status code", code, expected["code"])
        if "reason" in expected:
            _expect_equal("ErrorInfo reason", error.reason, expected["reason"])
        if "field_violations" in expected:
            fields = (
                sorted(v.field for v in error.field_violations)
                if isinstance(error, ManagedInputValidationError)
                else []
            )
            _expect_equal("field violations", fields, sorted(expected["field_violations"]))
        metadata = dict(error.metadata)
        if isinstance(error, ManagedInputConflict):
            metadata["conflict_kind"] = error.conflict_kind.value
        for key, value in expected.get("metadata", {}).items():
            _expect_equal(f"metadata[{key}]", metadata.get(key), value)

    # -- operations ------------------------------------------------------------------

    def op_submit(self, step: Mapping[str, Any], expect: Mapping[str, Any]) -> None:
        agent_spec = step["agent"]
        models = agent_spec.get("models", [])
        agent = self.kit.agents([{"harness": agent_spec["harness"], "models": models}])[0]
        handle = agent.submit(
            agent_spec["prompt"],
            server=agent_spec["server"],
            tools=agent_spec.get("tools", []),
            human_input=step.get("human_input", "FAIL").lower(),
            request_id=step.get("request_id"),
            round_timeout_seconds=agent_spec.get("round_timeout_seconds"),
        )
        self.executions[step["as"]] = handle.execution_id
        if "same_execution_as" in expect:
            _expect_equal(
                "execution_id", handle.execution_id, self.executions[expect["same_execution_as"]]
            )

    def op_wait_pending(self, step: Mapping[str, Any], expect: Mapping[str, Any]) -> None:
        handle = self.handle(step)
        deadline = time.monotonic() + 60
        pending = handle.pending_elicitation()
        while pending is None and time.monotonic() < deadline:
            time.sleep(0.05)
            pending = handle.pending_elicitation()
        _check(pending is not None, "no round became pending within 60 s")
        assert pending is not None
        if "as" in step:
            self.rounds[step["as"]] = pending
        if "same_round_as" in step:
            _expect_equal("round_id", pending.round_id, self.rounds[step["same_round_as"]].round_id)
        self.check_round(pending, expect)

    def check_round(self, pending: PendingElicitationRound, expect: Mapping[str, Any]) -> None:
        if "request_keys" in expect:
            _expect_equal("request keys", sorted(pending.requests), sorted(expect["request_keys"]))
        for field in ("operation_name", "server"):
            if field in expect:
                _expect_equal(field, getattr(pending, field), expect[field])
        if "operation_kind" in expect:
            _expect_equal("operation_kind", _enum(pending.operation_kind), expect["operation_kind"])
        if "has_deadline" in expect:
            _expect_equal("has deadline", pending.deadline is not None, expect["has_deadline"])

    def op_get_pending(self, step: Mapping[str, Any], expect: Mapping[str, Any]) -> None:
        pending = self.handle(step).pending_elicitation()
        if expect.get("none"):
            _check(pending is None, f"expected nothing pending, got {pending}")

    def op_snapshot(self, step: Mapping[str, Any], expect: Mapping[str, Any]) -> None:
        state = self.handle(step).snapshot()
        if "lifecycle" in expect:
            _expect_equal("lifecycle", _enum(state.lifecycle), expect["lifecycle"])
        if "outcome" in expect:
            _expect_equal("outcome", state.outcome and _enum(state.outcome), expect["outcome"])

    def op_respond(self, step: Mapping[str, Any], expect: Mapping[str, Any]) -> None:
        responses = {
            key: ElicitationResponse(action=value["action"].lower(), content=value.get("content"))
            for key, value in step["responses"].items()
        }
        outcome = self.kit.respond(
            self.rounds[step["round"]].round_id, responses, idempotency_key=step["idempotency_key"]
        )
        if "status" in expect:
            _expect_equal("status", outcome.status and _enum(outcome.status), expect["status"])
        if "replayed" in expect:
            _expect_equal("replayed", outcome.replayed, expect["replayed"])

    def op_result(self, step: Mapping[str, Any], expect: Mapping[str, Any]) -> None:
        result = self.handle(step).result(timeout=step["timeout_seconds"])
        if "outcome" in expect:
            _expect_equal("outcome", _enum(result.outcome), expect["outcome"])
        if "failure_code" in expect:
            _expect_equal("failure_code", result.failure_code, expect["failure_code"])
        if "operation_text" in expect:
            text = _first_text(result.operations[0].result) if result.operations else None
            _expect_equal("operation text", text, expect["operation_text"])
        if "agent_final_message" in expect:
            # An agent harness's final message (codex); "" when the harness reports none.
            message = (result.agent.final_message if result.agent else None) or ""
            _expect_equal("agent final message", message, expect["agent_final_message"])

    def op_cancel(self, step: Mapping[str, Any], expect: Mapping[str, Any]) -> None:
        self.handle(step).cancel()

    def op_list_servers(self, step: Mapping[str, Any], expect: Mapping[str, Any]) -> None:
        servers = self.kit.list_servers(
            step.get("names"), include_tools=bool(step.get("include_tools", False))
        )
        actual = {
            "servers": [s.name for s in servers],
            "tools": {s.name: [t.name for t in s.tools] for s in servers},
            "tools_errors": {s.name: s.tools_error.code for s in servers if s.tools_error},
        }
        for key, value in expect.items():
            _check(key in actual, f"bad step: expect key {key!r} not supported by list_servers")
            _expect_equal(key, actual[key], value)

    def op_watch(self, step: Mapping[str, Any], expect: Mapping[str, Any]) -> None:
        cursor = self.cursors[step["cursor"]] if "cursor" in step else None
        kinds = [_EVENT_CLASSES[kind] for kind in step.get("kinds", [])]
        stream: Iterator[WatchEvent] = self.kit.watch_pending(
            execution_id=self.executions[step["execution"]], cursor=cursor, kinds=kinds
        )
        events = list(islice(stream, step["take"])) if "take" in step else list(stream)
        if "take" in step:
            stream.close()  # type: ignore[attr-defined]
        if "events" in expect:
            _expect_equal("events", [_event_label(e) for e in events], expect["events"])
        _check(bool(events), "the watch returned no event")
        if "cursor_as" in step:
            self.cursors[step["cursor_as"]] = events[-1].cursor
        if "as" in step:
            pending = [e for e in events if isinstance(e, RoundPending)]
            _check(bool(pending), "no round_pending event to save")
            self.rounds[step["as"]] = pending[-1].round


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--scenarios", required=True)
    # TLS verified with this CA; the bearer token comes from $M3_SCENARIO_TOKEN.
    parser.add_argument("--ca")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    tls = TlsOptions(root_ca=args.ca) if args.ca else None
    token = os.environ.get("M3_SCENARIO_TOKEN") or None
    with open(args.scenarios, encoding="utf-8") as file:
        suite = json.load(file)
    run_token = uuid.uuid4().hex[:10]
    passed = failed = 0
    with RemoteMCPTestKit(args.target, tls=tls, token=token) as kit:
        for scenario in suite["scenarios"]:
            if args.names and scenario["name"] not in args.names:
                continue
            run = ScenarioRun(kit)
            ok = True
            for index, step in enumerate(_substitute(scenario["steps"], run_token)):
                try:
                    run.run_step(step)
                except (StepFailed, M3Error, grpc.RpcError, KeyError) as error:
                    print(
                        f"FAIL {LANGUAGE} {scenario['name']} step {index} ({step['op']}): {error}",
                        flush=True,
                    )
                    ok = False
                    break
                print(f"ok   {LANGUAGE} {scenario['name']} step {index} ({step['op']})", flush=True)
            passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)
    print(f"{LANGUAGE}: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
