"""m3.v1.ElicitationService on the Runtime facade."""

from __future__ import annotations

import asyncio

from m3grpc.api import guard, tokens
from m3grpc.api.auth import principal_filter
from m3grpc.api.guard import Context
from m3grpc.clipping import clip
from m3grpc.errors import FieldViolation, ManagedInputValidationError
from m3grpc.runtime import Runtime, redact_responses
from m3grpc.runtime.limits import checked_id
from m3grpc.types import ManagedInputRecord, ManagedInputStatus
from m3grpc.wire import convert, messages
from m3grpc.wire.gen.m3.v1 import elicitation_pb2, elicitation_service_pb2_grpc
from m3grpc.wire.gen.m3.v1 import elicitation_service_pb2 as pb

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
# A status filter names at most this many (repeats allowed; there are six statuses):
# reading millions of entries (a 4 MB request) would hold the event loop.
MAX_STATUSES = 16
# A ListRounds page ends early rather than grow past this many bytes, so a reply
# always fits in gRPC's default 4 MB message limit (next_page_token continues).
MAX_PAGE_BYTES = 3_000_000
_INLINE_CONVERSION_BYTES = 65_536


class ElicitationService(elicitation_service_pb2_grpc.ElicitationServiceServicer):
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @guard.unary
    async def GetPending(
        self, request: pb.GetPendingRequest, context: Context
    ) -> pb.GetPendingResponse:
        checked_id(request.execution_id, "execution_id")  # docs/reference/identifiers.md
        if (principal := principal_filter()) is not None:
            await self._runtime.require_visible_execution(request.execution_id, principal)
        record = await self._runtime.pending_round(request.execution_id)
        if record is None:
            return pb.GetPendingResponse()
        return pb.GetPendingResponse(round=messages.pending_round_message(record))

    @guard.unary
    async def Respond(self, request: pb.RespondRequest, context: Context) -> pb.RespondResponse:
        if (principal := principal_filter()) is not None:
            # ROUND_NOT_FOUND for another principal's round: it cannot be answered.
            await self._runtime.require_visible_round(request.round_id, principal)
        return await respond(self._runtime, request)

    @guard.unary
    async def GetRound(self, request: pb.GetRoundRequest, context: Context) -> pb.GetRoundResponse:
        if (principal := principal_filter()) is not None:
            await self._runtime.require_visible_round(request.round_id, principal)
        record = await self._runtime.get_round(request.round_id)
        return pb.GetRoundResponse(round=round_message(record))

    @guard.unary
    async def ListRounds(
        self, request: pb.ListRoundsRequest, context: Context
    ) -> pb.ListRoundsResponse:
        if request.page_size < 0:
            raise _invalid("page_size", "must not be negative")
        size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        try:
            values = convert.MANAGED_INPUT_STATUS.models(request.statuses, at_most=MAX_STATUSES)
        except convert.WireValueError as exc:
            raise _invalid(f"statuses{exc.path}", exc.description) from None
        statuses = [ManagedInputStatus(value) for value in values]
        if request.execution_id:  # empty: every execution
            checked_id(request.execution_id, "execution_id")
        filters = tokens.filter_digest(request.execution_id, [s.value for s in statuses])
        after = tokens.read_page_token(request.page_token, filters) if request.page_token else None
        records = await self._runtime.list_rounds(
            execution_id=request.execution_id or None,
            statuses=statuses or None,
            after=after,
            limit=size + 1,  # one more tells whether another page exists
            principal=principal_filter(),
        )
        page = records[:size]
        response = pb.ListRoundsResponse()
        used = 0
        for index, record in enumerate(page):
            message = round_message(record)
            used += message.ByteSize() + 8  # field tag and length
            if index and used > MAX_PAGE_BYTES:
                page = page[:index]  # the rest comes with the next page
                break
            response.rounds.append(message)
        if len(records) > len(page):
            last = page[-1]
            response.next_page_token = tokens.page_token(
                (last.pending.created_at, last.round_id), filters
            )
        return response


async def respond(runtime: Runtime, request: pb.RespondRequest) -> pb.RespondResponse:
    """Answer a round: the one path of gRPC `Respond` and the web inbox's answer."""
    try:
        # A large answer is converted off the event loop (the limits are checked
        # after conversion); the common small one inline, without a thread hop.
        if request.ByteSize() > _INLINE_CONVERSION_BYTES:
            responses = await asyncio.to_thread(messages.responses_model, request.responses)
        else:
            responses = messages.responses_model(request.responses)
        submission = await runtime.respond(
            request.round_id,
            responses,
            idempotency_key=request.idempotency_key,
            execution_id=request.execution_id or None,
        )
    except ManagedInputValidationError as error:
        if request.round_id and "round_id" not in error.metadata:
            # Documented metadata; never an unbounded echo of the input.
            error.metadata["round_id"] = clip(request.round_id)
        raise
    return pb.RespondResponse(
        round_id=submission.round_id,
        status=convert.MANAGED_INPUT_STATUS.wire(submission.status),
        replayed=submission.replayed,
    )


def round_message(record: ManagedInputRecord) -> elicitation_pb2.ElicitationRound:
    """The diagnostic projection of a round: responses redacted (actions and keys)."""
    # The store's projection, from the record already read (one query per page).
    redacted = redact_responses(record) if record.responses is not None else None
    return messages.elicitation_round_message(record, redacted)


def _invalid(field: str, why: str) -> ManagedInputValidationError:
    return ManagedInputValidationError(
        f"invalid {field}", field_violations=[FieldViolation(field, why)]
    )
