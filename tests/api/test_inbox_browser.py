"""The web inbox in a real headless browser: Chromium from the OS packages
(scripts/setup-chromium.sh) driven by Playwright, against a real `m3grpc serve`
whose executions run the stdio test MCP servers. At a desktop width, and at a
phone's (390 px) where the layout is checked.

Skipped when Playwright or Chromium is missing (scripts/test.sh installs both).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)
from tests.api.conftest import Stubs
from tests.api.inbox_support import (
    PENDING,
    InboxService,
    inbox_service,
    round_status,
    stubs,
    submit,
)

playwright_api = pytest.importorskip("playwright.sync_api")

__all__ = ["inbox_service", "stubs"]  # fixtures

CHROMIUM = os.environ.get("M3_CHROMIUM") or shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/setup-chromium.sh)")
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


def open_page(browser: Any, viewport: dict[str, int]) -> Iterator[Any]:
    context = browser.new_context(viewport=viewport)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert errors == [], errors  # no script error on the page


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    yield from open_page(browser, DESKTOP)


@pytest.fixture(params=[PHONE, DESKTOP], ids=["phone", "desktop"])
def sized_page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from open_page(browser, request.param)


def wait_round(stubs: Stubs, execution_id: str) -> str:
    return str(stubs.wait_pending(execution_id).round_id)


def wait_status(stubs: Stubs, round_id: str, status: int) -> None:
    for _ in range(1200):
        if round_status(stubs, round_id) == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"round {round_id} never reached status {status}")


def open_new_round(
    page: Any, inbox_service: InboxService, stubs: Stubs, server: str, tool: str
) -> tuple[str, str]:
    """Submit a managed execution of `server`'s `tool`, open its round on the page:
    (execution ID, round ID)."""
    execution_id = submit(stubs, server, tool)
    round_id = wait_round(stubs, execution_id)
    page.goto(f"{inbox_service.inbox_url}#round={round_id}")
    return execution_id, round_id


def recorded_key(stubs: Stubs, round_id: str) -> str:
    reply = stubs.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
    )
    return str(reply.round.responses.idempotency_key)


def stored_key(page: Any, round_id: str) -> str | None:
    return page.evaluate("id => localStorage.getItem('m3-inbox-idempotency-key:' + id)", round_id)  # type: ignore[no-any-return]


def notice(page: Any) -> Any:
    return page.locator("#notice")


def test_a_pushed_round_is_answered_through_the_form(
    inbox_service: InboxService, stubs: Stubs, sized_page: Any
) -> None:
    page = sized_page
    page.goto(inbox_service.inbox_url)
    playwright_api.expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    # Submitted after the page loaded: it appears without a reload.
    execution_id = submit(stubs, "order_form", "place_order")
    round_id = wait_round(stubs, execution_id)
    item = page.locator(f'#pending li[data-round-id="{round_id}"] a')
    playwright_api.expect(item).to_contain_text("What should be ordered?")
    item.click()
    # The server's question leads, and the schema's title; IDs and keys are details.
    playwright_api.expect(page.locator("#round-heading")).to_have_text("What should be ordered?")
    playwright_api.expect(page.locator("#requests legend").first).to_have_text("Order")
    playwright_api.expect(page.locator("#round-summary")).to_have_text(
        "tool place_order on order_form \u00b7 status: pending"
    )
    details = page.locator("#round-details")
    playwright_api.expect(details).to_contain_text(round_id)
    playwright_api.expect(details).to_contain_text(execution_id)
    playwright_api.expect(details).to_contain_text("Request keys")

    # The form follows the schema: titles, descriptions, defaults, enums, types.
    form = page.locator("#answer")
    playwright_api.expect(form.get_by_text("What to order")).to_be_visible()
    playwright_api.expect(page.get_by_label("Quantity")).to_have_value("1")
    playwright_api.expect(page.get_by_label("Quantity")).to_have_attribute("type", "number")
    playwright_api.expect(page.get_by_label("Express")).not_to_be_checked()
    color = page.get_by_label("Color")
    playwright_api.expect(color.locator("option:checked")).to_have_text("green")
    # Optional: it may be left unset.
    assert color.locator("option").all_inner_texts() == ["(choose)", "red", "green", "blue"]
    playwright_api.expect(page.get_by_label("Item")).to_have_attribute("aria-required", "true")

    # Validation as the person types.
    quantity = page.get_by_label("Quantity")
    quantity.fill("0")
    playwright_api.expect(form.locator('[data-field="quantity"] .error')).to_have_text(
        "Must be at least 1."
    )
    playwright_api.expect(quantity).to_have_attribute("aria-invalid", "true")
    quantity.fill("3")
    playwright_api.expect(form.locator('[data-field="quantity"] .error')).to_have_text("")

    page.get_by_label("Item").fill("Widget")
    page.get_by_label("Weight Kg").fill("2.5")
    page.get_by_label("Express").check()
    color.select_option(label="blue")
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(notice(page)).to_contain_text("Answer recorded")
    # The page follows the round to its end, and shows how the execution ended.
    playwright_api.expect(page.locator("#outcome")).to_have_text(
        "The execution finished: succeeded."
    )
    playwright_api.expect(page.locator("#round-summary")).to_contain_text("status: resolved")
    playwright_api.expect(page.locator("#history")).to_contain_text("resolved")

    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    text = result.operations[0].result["content"][0]["text"]
    assert text == "ordered 3 x Widget (2.5 kg, express, blue, note: -)"
    # The live list drops it; the history shows its steps, the answer redacted.
    playwright_api.expect(item).to_have_count(0)
    page.reload()
    history = page.locator("#history")
    playwright_api.expect(history).to_contain_text("answer accepted")
    playwright_api.expect(history).to_contain_text("resolved")
    playwright_api.expect(history).to_contain_text("answer to order: accept with color")
    assert "Widget" not in history.inner_text()
    assert stored_key(page, round_id) is None  # acknowledged: forgotten


def test_an_invalid_value_shows_the_field_error_and_changes_nothing(
    inbox_service: InboxService, stubs: Stubs, page: Any
) -> None:
    execution_id = submit(stubs, "order_form", "place_order")
    round_id = wait_round(stubs, execution_id)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page.goto(f"{inbox_service.inbox_url}#round={round_id}")
    form = page.locator("#answer")
    page.get_by_label("Quantity").fill("0")
    page.get_by_role("button", name="Send answer").click()
    # Checked in the page: nothing is sent.
    playwright_api.expect(notice(page)).to_have_text("Fix 3 fields before sending.")
    playwright_api.expect(form.locator('[data-field="item"] .error')).to_have_text(
        "This field is required."
    )
    playwright_api.expect(page.get_by_label("Item")).to_be_focused()
    assert posts == []

    # A value only the service refuses (the page's check bypassed): its field
    # violation comes back and is shown next to the field; the round stays pending.
    page.get_by_label("Item").fill("Widget")
    page.get_by_label("Weight Kg").fill("2.5")
    page.get_by_label("Quantity").fill("2")

    def tamper(route: Any) -> None:
        body = route.request.post_data_json
        body["responses"]["order"]["content"]["quantity"] = -4
        route.continue_(post_data=json.dumps(body))

    page.route("**/respond", tamper)
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(form.locator('[data-field="quantity"] .error')).to_have_text(
        "is less than the minimum of 1"
    )
    playwright_api.expect(page.get_by_label("Quantity")).to_have_attribute("aria-invalid", "true")
    playwright_api.expect(notice(page)).to_contain_text("the responses do not answer")
    assert round_status(stubs, round_id) == PENDING
    page.unroute("**/respond")

    # Fixed, it goes through with the same key.
    page.get_by_label("Quantity").fill("2")
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(notice(page)).to_contain_text("Answer recorded")
    assert stubs.result(execution_id).outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED


def test_the_idempotency_key_survives_reloads_so_a_retry_cannot_answer_twice(
    inbox_service: InboxService, stubs: Stubs, page: Any
) -> None:
    execution_id = submit(stubs, "shipping", "book_shipment")
    round_id = wait_round(stubs, execution_id)
    # No live updates (a dropped connection): the page cannot learn from the
    # stream that its answer arrived, only from the service's reply.
    page.route("**/api/events", lambda route: route.abort())
    page.goto(f"{inbox_service.inbox_url}#round={round_id}")

    def fill() -> None:
        page.get_by_label("Street").fill("1 Main Street")
        page.get_by_label("City").fill("Pune")

    # 1. The request never reaches the service.
    fill()
    page.route("**/respond", lambda route: route.abort())
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(notice(page)).to_contain_text("did not confirm")
    key = stored_key(page, round_id)
    assert key
    page.unroute("**/respond")
    assert round_status(stubs, round_id) == PENDING

    # 2. After a reload the same key is used; this time the answer arrives but
    # its reply is lost.
    page.reload()
    assert stored_key(page, round_id) == key
    fill()

    def lose_reply(route: Any) -> None:
        route.fetch()  # the service gets it
        route.abort()  # the page never hears back

    page.route("**/respond", lose_reply)
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(notice(page)).to_contain_text("did not confirm")
    wait_status(stubs, round_id, elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED)
    assert recorded_key(stubs, round_id) == key
    page.unroute("**/respond")

    # 3. Sending again replays: the service answers that it already had it.
    page.get_by_role("button", name="Send again").click()
    playwright_api.expect(notice(page)).to_contain_text("already been recorded")
    assert stored_key(page, round_id) is None
    result = stubs.result(execution_id)
    assert result.operations[0].result["content"][0]["text"] == (
        "booked shipment to 1 Main Street, Pune"
    )


def test_a_lost_reply_is_recognised_after_a_reload(
    inbox_service: InboxService, stubs: Stubs, page: Any
) -> None:
    execution_id = submit(stubs, "shipping", "book_shipment")
    round_id = wait_round(stubs, execution_id)
    page.route("**/api/events", lambda route: route.abort())  # no live updates
    page.goto(f"{inbox_service.inbox_url}#round={round_id}")
    page.get_by_label("Street").fill("2 Side Road")
    page.get_by_label("City").fill("Goa")
    page.route("**/respond", lambda route: (route.fetch(), route.abort()))
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(notice(page)).to_contain_text("did not confirm")
    page.unroute("**/respond")
    stubs.result(execution_id)
    page.reload()
    # The round's history holds this browser's key: the page says so, and forgets it.
    playwright_api.expect(notice(page)).to_contain_text("Your answer was recorded")
    playwright_api.expect(page.locator("#answer")).to_be_hidden()
    assert stored_key(page, round_id) is None


def test_decline(inbox_service: InboxService, stubs: Stubs, page: Any) -> None:
    execution_id = submit(stubs, "shipping", "book_shipment")
    round_id = wait_round(stubs, execution_id)
    page.goto(f"{inbox_service.inbox_url}#round={round_id}")
    page.get_by_label("Decline").check()
    playwright_api.expect(page.get_by_label("Street")).to_be_hidden()
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(notice(page)).to_contain_text("Answer recorded")
    result = stubs.result(execution_id)
    assert result.operations[0].result["content"][0]["text"] == "shipment not booked: declined"


def test_a_url_request_shows_its_url_and_asks_for_consent(
    inbox_service: InboxService, stubs: Stubs, page: Any
) -> None:
    execution_id = submit(stubs, "url_required", "open_vault")
    round_id = wait_round(stubs, execution_id)
    page.goto(f"{inbox_service.inbox_url}#round={round_id}")
    playwright_api.expect(page.locator("#requests .url")).to_have_text(
        "https://vault.example.test/login"
    )
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(page.locator("#requests .error")).to_have_text(
        "Give your consent to accept, or decline."
    )
    assert round_status(stubs, round_id) == PENDING
    page.get_by_label("I consent to this URL request").check()
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(notice(page)).to_contain_text("Answer recorded")
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    assert result.operations[0].result["content"][0]["text"] == "vault main opened"


def test_the_live_list_learns_that_an_answer_arrived(
    inbox_service: InboxService, stubs: Stubs, page: Any
) -> None:
    execution_id = submit(stubs, "shipping", "book_shipment")
    round_id = wait_round(stubs, execution_id)
    page.goto(f"{inbox_service.inbox_url}#round={round_id}")
    playwright_api.expect(page.locator(f'#pending li[data-round-id="{round_id}"]')).to_have_count(1)
    page.get_by_label("Street").fill("3 Hill Lane")
    page.get_by_label("City").fill("Agra")
    page.route("**/respond", lambda route: (route.fetch(), route.abort()))
    page.get_by_role("button", name="Send answer").click()
    # The reply is lost, but the pushed "left pending" event tells the page.
    playwright_api.expect(notice(page)).to_contain_text("Your answer was recorded")
    playwright_api.expect(page.locator(f'#pending li[data-round-id="{round_id}"]')).to_have_count(0)
    playwright_api.expect(page.locator("#answer")).to_be_hidden()
    assert stubs.result(execution_id).outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED


def test_formats_patterns_lengths_and_choices_are_checked_as_the_person_types(
    inbox_service: InboxService, stubs: Stubs, page: Any
) -> None:
    execution_id = submit(stubs, "profile_form", "edit_profile")
    round_id = wait_round(stubs, execution_id)
    page.goto(f"{inbox_service.inbox_url}#round={round_id}")
    form = page.locator("#answer")

    def error(name: str) -> Any:
        return form.locator(f'[data-field="{name}"] .error')

    # Required fields first, in the schema's order, then the others by name.
    # evaluate_all does not wait, so wait for the form to be drawn first.
    fields = form.locator("[data-field]")
    playwright_api.expect(fields).to_have_count(6)
    order = fields.evaluate_all("all => all.map(e => e.dataset.field)")
    assert order == ["email", "handle", "topics", "bio", "birthday", "plan"]
    assert "null" not in form.inner_text() and "undefined" not in form.inner_text()
    playwright_api.expect(page.get_by_label("Email")).to_have_attribute("type", "email")
    playwright_api.expect(page.get_by_label("Birthday")).to_have_attribute("type", "date")
    plan = page.get_by_label("Plan")
    playwright_api.expect(plan.locator("option:checked")).to_have_text("Free")
    playwright_api.expect(form.get_by_text("3-16 lower-case letters, digits or _")).to_be_visible()

    page.get_by_label("Email").fill("not an address")
    playwright_api.expect(error("email")).to_have_text("Must be an email address.")
    page.get_by_label("Email").fill("ada@example.com")
    playwright_api.expect(error("email")).to_have_text("")
    page.get_by_label("Handle").fill("Ada!")
    playwright_api.expect(error("handle")).to_contain_text("Must match the pattern")
    page.get_by_label("Handle").fill("ada_l")
    playwright_api.expect(error("handle")).to_have_text("")
    page.get_by_label("Bio").fill("x" * 21)
    playwright_api.expect(error("bio")).to_have_text("Must be at most 20 characters.")
    page.get_by_label("Bio").fill("Counts engines")
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(error("topics")).to_have_text("This field is required.")
    assert round_status(stubs, round_id) == PENDING

    page.get_by_label("releases").check()
    page.get_by_label("security").check()
    page.get_by_label("Birthday").fill("1815-12-10")
    plan.select_option(label="Pro")
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(notice(page)).to_contain_text("Answer recorded")
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    assert json.loads(
        result.operations[0].result["content"][0]["text"].removeprefix("profile: ")
    ) == {
        "email": "ada@example.com",
        "handle": "ada_l",
        "birthday": "1815-12-10",
        "plan": "pro",
        "topics": ["releases", "security"],
        "bio": "Counts engines",
    }


def test_a_round_cancelled_elsewhere_says_so_and_keeps_the_typed_text(
    inbox_service: InboxService, stubs: Stubs, page: Any
) -> None:
    execution_id, round_id = open_new_round(page, inbox_service, stubs, "shipping", "book_shipment")
    playwright_api.expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    page.get_by_label("Street").fill("1 Main Street")
    page.get_by_label("City").fill("Pune")
    stubs.executions.Cancel(
        execution_service_pb2.CancelRequest(execution_id=execution_id), timeout=30
    )
    playwright_api.expect(notice(page)).to_contain_text(
        "This round was cancelled elsewhere (its execution was cancelled)"
    )
    playwright_api.expect(notice(page)).to_contain_text("what you typed stays below")
    # The text is still there to read and copy, but cannot be sent.
    street = page.get_by_label("Street")
    playwright_api.expect(street).to_be_visible()
    playwright_api.expect(street).to_have_value("1 Main Street")
    playwright_api.expect(street).not_to_be_editable()
    playwright_api.expect(page.get_by_role("button", name="Send answer")).to_be_hidden()
    playwright_api.expect(page.locator("#outcome")).to_have_text(
        "The execution finished: cancelled."
    )
    assert stored_key(page, round_id) is None


def test_a_round_answered_elsewhere_says_so(
    inbox_service: InboxService, stubs: Stubs, page: Any
) -> None:
    _, round_id = open_new_round(page, inbox_service, stubs, "shipping", "book_shipment")
    page.get_by_label("City").fill("Goa")
    stubs.respond(round_id, "elsewhere")
    playwright_api.expect(notice(page)).to_contain_text(
        "Someone else answered this round while you were answering it"
    )
    playwright_api.expect(page.get_by_label("City")).to_have_value("Goa")
    playwright_api.expect(page.locator("#outcome")).to_have_text(
        "The execution finished: succeeded."
    )


def test_an_answer_is_followed_to_the_next_round_and_the_end(
    inbox_service: InboxService, stubs: Stubs, page: Any
) -> None:
    execution_id, _ = open_new_round(
        page, inbox_service, stubs, "shipping", "book_confirmed_shipment"
    )
    playwright_api.expect(page.locator("#round-heading")).to_have_text(
        "Where should the shipment go?"
    )
    page.get_by_label("Street").fill("1 Main Street")
    page.get_by_label("City").fill("Pune")
    page.get_by_role("button", name="Send answer").click()
    # Resolved by the next question: the page says the execution asks for more.
    playwright_api.expect(page.locator("#round-summary")).to_contain_text("status: resolved")
    following = page.locator("#outcome a")
    playwright_api.expect(following).to_have_text("Ship to Pune?")
    following.click()
    playwright_api.expect(page.locator("#round-heading")).to_have_text("Ship to Pune?")
    page.get_by_label("Confirm").check()
    page.get_by_role("button", name="Send answer").click()
    playwright_api.expect(page.locator("#outcome")).to_have_text(
        "The execution finished: succeeded."
    )
    assert stubs.result(execution_id).operations[0].result["content"][0]["text"] == (
        "booked shipment to 1 Main Street, Pune"
    )


def _box(locator: Any) -> dict[str, float]:
    box = locator.bounding_box()
    assert box is not None
    return dict(box)


def _on_one_line(first: Any, second: Any) -> bool:
    """Whether two elements share a line: their vertical extents overlap."""
    a, b = _box(first), _box(second)
    return a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"] and a["x"] < b["x"]


def _fits(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"the page scrolls sideways: {width} px"
    heading = _box(page.locator("#round-heading"))
    assert heading["x"] + heading["width"] <= page.viewport_size["width"]


def test_the_page_fits_the_width_and_a_checkbox_sits_beside_its_label(
    inbox_service: InboxService, stubs: Stubs, sized_page: Any
) -> None:
    page = sized_page
    execution_id, round_id = open_new_round(page, inbox_service, stubs, "order_form", "place_order")
    playwright_api.expect(page.get_by_label("Express")).to_be_visible()
    page.locator("#round-details summary").click()  # the IDs shown too
    playwright_api.expect(page.locator("#round-facts")).to_contain_text(round_id)
    _fits(page)
    # A server's message (or a binding's name) may be one long word: it wraps too.
    page.evaluate(
        """() => {
            const word = "a_very_long_message_without_spaces".repeat(12);
            document.getElementById("round-heading").textContent = word;
            document.querySelector("#requests legend").textContent = word;
        }"""
    )
    _fits(page)
    express = page.locator('[data-field="express"]')
    assert _on_one_line(express.locator("input"), express.locator("label"))

    # Two requests: a heading of its own, a legend each.
    urls, _ = open_new_round(page, inbox_service, stubs, "url_required", "sign_contract")
    playwright_api.expect(page.locator("#round-heading")).to_have_text(
        "2 requests from url_required"
    )
    consent = page.locator("#requests .check").first
    playwright_api.expect(consent).to_be_visible()
    _fits(page)
    assert _on_one_line(consent.locator("input"), consent.locator("label"))
    for execution in (execution_id, urls):
        stubs.executions.Cancel(
            execution_service_pb2.CancelRequest(execution_id=execution), timeout=30
        )
