"""The inbox's Starlette application: the page, its static files and JSON endpoints.

    GET  /                              the page (static/index.html)
    GET  /static/{inbox.js,inbox.css}   its script and style sheet
    GET  /api/events                    the live list: WatchPending as SSE (`feed`)
    GET  /api/rounds                    the rounds pending now, oldest first
    GET  /api/rounds/{round_id}         one round with its history, responses redacted
    POST /api/rounds/{round_id}/respond answer it: {"idempotency_key", "responses"}
    GET  /api/executions/{execution_id} the execution's state: running, or how it ended

With the service's bearer tokens configured, every /api/ request needs
`Authorization: Bearer <token>` and sees only its principal's rounds (`access`);
the page and its static files hold no data and stay open.

Rounds are `ElicitationRound` messages as proto JSON (field names as in the
proto), an answer's `responses` are `ElicitationResponse`s the same way
(`{"action": "ELICITATION_ACTION_ACCEPT", "content": {...}}`), and an answer
goes through gRPC Respond's own path (`elicitation_service.respond`): the same
validation, the same idempotency, the same field violations (`problems`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from m3grpc.api.elicitation_service import respond, round_message
from m3grpc.api.inbox.access import InboxAccess
from m3grpc.api.inbox.feed import event_stream, to_json
from m3grpc.api.inbox.problems import error_response
from m3grpc.api.watch import PendingWatch
from m3grpc.errors import FieldViolation, ManagedInputValidationError
from m3grpc.runtime import Runtime
from m3grpc.text import text_problem
from m3grpc.types import ManagedInputStatus
from m3grpc.wire.gen.m3.v1 import elicitation_service_pb2 as pb
from m3grpc.wire.messages import state_message

STATIC = Path(__file__).resolve().parent / "static"
# The most pending rounds GET /api/rounds lists (the live list has no such limit).
MAX_LISTED = 500
# An answer's body; the runtime's content limit (256 KiB by default) applies after.
MAX_BODY_BYTES = 2_000_000

# The page loads only what it ships with; nothing from the network.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def build_app(
    runtime: Runtime,
    watch: PendingWatch,
    *,
    allowed_hosts: Sequence[str] = ("*",),
    access: InboxAccess | None = None,
) -> Starlette:
    """The inbox. `allowed_hosts`: the Host headers served (others get 400), so a
    loopback inbox cannot be reached through a rebound DNS name. `access`: who may
    call the API (`access.py`); None: everyone, as without authentication."""
    access = access or InboxAccess()

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=_HEADERS)

    async def events(request: Request) -> Response:
        try:
            caller = access.caller(request)
        except Exception as error:
            return error_response(error)
        cursor = request.headers.get("last-event-id") or request.query_params.get("cursor", "")
        return StreamingResponse(
            event_stream(watch, cursor, principal=caller.owner_filter),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def pending(request: Request) -> Response:
        try:
            caller = access.caller(request)
            records = await runtime.list_rounds(
                statuses=[ManagedInputStatus.PENDING],
                limit=MAX_LISTED,
                principal=caller.owner_filter,
            )
        except Exception as error:
            return error_response(error)
        return _json({"rounds": [to_json(round_message(r)) for r in records]})

    async def get_round(request: Request) -> Response:
        try:
            caller = access.caller(request)
            round_id = request.path_params["round_id"]
            if caller.owner_filter is not None:
                # ROUND_NOT_FOUND for another principal's round, as over gRPC.
                await runtime.require_visible_round(round_id, caller.owner_filter)
            record = await runtime.get_round(round_id)
        except Exception as error:
            return error_response(error)
        return _json({"round": to_json(round_message(record))})

    async def execution(request: Request) -> Response:
        # What became of the execution a person answered (the page follows it).
        try:
            caller = access.caller(request)
            execution_id = request.path_params["execution_id"]
            if caller.owner_filter is not None:
                # EXECUTION_NOT_FOUND for another principal's execution, as over gRPC.
                await runtime.require_visible_execution(execution_id, caller.owner_filter)
            state = await runtime.snapshot(execution_id)
        except Exception as error:
            return error_response(error)
        return _json({"execution": to_json(state_message(state))})

    async def answer(request: Request) -> Response:
        message = pb.RespondRequest(round_id=request.path_params["round_id"])
        try:
            caller = access.caller(request)
            # Before anything is read or written, like the gRPC interceptor.
            access.check_respond(caller)
            # JSON only: another site's plain HTML form cannot send it (a browser asks
            # this server first, CORS preflight, which it never allows).
            media_type = request.headers.get("content-type", "").split(";")[0].strip()
            if media_type.lower() != "application/json":
                raise _invalid("", "the request body must be application/json")
            _read_answer(await _body(request), message)
            if caller.owner_filter is not None:
                await runtime.require_visible_round(message.round_id, caller.owner_filter)
            reply = await respond(runtime, message)
        except Exception as error:
            return error_response(error, message)
        return _json(to_json(reply) | {"replayed": reply.replayed})

    return Starlette(
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))],
        routes=[
            Route("/", page),
            Route("/api/events", events),
            Route("/api/rounds", pending),
            Route("/api/rounds/{round_id:path}/respond", answer, methods=["POST"]),
            Route("/api/rounds/{round_id:path}", get_round),
            Route("/api/executions/{execution_id:path}", execution),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
    )


def _json(document: dict[str, Any]) -> JSONResponse:
    return JSONResponse(document, headers={"Cache-Control": "no-store"})


async def _body(request: Request) -> Any:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise _invalid("", f"the request body exceeds {MAX_BODY_BYTES} bytes")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # nesting past the decoder's depth limit
        raise _invalid("", "the request body is not JSON") from None


def _read_answer(body: Any, message: pb.RespondRequest) -> None:
    """`{"idempotency_key": str, "responses": {...}}` into `message` (its round_id set)."""
    if not isinstance(body, dict):
        raise _invalid("", "the request body must be a JSON object")
    unknown = sorted(set(body) - {"idempotency_key", "responses"})
    if unknown:
        raise _invalid(unknown[0], "unknown field")
    key = body.get("idempotency_key", "")
    if not isinstance(key, str):
        raise _invalid("idempotency_key", "must be a string")
    # JSON can spell a lone surrogate ("\ud800"), which a protobuf string refuses.
    if problem := text_problem(key):
        raise _invalid("idempotency_key", problem)
    message.idempotency_key = key
    responses = body.get("responses", {})
    if not isinstance(responses, dict):
        raise _invalid("responses", "must be an object of request key to response")
    try:
        json_format.ParseDict({"responses": responses}, message)
    except (json_format.ParseError, OverflowError, RecursionError):
        # OverflowError: a JSON integer no double holds (a Struct number is one).
        # The parser's message quotes the offending value: an answer may be a secret.
        raise _invalid(
            "responses",
            "must map each request key to {action: ELICITATION_ACTION_*, content: object}",
        ) from None


def _invalid(field: str, why: str) -> ManagedInputValidationError:
    if field:
        return ManagedInputValidationError(
            "invalid answer", field_violations=[FieldViolation(field, why)]
        )
    return ManagedInputValidationError(f"invalid answer: {why}")
