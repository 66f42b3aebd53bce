"""The crash campaign (tests/campaigns/crash_campaign.py), reduced for CI: 20
executions paused, 3 SIGKILLs, on SQLite (one service) and on PostgreSQL (two
replicas, a fresh database; skipped without M3_TEST_POSTGRES_URL).

Its invariants: every acknowledged Respond survives with its content and a final
status, every orphaned round fails closed (a resumable one is released instead),
no round is pending twice, no execution is left non-terminal once recovery ran,
and WatchPending resumed by cursor loses no event. The full campaign's figures
are in the README ("Crash campaign").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.conftest import BACKENDS, postgres_database

from .crash_campaign import POINTS, Settings, run


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(backend, database): a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "m3.sqlite")
    else:
        for url in postgres_database("m3_crash"):
            yield "postgres", url


def test_crash_campaign_keeps_every_invariant(database: tuple[str, str], tmp_path: Path) -> None:
    backend, url = database
    # Three kills: each point of the round cycle once (see Campaign.schedule).
    settings = Settings(backend, url, tmp_path, executions=20, kills=3)
    report = run(settings)
    assert report.violations == [], report.summary()
    assert set(report.points) == set(POINTS), report.summary()
    # The campaign did what it claims: answers acknowledged before kills, orphans
    # of the dead service recovered, a watcher that reconnected after each kill.
    assert report.acknowledged >= 3, report.summary()
    assert report.orphans, report.summary()
    assert report.watch_reconnects >= 1, report.summary()
