"""The remote verbs end to end: submit -> pending -> respond -> result, answers from
an argument, a file and stdin, watch, rounds, and the errors with their exit codes."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import ADDRESS, BOOKED, ROOT
from tests.cli.conftest import Cli, lines


def test_submit_pending_respond_result_as_json(cli: Cli, tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "prompt": "Ask for the delivery address, then book the shipment.",
                "server": "shipping",
                "tools": ["shipping:book_shipment"],
            }
        )
    )
    submitted = cli.ok("submit", str(spec), "--human-input", "managed", "--json").json()
    execution_id = submitted["execution_id"]

    pending = cli.wait_pending(execution_id)
    assert pending["execution_id"] == execution_id
    request = pending["requests"]["shipping_address"]
    assert request["mode"] == "form"
    assert request["requested_schema"]["required"] == ["street", "city"]
    round_id = pending["round_id"]

    answered = cli.ok("respond", round_id, "--accept", json.dumps(ADDRESS), "--json").json()
    assert answered["round_id"] == round_id
    assert answered["status"] == "response_validated"
    assert answered["replayed"] is False
    assert answered["idempotency_key"].startswith("cli-")

    result = cli.ok("result", execution_id, "--wait", "180", "--json").json()
    assert result["outcome"] == "succeeded"
    assert result["operations"][0]["result"]["content"][0]["text"] == BOOKED

    state = cli.ok("status", execution_id, "--json").json()
    assert (state["lifecycle"], state["outcome"]) == ("finished", "succeeded")

    # The round as operators see it: the answer's keys, never its values.
    record = cli.ok("rounds", "get", round_id, "--json").json()
    assert record["status"] == "resolved"
    assert record["responses"]["idempotency_key"] == answered["idempotency_key"]
    assert record["responses"]["responses"]["shipping_address"] == {
        "action": "accept",
        "content_keys": ["city", "street"],
    }
    assert ADDRESS["street"] not in json.dumps(record)
    listed = cli.ok("rounds", "list", "--execution", execution_id, "--json").json()
    assert [r["round_id"] for r in listed["rounds"]] == [round_id]
    assert listed["next_page_token"] == ""


def test_human_output_shows_the_requested_fields(cli: Cli) -> None:
    execution_id = cli.submit("order", "place_order")
    cli.wait_pending(execution_id)
    text = cli.ok("pending", execution_id).stdout
    assert f"execution  {execution_id}" in text
    assert "asked by   tool place_order on order" in text
    assert "request order (form): What should be ordered?" in text
    assert "item: string, required - What to order" in text
    assert "quantity: integer, optional, >= 1, default 1" in text
    assert "color: string, optional, default green; one of red, green, blue" in text
    listing = cli.ok("rounds", "list", "--execution", execution_id, "--status", "pending").stdout
    assert listing.splitlines()[0].split() == [
        "ROUND",
        "EXECUTION",
        "STATUS",
        "#",
        "CREATED",
        "REQUESTS",
    ]
    assert "pending" in listing and "order" in listing
    cancelled = cli.ok("cancel", execution_id).stdout
    assert f"cancel requested for {execution_id}" in cancelled
    outcome = cli("result", execution_id, "--wait", "180")
    assert outcome.code == 1, outcome  # documented: the execution did not succeed
    assert "outcome    cancelled" in outcome.stdout


def test_respond_from_stdin_and_from_a_file(cli: Cli, tmp_path: Path) -> None:
    # The spec as TOML on stdin.
    toml_spec = 'prompt = "Book it."\nserver = "shipping"\ntools = ["shipping:book_shipment"]\n'
    first = cli.ok("submit", "-", "--human-input", "managed", "--json", stdin=toml_spec)
    from_stdin = first.json()["execution_id"]
    from_file = cli.submit("shipping", "book_shipment")
    round_one = cli.wait_pending(from_stdin)["round_id"]
    cli.wait_pending(from_file)

    answer = cli.ok(
        "respond",
        round_one,
        "--accept",
        "-",
        "--idempotency-key",
        "stdin-1",
        "--json",
        stdin=json.dumps(ADDRESS),
    ).json()
    assert answer == {
        "round_id": round_one,
        "status": "response_validated",
        "replayed": False,
        "idempotency_key": "stdin-1",
    }
    # The same answer again is a replay; another answer under the key a conflict.
    again = cli.ok(
        "respond", round_one, "--accept", json.dumps(ADDRESS), "--idempotency-key", "stdin-1"
    )
    assert "(a replay of the same answer)" in again.stdout
    other = cli(
        "respond",
        round_one,
        "--accept",
        json.dumps({"street": "2 Other Road", "city": "Pune"}),
        "--idempotency-key",
        "stdin-1",
    )
    assert other.code == 4
    assert other.error.startswith("m3grpc: MANAGED_INPUT_CONFLICT: ")

    content = tmp_path / "address.json"
    content.write_text(json.dumps({"street": "9 File Lane", "city": "Goa"}))
    by_file = cli.ok("respond", "--execution", from_file, "--accept", f"@{content}")
    assert "response_validated" in by_file.stdout
    assert "idempotency key: cli-" in by_file.stderr  # generated, and told

    first_result = cli.ok("result", from_stdin, "--json").json()
    assert first_result["operations"][0]["result"]["content"][0]["text"] == BOOKED
    file_result = cli.ok("result", from_file).stdout
    assert "booked shipment to 9 File Lane, Goa" in file_result


def test_decline_and_the_responses_map(cli: Cli) -> None:
    declined = cli.submit("shipping", "book_shipment")
    mapped = cli.submit("shipping", "book_shipment")
    cli.wait_pending(declined)
    cli.wait_pending(mapped)
    cli.ok("respond", "--execution", declined, "--decline")
    responses = {"shipping_address": {"action": "accept", "content": ADDRESS}}
    cli.ok("respond", "--execution", mapped, "--responses", json.dumps(responses))
    assert "shipment not booked: declined" in cli.ok("result", declined).stdout
    assert BOOKED in cli.ok("result", mapped).stdout


@contextlib.contextmanager
def watching(cli: Cli, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`m3grpc watch ARGS` in the background; killed if it outlives the block."""
    watcher = subprocess.Popen(
        cli.command("watch", *args),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield watcher
    finally:
        if watcher.poll() is None:
            watcher.kill()


def next_event(watcher: subprocess.Popen[str]) -> Any:
    assert watcher.stdout is not None
    return json.loads(watcher.stdout.readline())


def answer_then_rest(cli: Cli, watcher: subprocess.Popen[str], round_id: str) -> list[Any]:
    """Answers the round, then the events the watch prints until it exits by itself."""
    cli.ok("respond", round_id, "--accept", json.dumps(ADDRESS))
    rest, errors = watcher.communicate(timeout=300)
    assert watcher.returncode == 0, errors
    return [json.loads(line) for line in lines(rest)]


def test_watch_streams_until_the_execution_finishes(cli: Cli) -> None:
    execution_id = cli.submit("shipping", "book_shipment")
    with watching(cli, "--execution", execution_id, "--until-terminal", "--json") as watcher:
        first = next_event(watcher)
        assert first["event"] == "round_pending"
        assert first["round"]["execution_id"] == execution_id
        events = answer_then_rest(cli, watcher, first["round"]["round_id"])
    kinds = [event["event"] for event in events]
    assert kinds[-1] == "execution_finished"
    assert events[-1]["state"]["outcome"] == "succeeded"
    assert {"event": "round_left_pending"}.items() <= events[0].items()
    assert events[0]["status"] != "pending"
    assert all(event["cursor"] for event in events)


def test_watch_kind_prints_only_the_kinds_asked_for(cli: Cli) -> None:
    execution_id = cli.submit("shipping", "book_shipment")
    # Only new rounds; the execution's stream still ends when it finishes.
    with watching(cli, "--execution", execution_id, "--kind", "round_pending", "--json") as watcher:
        first = next_event(watcher)
        assert first["event"] == "round_pending"
        assert answer_then_rest(cli, watcher, first["round"]["round_id"]) == []

    # From the round's cursor on: the answer and the finish, each kind when asked for.
    cursor = first["cursor"]
    finish = cli.ok(
        "watch", "--execution", execution_id, "--cursor", cursor, "--kind", "execution_finished"
    )
    assert lines(finish.stdout) == [f"execution finished  {execution_id}  outcome succeeded"]
    both = cli.ok(
        "watch",
        "--execution",
        execution_id,
        "--cursor",
        cursor,
        "--kind",
        "round_left_pending",
        "--kind",
        "execution_finished",
        "--json",
    )
    kinds = [json.loads(line)["event"] for line in lines(both.stdout)]
    assert kinds == ["round_left_pending", "execution_finished"]

    unknown = cli("watch", "--kind", "round_changed")
    assert unknown.code == 2 and "invalid choice: 'round_changed'" in unknown.stderr


def test_watch_until_terminal_stops_at_a_finish_it_does_not_print(cli: Cli) -> None:
    execution_id = cli.submit("shipping", "book_shipment")
    round_id = cli.wait_pending(execution_id)["round_id"]
    # Every execution's new rounds: the CLI also asks for finishes, to know when to stop.
    with watching(cli, "--kind", "round_pending", "--until-terminal", "--json") as watcher:
        # The opening snapshot holds the round: the watch is open before it is answered.
        seen = [next_event(watcher)]
        while seen[-1]["round"]["round_id"] != round_id:
            seen.append(next_event(watcher))
        events = seen + answer_then_rest(cli, watcher, round_id)
    assert {event["event"] for event in events} == {"round_pending"}


def test_errors_print_one_line_and_exit_with_the_documented_code(cli: Cli, tmp_path: Path) -> None:
    missing = cli("status", "exe_missing")
    assert missing.code == 3
    assert lines(missing.stderr) == [missing.stderr.strip()]
    assert missing.error.startswith("m3grpc: EXECUTION_NOT_FOUND: ")

    as_json = cli("rounds", "get", "rnd_missing", "--json")
    assert as_json.code == 3
    error = as_json.json()["error"]
    assert (error["reason"], error["code"], error["exit_code"]) == (
        "ROUND_NOT_FOUND",
        "NOT_FOUND",
        3,
    )

    binding = cli("submit", "--binding", "nowhere", "--prompt", "p")
    assert binding.code == 3
    assert binding.error.startswith("m3grpc: SERVER_BINDING_NOT_FOUND: ")

    spec = cli("submit", "--prompt", "p")  # no binding anywhere: refused before any call
    assert spec.code == 2
    assert spec.error.startswith("m3grpc: MODEL_VALIDATION_FAILED: invalid spec (spec.server:")

    unreadable = cli("submit", str(tmp_path / "absent.json"))
    assert unreadable.code == 2
    assert unreadable.error.startswith("m3grpc: INVALID_INPUT: cannot read spec file")

    usage = cli("respond", "rnd_x")  # no answer given: argparse's usage error
    assert usage.code == 2
    for verb in ("result", "pending"):  # NaN is no number of seconds: usage, not a traceback
        nan = cli(verb, "exe_x", "--wait", "nan")
        assert nan.code == 2 and "Traceback" not in nan.stderr, nan.stderr

    execution_id = cli.submit("shipping", "book_shipment")
    round_id = cli.wait_pending(execution_id)["round_id"]
    not_json = cli("respond", round_id, "--accept", "{street")
    assert not_json.code == 2
    assert not_json.error.startswith("m3grpc: INVALID_INPUT: content in the argument is not JSON")
    invalid = cli("respond", round_id, "--accept", json.dumps({"street": "1 Main Street"}))
    assert invalid.code == 2
    assert invalid.error.startswith("m3grpc: MANAGED_INPUT_INVALID: ")
    assert "responses['shipping_address'].content: 'city' is a required property" in invalid.error
    bare = cli("respond", round_id, "--accept")  # a form needs content
    assert bare.code == 2 and "--interactive" in bare.stderr

    waited = cli("result", execution_id, "--wait", "0.5")
    assert waited.code == 6
    assert waited.error.startswith("m3grpc: RESULT_WAIT_TIMEOUT: ")

    # Nothing was answered by the failures above: the round is still pending.
    assert cli.ok("rounds", "get", round_id, "--json").json()["status"] == "pending"
    cli.ok("cancel", execution_id)
    # Cancel is asynchronous (proto: the execution finishes CANCELLED later), and the
    # round fails as the execution finishes: answered before that, it was accepted.
    cancelled = cli("result", execution_id, "--wait", "60", "--json")
    assert cancelled.code == 1 and cancelled.json()["outcome"] == "cancelled", cancelled
    finished = cli("respond", round_id, "--accept", json.dumps(ADDRESS))
    assert finished.code == 4, finished
    assert cli("pending", execution_id, "--wait", "60", "--json").code == 1

    unreachable = Cli("127.0.0.1:1")("status", execution_id)
    assert unreachable.code == 5
    assert unreachable.error.startswith("m3grpc: UNAVAILABLE: ")


def test_a_url_request_is_accepted_without_content(cli: Cli) -> None:
    execution_id = cli.submit("payment", "authorize_payment")
    cli.wait_pending(execution_id)
    shown = cli.ok("pending", execution_id).stdout
    assert "request payment-authorization (url): Authorize the payment in your browser" in shown
    assert "url: https://pay.example.test/authorize" in shown
    with_content = cli("respond", "--execution", execution_id, "--accept", '{"ok": true}')
    assert with_content.code == 2
    assert "is a URL request: accept it without content" in with_content.error
    cli.ok("respond", "--execution", execution_id, "--accept")
    assert "payment authorized: 10.0" in cli.ok("result", execution_id, "--wait", "180").stdout


# Under a loaded machine `m3grpc watch` sometimes does not exit after SIGINT (seen only
# with other test workers running; not yet explained): run it alone.
@pytest.mark.serial
def test_watch_ends_on_ctrl_c_with_the_cursor_to_resume(cli: Cli) -> None:
    execution_id = cli.submit("shipping", "book_shipment")
    with watching(cli, "--execution", execution_id) as watcher:
        assert watcher.stdout is not None
        first = watcher.stdout.readline()
        assert first.startswith("round pending "), first
        assert f"execution {execution_id}" in first
        assert "shipping_address (form): Where should the shipment go?" in first
        watcher.send_signal(signal.SIGINT)
        _, errors = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, errors
    cursor = errors.split("stopped; resume with --cursor ", 1)[1].strip()
    # Resuming after that event: the next one is the answer, not the round again.
    cli.ok("respond", "--execution", execution_id, "--decline")
    resumed = cli.ok(
        "watch", "--execution", execution_id, "--cursor", cursor, "--until-terminal", "--json"
    )
    kinds = [json.loads(line)["event"] for line in lines(resumed.stdout)]
    assert kinds[0] == "round_left_pending" and kinds[-1] == "execution_finished"
    assert "round_pending" not in kinds


def test_submit_asks_for_managed_input_unless_told_otherwise(cli: Cli, tmp_path: Path) -> None:
    # The CLI submits for someone to answer: without --human-input a first submit
    # against a server that elicits pauses for input, where it failed at once with
    # elicitation_not_answered (the API's default, "fail", is unchanged).
    plain = ["submit", "--binding", "shipping", "--tool", "shipping:book_shipment"]
    execution_id = cli.ok(*plain, "--prompt", "Book it.").stdout.strip()
    assert cli.ok("status", execution_id, "--json").json()["human_input"] == "managed"
    assert "shipping_address" in cli.wait_pending(execution_id)["requests"]
    cli.ok("respond", "--execution", execution_id, "--accept", json.dumps(ADDRESS))
    assert cli.ok("result", execution_id, "--wait", "180", "--json").json()["outcome"] == (
        "succeeded"
    )
    # Asked for, fail is what it was.
    failing = cli.ok(*plain, "--prompt", "Book it.", "--human-input", "fail").stdout.strip()
    result = cli("result", failing, "--wait", "180", "--json")
    assert result.code == 1 and result.json()["failure_code"] == "elicitation_not_answered"
    # A spec with an elicitation_plan is answered by its plan (managed cannot have one).
    spec = tmp_path / "planned.json"
    plan = {"rules": [{"request_key": "shipping_address", "action": "accept", "content": ADDRESS}]}
    spec.write_text(json.dumps({"prompt": "Book it.", "elicitation_plan": plan}))
    planned = cli.ok("submit", str(spec), *plain[1:]).stdout.strip()
    assert cli.ok("status", planned, "--json").json()["human_input"] == "fail"
    assert cli.ok("result", planned, "--wait", "180", "--json").json()["outcome"] == "succeeded"
