"""The crash campaign (tests/campaigns/crash_campaign.py), reduced for CI and run
through its command line: 20 executions paused, 3 SIGKILLs (one at each point of
the round cycle), on SQLite (one service) and on PostgreSQL (two replicas, a
fresh database; skipped without M3_TEST_POSTGRES_URL).

Its invariants: every acknowledged Respond survives with its content and a final
status, every orphaned round fails closed (a resumable one is released instead),
no round is pending twice, no execution is left non-terminal once recovery ran,
and WatchPending resumed by cursor loses no event. The full campaign's command
and figures are in docs/how-it-works/crash-campaign.md ("Crash campaign").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.storage.conftest import POSTGRES_URL

from .crash_campaign import POINTS, main

BACKENDS = [
    "sqlite",
    pytest.param(
        "postgres",
        marks=[
            pytest.mark.postgres,
            pytest.mark.skipif(POSTGRES_URL is None, reason="M3_TEST_POSTGRES_URL not set"),
        ],
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_crash_campaign_keeps_every_invariant(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A lease above the 3 s of the full runs: a stall past it is a fence by design
    # (see docs/how-it-works/crash-campaign.md), and CI machines are shared.
    argv = ["--backend", backend, "--executions", "20", "--kills", "3", "--lease-seconds", "5"]
    argv += ["--workdir", str(tmp_path)]
    code = main(argv)
    report = json.loads(capsys.readouterr().out)
    assert report["violations"] == [], report
    assert code == 0
    # The campaign did what it claims: each kill point once, answers acknowledged
    # before the kills, orphans of the dead service recovered, and a watcher that
    # reconnected with its cursor after each kill.
    assert report["kill_points"] == dict.fromkeys(POINTS, 1), report
    assert report["responds_acknowledged"] >= 3, report
    assert report["orphaned_rounds"], report
    assert report["watch_reconnects"] >= 3, report
