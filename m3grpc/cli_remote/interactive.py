"""`respond --interactive`: a person answers a round at the terminal, request by
request and field by field (type-aware, defaults, required fields, choices).

Prompts go to stderr, so `--json` output on stdout stays one document. Nothing
is sent until every request is answered and the person confirms; end of input
or Ctrl-C sends nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TextIO

from m3grpc.cli_remote.exits import CliInputError
from m3grpc.cli_remote.form_fields import FormField, form_fields, format_value
from m3grpc.types import (
    ElicitationAction,
    ElicitationRequest,
    ElicitationResponse,
    FormElicitationRequest,
)

_ACTIONS: dict[str, ElicitationAction] = {
    "a": "accept",
    "accept": "accept",
    "d": "decline",
    "decline": "decline",
    "c": "cancel",
    "cancel": "cancel",
}


class Aborted(Exception):
    """The person chose not to send the answer."""


class Prompter:
    def __init__(self, stdin: TextIO, stderr: TextIO) -> None:
        self._stdin = stdin
        self._stderr = stderr

    def say(self, text: str) -> None:
        self._stderr.write(text + "\n")
        self._stderr.flush()

    def ask(self, prompt: str) -> str:
        self._stderr.write(prompt)
        self._stderr.flush()
        line = self._stdin.readline()
        if not line:
            self._stderr.write("\n")
            raise CliInputError("input ended before the answer was complete; nothing was sent")
        return line.rstrip("\r\n")


def answer_round(
    prompter: Prompter, requests: Mapping[str, ElicitationRequest]
) -> dict[str, ElicitationResponse]:
    """Ask for every request's answer, show them, and ask before sending (Aborted on no)."""
    answers: dict[str, ElicitationResponse] = {}
    for number, (key, request) in enumerate(requests.items(), start=1):
        prompter.say(f"\nRequest {number} of {len(requests)}: {key} ({request.mode})")
        prompter.say(f"  {request.message}")
        answers[key] = _answer(prompter, request)
    prompter.say("\nYour answer:")
    for key, answer in answers.items():
        content = "" if answer.content is None else " " + json.dumps(dict(answer.content))
        prompter.say(f"  {key}: {answer.action}{content}")
    if not _yes(prompter, "Send it? [Y/n]: ", default=True):
        raise Aborted
    return answers


def _answer(prompter: Prompter, request: ElicitationRequest) -> ElicitationResponse:
    if not isinstance(request, FormElicitationRequest):
        prompter.say(f"  URL: {request.url}")
        prompter.say("  (accept records your consent; M3 does not open the URL)")
    action = _action(prompter)
    if action != "accept" or not isinstance(request, FormElicitationRequest):
        return ElicitationResponse(action=action)
    content: dict[str, Any] = {}
    for field in form_fields(request.requested_schema):
        value = _field(prompter, field)
        if value is not _SKIP:
            content[field.name] = value
    return ElicitationResponse(action="accept", content=content)


def _action(prompter: Prompter) -> ElicitationAction:
    while True:
        text = prompter.ask("Action: [a]ccept, [d]ecline or [c]ancel? [accept]: ").strip().lower()
        if not text:
            return "accept"
        if text in _ACTIONS:
            return _ACTIONS[text]
        prompter.say("  ! answer accept, decline or cancel")


_SKIP: Any = object()


def _field(prompter: Prompter, field: FormField) -> Any:
    label = field.name if field.title in (None, field.name) else f"{field.name} ({field.title})"
    prompter.say(f"\n  {label}: {field.summary()}")
    if field.description:
        prompter.say(f"    {field.description}")
    for number, choice in enumerate(field.choices, start=1):
        shown = choice.value if choice.label == choice.value else f"{choice.value} - {choice.label}"
        prompter.say(f"    {number}) {shown}")
    if field.kind == "array":
        prompter.say("    (several values: separate them with commas)")
    hint = "[y/n]" if field.kind == "boolean" else ""
    if field.has_default:
        hint = f"{hint} [{format_value(field.default)}]".strip()
    elif not field.required:
        hint = f"{hint} [empty: leave out]".strip()
    prompt = f"  {field.name} {hint}: " if hint else f"  {field.name}: "
    while True:
        text = prompter.ask(prompt)
        if not text.strip():
            if field.has_default:
                return field.default
            if not field.required:
                return _SKIP
            prompter.say("  ! required")
            continue
        try:
            return field.parse(text)
        except ValueError as error:
            prompter.say(f"  ! {error}")


def _yes(prompter: Prompter, prompt: str, *, default: bool) -> bool:
    while True:
        text = prompter.ask(prompt).strip().lower()
        if not text:
            return default
        if text in ("y", "yes"):
            return True
        if text in ("n", "no"):
            return False
        prompter.say("  ! answer y or n")
