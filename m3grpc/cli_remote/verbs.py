"""The remote verbs, each over the Python remote client (m3grpc.client).

Every verb takes the parsed arguments and returns its exit code; typed errors
propagate to `m3grpc.cli_remote.parser.run`, which reports them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from m3grpc.cli_remote import exits, views
from m3grpc.cli_remote.exits import CliInputError, NoPendingRound, WaitTimedOut
from m3grpc.cli_remote.inputs import read_json_object, read_spec_file
from m3grpc.cli_remote.interactive import Aborted, Prompter, answer_round
from m3grpc.cli_remote.rounds import round_document
from m3grpc.cli_remote.security import tls_from_env, token_from_env
from m3grpc.client import ExecutionFinished, RemoteMCPTestKit
from m3grpc.errors import FieldViolation, M3Error, ModelValidationError
from m3grpc.types import (
    ElicitationRequest,
    ElicitationResponse,
    ExecutionOutcome,
    ExecutionState,
    ExecutionStatus,
    FormElicitationRequest,
    HumanInput,
    ManagedInputStatus,
)
from m3grpc.waits import wait_seconds
from m3grpc.wire.events import WATCH_EVENT_CLASSES, WatchEventClass

# Each call's deadline (Result and pending waits have their own).
CALL_TIMEOUT = 30.0
# How often `pending --wait` asks again.
PENDING_POLL_SECONDS = 0.25


def emit(args: argparse.Namespace, document: Any, text: str) -> None:
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=False))
    else:
        print(text)
    sys.stdout.flush()


def note(text: str) -> None:
    """A side note for a person (stderr, so stdout stays the verb's output)."""
    print(text, file=sys.stderr, flush=True)


@contextmanager
def remote_kit(args: argparse.Namespace) -> Iterator[RemoteMCPTestKit]:
    with RemoteMCPTestKit(
        args.server, timeout=CALL_TIMEOUT, tls=tls_from_env(), token=token_from_env()
    ) as kit:
        yield kit


# -- executions ----------------------------------------------------------------------------

_SPEC_KEYS = {
    "kind",
    "prompt",
    "harness",
    "models",
    "server",
    "tools",
    "script",
    "elicitation_plan",
    "permission_policy",
    "round_limit",
    "round_timeout_seconds",
}


def submit(args: argparse.Namespace) -> int:
    spec = read_spec_file(args.spec) if args.spec is not None else {}
    _check_spec_keys(spec)
    if args.prompt is not None:
        spec["prompt"] = args.prompt
    if args.binding is not None:
        spec["server"] = args.binding
    if args.tool:
        spec["tools"] = list(args.tool)
    if args.harness is not None:
        spec["harness"] = args.harness
    if args.model:
        spec["models"] = list(args.model)
    prompt, server, models = _required_spec_values(spec)
    with remote_kit(args) as kit:
        agent = kit.agents([{"harness": spec.get("harness", "scripted"), "models": models}])[0]
        handle = agent.submit(
            prompt,
            server=server,
            tools=spec.get("tools", ()),
            script=spec.get("script"),
            elicitation_plan=spec.get("elicitation_plan"),
            permission_policy=spec.get("permission_policy"),
            human_input=_human_input(args.human_input, spec),
            round_limit=spec.get("round_limit", 8),
            round_timeout_seconds=spec.get("round_timeout_seconds"),
            request_id=args.request_id,
        )
    emit(args, {"execution_id": handle.execution_id}, handle.execution_id)
    return exits.OK


def _human_input(given: HumanInput | None, spec: Mapping[str, Any]) -> HumanInput:
    """--human-input, else managed: the CLI submits for someone to answer (the API's
    default stays "fail"). A spec with an elicitation_plan answers by its plan, which
    managed input cannot be combined with."""
    if given is not None:
        return given
    return "fail" if spec.get("elicitation_plan") else "managed"


def _check_spec_keys(spec: Mapping[str, Any]) -> None:
    violations = [
        FieldViolation(f"spec.{key}", "unknown field") for key in spec if key not in _SPEC_KEYS
    ]
    if spec.get("kind", "agent") != "agent":
        violations.append(FieldViolation("spec.kind", 'the CLI submits agent specs: "agent"'))
    if violations:
        raise ModelValidationError("invalid spec", field_violations=violations)


def _required_spec_values(spec: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    violations: list[FieldViolation] = []
    prompt, server, models = spec.get("prompt"), spec.get("server"), spec.get("models", [])
    if isinstance(server, Mapping):  # a binding document: only its name goes on the wire
        server = server.get("name")
    if not isinstance(prompt, str):
        violations.append(FieldViolation("spec.prompt", "required: a string (or --prompt)"))
    if not isinstance(server, str) or not server:
        violations.append(
            FieldViolation("spec.server", "required: a server binding name (or --binding)")
        )
    if not isinstance(models, list) or not all(isinstance(model, str) for model in models):
        violations.append(FieldViolation("spec.models", "must be a list of strings"))
    if violations:
        raise ModelValidationError("invalid spec", field_violations=violations)
    return str(prompt), str(server), list(models)


def status(args: argparse.Namespace) -> int:
    with remote_kit(args) as kit:
        state = kit.handle(args.execution_id).snapshot()
    emit(args, state.model_dump(mode="json"), views.state_text(state))
    return exits.OK


def result(args: argparse.Namespace) -> int:
    with remote_kit(args) as kit:
        outcome = kit.handle(args.execution_id).result(timeout=args.wait)
    emit(args, outcome.model_dump(mode="json"), views.result_text(outcome))
    return exits.OK if outcome.outcome is ExecutionOutcome.SUCCEEDED else exits.NOT_SUCCEEDED


def cancel(args: argparse.Namespace) -> int:
    with remote_kit(args) as kit:
        handle = kit.handle(args.execution_id)
        handle.cancel()
        state = handle.snapshot()
    emit(
        args,
        {"execution_id": args.execution_id, "cancel_requested": True, **_brief(state)},
        f"cancel requested for {args.execution_id} (lifecycle {state.lifecycle.value})",
    )
    return exits.OK


def _brief(state: ExecutionState) -> dict[str, Any]:
    return {
        "lifecycle": state.lifecycle.value,
        "outcome": state.outcome.value if state.outcome is not None else None,
    }


def watch(args: argparse.Namespace) -> int:
    cursor = args.cursor
    shown: set[WatchEventClass] | None = None  # None: every kind
    asked: set[WatchEventClass] | None = None
    if args.kind:
        shown = {WATCH_EVENT_CLASSES[name] for name in args.kind}
        asked = set(shown)
        if args.until_terminal:
            # The finish is what stops the watch, so it is asked for even when not shown.
            asked.add(ExecutionFinished)
    try:
        with remote_kit(args) as kit:
            for event in kit.watch_pending(execution_id=args.execution, cursor=cursor, kinds=asked):
                cursor = event.cursor
                if shown is None or type(event) in shown:
                    if args.json:
                        print(json.dumps(views.event_document(event)), flush=True)
                    else:
                        print(views.event_text(event), flush=True)
                if args.until_terminal and isinstance(event, ExecutionFinished):
                    break
    except KeyboardInterrupt:  # the way to end a watch: not a failure
        if cursor and not args.json:
            note(f"stopped; resume with --cursor {cursor}")
    except M3Error:  # e.g. the service shutting down: say where to pick up
        if cursor:
            note(f"resume with --cursor {cursor}")
        raise
    return exits.OK


# -- rounds ------------------------------------------------------------------------------


def pending(args: argparse.Namespace) -> int:
    waiting = args.wait is not None
    # --wait inf (or longer than anyone means) waits without limit.
    seconds = wait_seconds(args.wait, "--wait") if waiting else None
    deadline = None if seconds is None else time.monotonic() + seconds
    with remote_kit(args) as kit:
        handle = kit.handle(args.execution_id)
        while True:
            found = handle.pending_elicitation()
            if found is not None or not waiting:
                break
            state = handle.snapshot()
            if state.lifecycle is ExecutionStatus.FINISHED:
                outcome = state.outcome.value if state.outcome is not None else "-"
                emit(
                    args,
                    None,
                    f"execution {args.execution_id} finished ({outcome}) with no round pending",
                )
                return exits.NOT_SUCCEEDED
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimedOut(
                    f"no round of {args.execution_id} became pending within {args.wait} s"
                )
            time.sleep(PENDING_POLL_SECONDS)
    if found is None:
        emit(args, None, f"no round of {args.execution_id} is pending")
    else:
        emit(args, found.model_dump(mode="json"), views.pending_text(found))
    return exits.OK


def respond(args: argparse.Namespace) -> int:
    key = args.idempotency_key or f"cli-{uuid.uuid4().hex}"
    with remote_kit(args) as kit:
        round_id, requests = _target_round(args, kit)
        responses = _responses(args, requests)
        if not args.idempotency_key:
            note(f"idempotency key: {key} (repeat with --idempotency-key {key} to retry safely)")
        outcome = kit.respond(round_id, responses, idempotency_key=key)
    status_text = outcome.status.value if outcome.status is not None else "unknown"
    emit(
        args,
        {
            "round_id": outcome.round_id,
            "status": outcome.status.value if outcome.status is not None else None,
            "replayed": outcome.replayed,
            "idempotency_key": key,
        },
        f"round {outcome.round_id}: {status_text}"
        + (" (a replay of the same answer)" if outcome.replayed else ""),
    )
    return exits.OK


def _target_round(
    args: argparse.Namespace, kit: RemoteMCPTestKit
) -> tuple[str, Mapping[str, ElicitationRequest]]:
    if args.execution is not None:
        found = kit.handle(args.execution).pending_elicitation()
        if found is None:
            raise NoPendingRound(f"no round of execution {args.execution} is pending")
        return found.round_id, found.requests
    view = kit.get_round(args.round_id)
    return view.round_id, view.requests


def _responses(
    args: argparse.Namespace, requests: Mapping[str, ElicitationRequest]
) -> Mapping[str, ElicitationResponse | Mapping[str, Any]]:
    if args.responses is not None:
        return read_json_object(args.responses, "responses")
    if args.interactive:
        try:
            return answer_round(Prompter(sys.stdin, sys.stderr), requests)
        except Aborted:
            raise KeyboardInterrupt from None
    keys = [args.key] if args.key is not None else sorted(requests)
    if args.key is not None and args.key not in requests:
        raise CliInputError(
            f"the round has no request {args.key!r}; its requests: {', '.join(sorted(requests))}"
        )
    if args.decline or args.cancel:
        return {
            key: ElicitationResponse(action="decline" if args.decline else "cancel") for key in keys
        }
    return _accepted(args.accept, keys, requests)


def _accepted(
    source: str | None, keys: list[str], requests: Mapping[str, ElicitationRequest]
) -> dict[str, ElicitationResponse]:
    forms = [key for key in keys if isinstance(requests[key], FormElicitationRequest)]
    if source is None:
        if forms:
            raise CliInputError(
                f"request {forms[0]} is a form: give its content (--accept JSON, "
                "--accept @FILE or --accept -) or use --interactive"
            )
        return {key: ElicitationResponse(action="accept") for key in keys}
    if len(keys) > 1:
        raise CliInputError(
            f"the round has {len(keys)} requests ({', '.join(keys)}): choose one with --key, "
            "or answer them all with --responses"
        )
    content = read_json_object(source, "content")
    if not forms:
        raise CliInputError(f"request {keys[0]} is a URL request: accept it without content")
    return {keys[0]: ElicitationResponse(action="accept", content=content)}


def rounds_get(args: argparse.Namespace) -> int:
    with remote_kit(args) as kit:
        document = round_document(kit.get_round(args.round_id))
    emit(args, document, views.round_text(document))
    return exits.OK


def rounds_list(args: argparse.Namespace) -> int:
    statuses = [ManagedInputStatus(value) for value in args.status or ()]
    documents: list[dict[str, Any]] = []
    token = args.page_token or None
    with remote_kit(args) as kit:
        while True:
            page = kit.list_rounds(
                execution_id=args.execution,
                statuses=statuses,
                page_size=args.page_size,
                page_token=token,
            )
            documents.extend(round_document(view) for view in page.rounds)
            token = page.next_page_token
            if not (args.all and token):
                break
    text = views.rounds_table(documents) if documents else "no rounds"
    if token:
        text += f"\nmore: --page-token {token}"
    emit(args, {"rounds": documents, "next_page_token": token or ""}, text)
    return exits.OK


VERBS: dict[str, Callable[[argparse.Namespace], int]] = {
    "submit": submit,
    "status": status,
    "result": result,
    "cancel": cancel,
    "watch": watch,
    "pending": pending,
    "respond": respond,
    "rounds get": rounds_get,
    "rounds list": rounds_list,
}
