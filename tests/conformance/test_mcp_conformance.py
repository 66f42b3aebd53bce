"""The official MCP client conformance suite, with M3 as the client (tests/conformance/client.py).

Two releases of `@modelcontextprotocol/conformance` are installed from tests/node's lockfile:
the newest stable ("stable") and the newest pre-release ("next", the npm alias
conformance-next). Every client scenario of either about elicitation, input requests
(2026-07-28 `inputRequests`) or request state runs through a managed execution (each
elicitation is a pending round, answered through the kit) and through an elicitation plan
(human_input="fail").

`tools_call` runs too: M3 as a plain MCP client. A result without `resultType` is a
complete one (the 2026-07-28 spec: absent means "complete"; the `sep-2322` scenario checks
it with `test_mrtr_no_result_type`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.node import node_tools

CLIENT = Path(__file__).with_name("client.py")
CONFORMANCE_JS = {"stable": "M3_CONFORMANCE_JS", "next": "M3_CONFORMANCE_NEXT_JS"}
# A client scenario is in scope when its name says elicitation, input (requests) or request state.
IN_SCOPE = re.compile(r"elicitation|input|request-state|mrtr")

SEP1034 = "elicitation-sep1034-client-defaults"
SEP2322 = "sep-2322-client-request-state"
TOOLS_CALL = "tools_call"
# Run too, though outside the in-scope names: M3 as a plain MCP client.
ALSO_RUN = (TOOLS_CALL,)
# The spec version each scenario is run at (the runner passes it to the client, which pins
# its binding to that protocol generation).
SPEC_VERSION = {SEP1034: "2025-11-25", SEP2322: "2026-07-28", TOOLS_CALL: "2025-11-25"}
RUNS = {"stable": (TOOLS_CALL, SEP1034), "next": (TOOLS_CALL, SEP1034, SEP2322)}

# The rounds a managed execution answers: operation name and whether the server sent requestState.
MANAGED_ROUNDS = {
    TOOLS_CALL: [],
    SEP1034: [("test_client_elicitation_defaults", False)],
    SEP2322: [("test_mrtr_echo_state", True), ("test_mrtr_no_state", False)],
}


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str  # the runner's stdout + stderr, for failure messages
    checks: list[dict[str, Any]]
    report: dict[str, Any]  # the client's JSON report (last line of its stdout)


def run_scenario(release: str, scenario: str, human_input: str, output_dir: Path) -> Run:
    tools = node_tools()
    completed = subprocess.run(
        [
            tools["M3_NODE22"],
            tools[CONFORMANCE_JS[release]],
            "client",
            "--command",
            f"{sys.executable} {CLIENT}",
            "--scenario",
            scenario,
            "--spec-version",
            SPEC_VERSION[scenario],
            "--timeout",
            "150000",
            "--output-dir",
            str(output_dir),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "M3_CONFORMANCE_HUMAN_INPUT": human_input},
    )
    output = completed.stdout[-6000:] + completed.stderr[-4000:]
    [result_dir] = output_dir.iterdir()
    checks = json.loads((result_dir / "checks.json").read_text())
    client_stdout = (result_dir / "stdout.txt").read_text().strip()
    assert client_stdout, output
    report = json.loads(client_stdout.splitlines()[-1])
    return Run(completed.returncode, output, checks, report)


_runs: dict[tuple[str, str, str], Run] = {}


def scenario_run(
    release: str, scenario: str, human_input: str, factory: pytest.TempPathFactory
) -> Run:
    """Each (release, scenario, human input) runs once per session; two tests read it."""
    key = (release, scenario, human_input)
    if key not in _runs:
        output_dir = factory.mktemp(f"conformance-{release}-{human_input}")
        _runs[key] = run_scenario(release, scenario, human_input, output_dir)
    return _runs[key]


def cases() -> list[Any]:
    return [
        pytest.param(
            release,
            scenario,
            human_input,
            id=f"{release}-{scenario}-{human_input}",
        )
        for release, scenarios in RUNS.items()
        for scenario in scenarios
        for human_input in ("managed", "fail")
    ]


@pytest.mark.node
@pytest.mark.parametrize("release", sorted(RUNS))
def test_every_in_scope_client_scenario_is_run(release: str) -> None:
    tools = node_tools()
    listed = subprocess.run(
        [tools["M3_NODE22"], tools[CONFORMANCE_JS[release]], "list", "--client"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    names = re.findall(r"^\s*- (\S+)", listed, flags=re.MULTILINE)
    assert SEP1034 in names  # the listing was parsed
    in_scope = [n for n in names if IN_SCOPE.search(n) or n in ALSO_RUN]
    assert sorted(set(in_scope)) == sorted(RUNS[release])


@pytest.mark.node
@pytest.mark.parametrize(("release", "scenario", "human_input"), cases())
def test_conformance_checks_pass(
    release: str, scenario: str, human_input: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every check the scenario's server records passes, and a managed execution answered
    the scenario's elicitations as pending rounds."""
    run = scenario_run(release, scenario, human_input, tmp_path_factory)
    statuses = {check["id"]: check["status"] for check in run.checks if check["status"] != "INFO"}
    assert statuses and set(statuses.values()) == {"SUCCESS"}, (statuses, run.output)

    report = run.report
    assert report["human_input"] == human_input
    rounds = [(r["operation_name"], r["request_state"] is not None) for r in report["rounds"]]
    assert rounds == (MANAGED_ROUNDS[scenario] if human_input == "managed" else []), report
    for answered in report["rounds"]:
        assert answered["status"] == "response_validated" and not answered["replayed"], answered
    failed = [
        (op["operation_name"], op["failure_code"]) for op in report["operations"] if not op["ok"]
    ]
    assert failed == [], report


@pytest.mark.node
@pytest.mark.parametrize(("release", "scenario", "human_input"), cases())
def test_conformance_execution_succeeds(
    release: str, scenario: str, human_input: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The client's execution succeeded and the runner reports the scenario passed."""
    run = scenario_run(release, scenario, human_input, tmp_path_factory)
    failed = [op for op in run.report["operations"] if not op["ok"]]
    assert run.report["outcome"] == "succeeded", failed
    assert run.returncode == 0, run.output
