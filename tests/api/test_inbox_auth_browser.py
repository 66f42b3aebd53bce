"""The web inbox's sign-in in a real headless browser (as test_inbox_browser.py):
a service with bearer tokens; the page asks for a token, refuses a wrong one,
then shows and answers only the signed-in principal's rounds.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from m3grpc.wire.gen.m3.v1 import elicitation_pb2, execution_pb2, execution_service_pb2
from tests.api.conftest import Stubs
from tests.api.inbox_support import InboxService
from tests.api.test_inbox_auth import TOKENS, _metadata, _pending_round, _status, _submit, service

playwright_api = pytest.importorskip("playwright.sync_api")

__all__ = ["service"]  # fixtures

CHROMIUM = os.environ.get("M3_CHROMIUM") or shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/setup-chromium.sh)")
WAIT_MS = 60_000


@pytest.fixture
def stubs(service: InboxService) -> Iterator[Stubs]:
    client = service.stubs()
    yield client
    client.close()


@pytest.fixture
def page() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context()
        context.set_default_timeout(WAIT_MS)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        try:
            yield page
        finally:
            browser.close()
        assert errors == [], errors


def test_the_page_signs_in_and_shows_only_the_principals_rounds(
    service: InboxService, stubs: Stubs, page: Any
) -> None:
    alices = _submit(stubs, "alice")
    alice_round = _pending_round(stubs, "alice", alices)
    bobs = _submit(stubs, "bob")
    bob_round = _pending_round(stubs, "bob", bobs)

    page.goto(service.inbox_url)
    token = page.get_by_label("Access token")
    playwright_api.expect(token).to_be_visible()
    token.fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    playwright_api.expect(page.locator("#login-problem")).to_have_text(
        "That token was not accepted."
    )

    token.fill(TOKENS["bob"])
    page.get_by_role("button", name="Sign in").click()
    playwright_api.expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    own = page.locator(f'#pending li[data-round-id="{bob_round}"] a')
    playwright_api.expect(own).to_have_count(1)
    playwright_api.expect(
        page.locator(f'#pending li[data-round-id="{alice_round}"]')
    ).to_have_count(0)
    # The token stays for this tab: a reload needs no new sign-in.
    page.reload()
    playwright_api.expect(own).to_have_count(1)
    playwright_api.expect(page.locator("#login")).to_be_hidden()

    own.click()
    page.get_by_label("Decline").check()
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(page.locator("#notice")).to_contain_text("Answer recorded")
    result = stubs.executions.Result(
        execution_service_pb2.ResultRequest(execution_id=bobs),
        timeout=120,
        metadata=_metadata("bob"),
    ).result
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    # Alice's round, opened by its address, is not found for Bob and stays pending.
    page.goto(f"{service.inbox_url}#round={alice_round}")
    playwright_api.expect(page.locator("#notice")).to_contain_text(alice_round)
    assert _status(stubs, alice_round) == elicitation_pb2.MANAGED_INPUT_STATUS_PENDING
