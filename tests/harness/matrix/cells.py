"""The harness matrix: every scenario, for every harness and MCP generation, and what it must do.

Each cell is a test (tests/harness/matrix/test_<harness>.py runs the scenarios of
scenarios.py with that harness) that asserts exactly the outcome declared here.
docs/guides/harnesses/matrix.md is generated from this table (scripts/gen-docs.py;
tests/docs/test_generated_docs.py checks it is current), so the page shows what the
tests hold: ✓ where the cell works as a person answering would expect, otherwise the
typed outcome and why.
"""

from __future__ import annotations

from dataclasses import dataclass

HARNESSES = ("scripted", "codex", "claude-code")
LEGACY = "legacy"
MRTR = "2026-07-28"
GENERATIONS = (LEGACY, MRTR)


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    generations: tuple[str, ...] = GENERATIONS


@dataclass(frozen=True)
class Expect:
    """What a cell's execution ends as. `note` (None: it works as expected) says why
    the outcome is what it is; `covered_by` names a test elsewhere for a cell the
    matrix does not run."""

    outcome: str = "succeeded"
    failure_code: str | None = None
    note: str | None = None
    covered_by: str | None = None


SCENARIOS = (
    Scenario("accept", "Python SDK server (`ctx.elicit` / `Resolve`), multi-field form: accept"),
    Scenario("decline", "the same form: decline"),
    Scenario("cancel_answer", "the same form: the answer `cancel`"),
    Scenario(
        "typescript",
        "TypeScript SDK server (`elicitInput`, zod schema): accept, decline, cancel",
        (LEGACY,),
    ),
    Scenario("everything", "server-everything's 13-field form: accept, decline, cancel", (LEGACY,)),
    Scenario("form_invalid_first", "an answer the server's schema refuses, then a valid one"),
    Scenario("two_rounds", "two rounds in one tool call"),
    Scenario("url_mode", "URL mode: consent"),
    Scenario("url_required", "URL elicitation required (-32042), then the retry", (LEGACY,)),
    Scenario("handle_cancel", "`handle.cancel()` while paused"),
    Scenario("deadline", "a round's deadline expires"),
    Scenario("unselected_tool", "a call of a tool outside the selection", (LEGACY,)),
    Scenario("sigkill", "the worker is SIGKILLed while paused"),
)

_AGENT_RECOVERY = Expect(
    "failed",
    "recovery_unavailable",
    "an agent process is not resumable: the round fails closed",
)
# Cells whose outcome is not the scenario's plain success.
_EXPECTED: dict[tuple[str, str, str], Expect] = {
    ("handle_cancel", h, g): Expect("cancelled", "cancelled")
    for h in HARNESSES
    for g in GENERATIONS
}
_EXPECTED.update(
    {
        ("deadline", h, g): Expect("failed", "operation_timeout")
        for h in HARNESSES
        for g in GENERATIONS
    }
)
_EXPECTED.update(
    {
        ("unselected_tool", "scripted", LEGACY): Expect(
            "failed",
            "tool_not_selected",
            "a script's call of an unselected tool is refused before it reaches the server",
        ),
        ("sigkill", "scripted", LEGACY): Expect(
            "failed",
            "recovery_unavailable",
            "a legacy call held open on the server cannot move to another worker",
        ),
        ("sigkill", "scripted", MRTR): Expect(
            note="the round moves to the next worker and the answer completes the call",
            covered_by="tests/api/test_round_resume.py",
        ),
        ("sigkill", "codex", LEGACY): _AGENT_RECOVERY,
        ("sigkill", "codex", MRTR): _AGENT_RECOVERY,
        ("sigkill", "claude-code", LEGACY): _AGENT_RECOVERY,
        ("sigkill", "claude-code", MRTR): _AGENT_RECOVERY,
    }
)


def expected(scenario: str, harness: str, generation: str) -> Expect:
    return _EXPECTED.get((scenario, harness, generation), Expect())


def scenario(scenario_id: str) -> Scenario:
    return next(s for s in SCENARIOS if s.id == scenario_id)
