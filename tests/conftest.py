"""Suite-wide set-up for pytest-xdist (scripts/test.sh runs `pytest -n N --dist loadfile`).

Each worker gets a temporary directory of its own, so what the code under test creates in
tempfile.gettempdir() (Codex's CODEX_HOMEs, ephemeral stores, subprocesses' files) is this
worker's alone and assertions about what is left there see only this worker's.

The files whose few tests take minutes in all run first, so that no worker starts one
while the others are finishing (xdist hands out whole files in collection order).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Longest first, from a run's --durations.
LONG_FILES = (
    "tests/harness/test_agent_long_wait.py",
    "tests/campaigns/test_crash_campaign.py",
    "tests/scenarios/test_scenarios.py",
    "tests/docs/test_snippets.py",
    "tests/api/test_round_resume.py",
    "tests/api/test_client_install.py",
    "tests/docker/test_compose.py",
    "tests/api/test_storage_faults.py",
    "tests/storage/test_state_machine.py",
    "tests/ops/test_installed_wheel.py",
)

_ORIGINAL_TMPDIR = "_M3_TESTS_ORIGINAL_TMPDIR"


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    directory = tempfile.mkdtemp(prefix=f"m3-tests-{worker}-")
    os.environ[_ORIGINAL_TMPDIR] = os.environ.get("TMPDIR", "")
    # Subprocesses inherit TMPDIR; this process rereads it on the next gettempdir().
    os.environ["TMPDIR"] = directory
    tempfile.tempdir = None


def pytest_unconfigure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is None or _ORIGINAL_TMPDIR not in os.environ:
        return
    directory = os.environ["TMPDIR"]
    original = os.environ.pop(_ORIGINAL_TMPDIR)
    if original:
        os.environ["TMPDIR"] = original
    else:
        del os.environ["TMPDIR"]
    tempfile.tempdir = None
    shutil.rmtree(directory, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = [name for name in LONG_FILES if not (ROOT / name).is_file()]
    assert not missing, f"tests/conftest.py LONG_FILES names files that are gone: {missing}"
    rank = {name: index for index, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
