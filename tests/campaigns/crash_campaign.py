"""Crash campaign (issue 13): SIGKILL `m3grpc serve` at random points of the
round cycle while many executions wait for input; after every restart, check
what users rely on.

    python3 -m tests.campaigns.crash_campaign --backend sqlite --executions 100 --kills 20
    python3 -m tests.campaigns.crash_campaign --backend postgres --executions 100 --kills 20

(PostgreSQL: a fresh database on the server M3_TEST_POSTGRES_URL names.) It
prints a JSON report and exits 1 when an invariant was violated.
tests/campaigns/test_crash_campaign.py runs a reduced campaign on every backend.

Setup: one real MCP server over Streamable HTTP (tests/mcp_servers/crash_target.py,
which outlives the killed services) behind two bindings: `crash_held`, a legacy
`elicitation/create` held open (its round fails closed when its service dies), and
`crash_resumable`, a 2026-07-28 round pinned to that protocol (released and taken
over, per "Resumable rounds" in docs/how-it-works/state-machine.md). SQLite: one
service, restarted after each kill. PostgreSQL: two replicas; a random one is killed,
the other recovers its work, then the killed one is started again.

Each of the `kills` steps keeps `executions` executions paused (PENDING rounds),
picks a kill point (each point once per three kills, in an order a seeded RNG
shuffles; the rounds answered, the delays and the victim replica also come from
a seeded RNG) and SIGKILLs the service there:

- `before_commit`: concurrent Respond calls, the kill after a random delay of
  0-50 ms (each call is acknowledged, or its outcome is unknown);
- `after_ack`: the kill right after Respond calls were acknowledged;
- `during_delivery`: the kill once the answer reached the MCP server (it
  creates a marker file, then holds the operation open) and before the round
  resolves.

Every acknowledged Respond is recorded (round, idempotency key, content hash).
Once recovery has run (every orphan is finished or, if resumable, released: the
live service's log says so), these invariants are checked:

1. every acknowledged Respond is in the store: its round is past PENDING with
   the same idempotency key, a replay of the same key and content is `replayed`
   (so the stored digest is the acknowledged content's), a RESOLVED round's
   execution SUCCEEDED with that content, a FAILED one failed
   `recovery_unavailable`;
2. every orphaned round (open when its service died) failed closed with
   `recovery_unavailable` (its execution too), or resolved before the death;
   a resumable one may instead stay PENDING (released) and fails only once its
   delivery had started;
3. no round pending twice: one round per execution, at most one PENDING, and
   no round's status ever moves back (a terminal round stays as it is);
4. no execution left non-terminal: each is FINISHED or WAITING_FOR_INPUT on
   exactly one PENDING round that no dead service owns (a held round of the
   live service, or a released resumable round); at the end every such round is
   answered and every execution must succeed (a live service owned it);
5. WatchPending loses no event: one watcher reads the stream throughout, from
   the service about to be killed; when the stream breaks it reconnects (to a
   live service) with its last cursor; after a
   barrier execution's finish it must have seen, in order and exactly once, the
   pending event of every round ListRounds returns, one left-pending event per
   round that left PENDING, and the finish of every finished execution.

A Respond whose outcome was unknown (the service died under it) is retried with
the same key and content after recovery: it must be a replay (it had
committed), a first acceptance (the round is still open), or refused as
FAILED_PRECONDITION (the round failed closed); never anything else.

Bounded loops only; loopback only; nothing asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)
from tests.api.conftest import Stubs, respond_request
from tests.support.mcp_processes import MCP_SERVERS, free_port, serve_http

HELD = "crash_held"  # legacy binding: a held-open elicitation/create
RESUMABLE = "crash_resumable"  # 2026-07-28 binding, pinned: resumable rounds
TOOLS = {HELD: "book_held", RESUMABLE: "book_resumable"}
POINTS = ("before_commit", "after_ack", "during_delivery")

PENDING = elicitation_pb2.MANAGED_INPUT_STATUS_PENDING
VALIDATED = elicitation_pb2.MANAGED_INPUT_STATUS_RESPONSE_VALIDATED
RESOLVED = elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED
FAILED = elicitation_pb2.MANAGED_INPUT_STATUS_FAILED
TERMINAL = {RESOLVED, FAILED}
# Forward order of the round statuses; FAILED ends any of them.
RANK: dict[int, int] = {
    PENDING: 0,
    VALIDATED: 1,
    elicitation_pb2.MANAGED_INPUT_STATUS_DELIVERY_STARTED: 2,
    elicitation_pb2.MANAGED_INPUT_STATUS_DELIVERED: 3,
    RESOLVED: 4,
    FAILED: 4,
}
FINISHED = execution_pb2.EXECUTION_STATUS_FINISHED
WAITING = execution_pb2.EXECUTION_STATUS_WAITING_FOR_INPUT
SUCCEEDED = execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
RECOVERY_UNAVAILABLE = "recovery_unavailable"

Key = tuple[str, ...]


def status_name(status: int) -> str:
    name: str = elicitation_pb2.ManagedInputStatus.Name(status)
    return name.removeprefix("MANAGED_INPUT_STATUS_")


class CampaignError(Exception):
    """The campaign cannot go on (a bounded wait ran out)."""


@dataclass(frozen=True)
class Settings:
    backend: str  # "sqlite" (one service) or "postgres" (two replicas)
    database: str  # a SQLite path or a PostgreSQL URL
    workdir: Path
    executions: int = 100
    kills: int = 20
    seed: int = 13
    lease_seconds: float = 3.0
    hold_seconds: float = 1.0  # how long the MCP server holds a delivered answer


@dataclass(frozen=True)
class Answer:
    round_id: str
    key: str
    content: dict[str, str]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.content, sort_keys=True).encode()).hexdigest()

    @property
    def booked(self) -> str:
        return f"booked shipment to {self.content['street']}, {self.content['city']}"


@dataclass
class Tracked:
    execution_id: str
    binding: str
    marker: Path
    round_id: str = ""
    finished: bool = False
    answered: bool = False  # a Respond was sent (acknowledged or not)

    @property
    def resumable(self) -> bool:
        return self.binding == RESUMABLE


@dataclass
class Report:
    backend: str
    executions: int
    kills: int
    seed: int
    points: Counter[str] = field(default_factory=Counter)
    submitted: int = 0
    acknowledged: int = 0
    unknown_retried: Counter[str] = field(default_factory=Counter)
    acknowledged_final: Counter[str] = field(default_factory=Counter)
    orphans: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    finished_before_pausing: int = 0
    watch_events: int = 0
    watch_reconnects: int = 0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "executions_paused_per_kill": self.executions,
            "kills": self.kills,
            "seed": self.seed,
            "kill_points": dict(self.points),
            "executions_submitted": self.submitted,
            "responds_acknowledged": self.acknowledged,
            "unknown_responds_retried": dict(self.unknown_retried),
            "acknowledged_rounds_final_status": dict(self.acknowledged_final),
            "orphaned_rounds": dict(self.orphans),
            "execution_outcomes": dict(self.outcomes),
            "finished_before_pausing": self.finished_before_pausing,
            "watch_events": self.watch_events,
            "watch_reconnects": self.watch_reconnects,
            "violations": self.violations,
        }


# -- the services ---------------------------------------------------------------------------


def write_config(path: Path, settings: Settings, url: str) -> Path:
    lines = [
        f"database = {json.dumps(settings.database)}",
        "shutdown_grace_seconds = 2.0",
        "watch_poll_interval_seconds = 0.1",
        "[workers]",
        "pool_size = 4",
        "poll_interval_seconds = 0.1",
        f"lease_seconds = {settings.lease_seconds}",
        # Resumable rounds stay with their worker while they wait (not parked), so a
        # kill leaves them to recovery, which the campaign checks.
        "park_after_seconds = 86400.0",
        f"[servers.{HELD}]",
        f"url = {json.dumps(url)}",
        'protocol = "legacy"',
        f"[servers.{RESUMABLE}]",
        f"url = {json.dumps(url)}",
        'protocol = "2026-07-28"',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


class Fleet:
    """The `m3grpc serve` processes: slot "a" (SQLite), or "a" and "b" (PostgreSQL
    replicas on one database). Each start of a slot logs to a file of its own."""

    def __init__(self, settings: Settings, url: str) -> None:
        self.workdir = settings.workdir
        self.slots = ["a"] if settings.backend == "sqlite" else ["a", "b"]
        self.config = write_config(settings.workdir / "m3.toml", settings, url)
        self.processes: dict[str, ServeProcess] = {}
        self.clients: dict[str, Stubs] = {}
        self.logs: dict[str, Path] = {}
        self.starts: Counter[str] = Counter()

    def start(self, slot: str) -> None:
        self.starts[slot] += 1
        log = self.workdir / f"{slot}-{self.starts[slot]}.log"
        process = ServeProcess(self.config, log=log, args=("--log-level", "info"))
        process.start(timeout=120)
        self.processes[slot], self.logs[slot] = process, log
        self.clients[slot] = Stubs(grpc.insecure_channel(process.address))

    def kill(self, slot: str) -> Stubs:
        """SIGKILL the slot's service; returns its client (for calls still in flight)."""
        self.processes.pop(slot).kill()
        self.logs.pop(slot)
        return self.clients.pop(slot)

    @property
    def live(self) -> list[str]:
        return sorted(self.processes)

    def client(self, slot: str | None = None) -> Stubs:
        return self.clients[slot or self.live[0]]

    def log_text(self, slot: str) -> str:
        try:
            return self.logs[slot].read_text()
        except OSError:
            return ""

    def all_logs(self) -> str:
        """Every start's log of every slot, the dead ones' included."""
        return "\n".join(
            path.read_text(errors="replace") for path in sorted(self.workdir.glob("*-*.log"))
        )

    def stop(self) -> None:
        for client in self.clients.values():
            client.close()
        for process in self.processes.values():
            process.stop(grace=30)


# -- the watcher ----------------------------------------------------------------------------


def event_key(event: execution_service_pb2.WatchPendingResponse) -> Key:
    kind = event.WhichOneof("event")
    if kind == "round_pending":
        return ("pending", event.round_pending.round_id)
    if kind == "round_left_pending":
        left = event.round_left_pending
        return ("left", left.round_id, status_name(left.status))
    done = event.execution_finished
    return ("finished", done.execution_id, execution_pb2.ExecutionOutcome.Name(done.outcome))


class CursorWatch:
    """One WatchPending reader for the whole campaign: it keeps every event and the
    last cursor, and reconnects with that cursor when its stream broke."""

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.cursor = ""
        self.slot = ""
        self.connects = 0
        self._call: Any = None
        self._lock = threading.Lock()

    def ensure(self, fleet: Fleet) -> None:
        """Connected to a live service: reconnect if its stream broke or its service died."""
        with self._lock:
            alive = self._call is not None and self.slot in fleet.live
        if not alive:
            self.connect(fleet)

    def follow(self, slot: str, fleet: Fleet) -> None:
        """Read from `slot`'s service (the next victim: the kill cuts the stream)."""
        if self.slot != slot:
            self.connect(fleet, slot)

    def connect(self, fleet: Fleet, slot: str = "") -> None:
        with self._lock:
            old, self._call = self._call, None
            cursor = self.cursor
        if old is not None:
            old.cancel()
        self.slot = slot or fleet.live[0]
        request = execution_service_pb2.WatchPendingRequest(cursor=cursor)
        call = fleet.client(self.slot).executions.WatchPending(request)
        with self._lock:
            self._call = call
            self.connects += 1
        threading.Thread(target=self._read, args=(call,), daemon=True).start()

    def _read(self, call: Any) -> None:
        with contextlib.suppress(grpc.RpcError):
            for event in call:
                with self._lock:
                    if call is not self._call:
                        return
                    self.keys.append(event_key(event))
                    self.cursor = event.cursor
        with self._lock:
            if call is self._call:
                self._call = None  # broken: the next ensure() reconnects

    def wait_for(self, wanted: Key, fleet: Fleet, attempts: int = 1200) -> list[Key]:
        for _ in range(attempts):
            self.ensure(fleet)
            with self._lock:
                if wanted in self.keys:
                    return list(self.keys)
            time.sleep(0.1)
        raise CampaignError(f"WatchPending never showed {wanted}")

    def close(self) -> None:
        with self._lock:
            call, self._call = self._call, None
        if call is not None:
            call.cancel()


# -- the campaign ---------------------------------------------------------------------------


_OWNERSHIP = re.compile(
    r"^(\S+ \S+) .*event=execution\.(claimed|released) execution_id=(\S+)", re.MULTILINE
)


def released_now(logs: str) -> set[str]:
    """The executions whose latest claim-or-release in `logs` (the services' log lines,
    each starting with its time) is a release: held by no worker."""
    latest: dict[str, tuple[str, str]] = {}
    for at, event, execution_id in _OWNERSHIP.findall(logs):
        if execution_id not in latest or at >= latest[execution_id][0]:
            latest[execution_id] = (at, event)
    return {execution_id for execution_id, (_, event) in latest.items() if event == "released"}


def all_rounds(stubs: Stubs) -> dict[str, elicitation_pb2.ElicitationRound]:
    rounds: dict[str, elicitation_pb2.ElicitationRound] = {}
    token = ""
    for _ in range(10_000):
        page = stubs.elicitation.ListRounds(
            elicitation_service_pb2.ListRoundsRequest(page_size=1000, page_token=token),
            timeout=60,
        )
        rounds.update((r.round_id, r) for r in page.rounds)
        token = page.next_page_token
        if not token:
            return rounds
    raise CampaignError("ListRounds did not end")


def snapshot(stubs: Stubs, execution_id: str) -> execution_pb2.ExecutionState:
    request = execution_service_pb2.SnapshotRequest(execution_id=execution_id)
    state: execution_pb2.ExecutionState = stubs.executions.Snapshot(request, timeout=60).state
    return state


def reason(error: grpc.RpcError) -> str:
    status = rpc_status.from_call(error)
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return str(info.reason)
    return ""


class Campaign:
    def __init__(self, settings: Settings, fleet: Fleet) -> None:
        self.settings = settings
        self.fleet = fleet
        self.rng = random.Random(settings.seed)
        self.report = Report(settings.backend, settings.executions, settings.kills, settings.seed)
        self.tracked: dict[str, Tracked] = {}
        self.acks: dict[str, Answer] = {}  # round ID -> the acknowledged answer
        self.unknown: list[Answer] = []  # Respond calls cut short by a kill
        self.seen: dict[str, int] = {}  # round ID -> the status last checked
        self.verified: set[str] = set()  # rounds whose RESOLVED result was checked
        self.barriers: set[str] = set()  # the WatchPending barrier executions
        self.watch = CursorWatch()
        self.answers = 0
        self.started = time.monotonic()

    def violation(self, text: str) -> None:
        if text not in self.report.violations:  # a lasting one is seen at every check
            self.report.violations.append(text)
            self.progress(f"VIOLATION {text}")

    def progress(self, text: str) -> None:
        """A line on stderr, for following a long run (no figure depends on it)."""
        elapsed = time.monotonic() - self.started
        print(
            f"[crash {self.settings.backend} {elapsed:7.1f}s] {text}", file=sys.stderr, flush=True
        )

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> Report:
        self.watch.connect(self.fleet)
        try:
            for number, point in enumerate(self.schedule(), 1):
                self.replenish()
                victim = self.rng.choice(self.fleet.live)
                orphans = self.owned_by(victim)
                self.report.points[point] += 1
                self.progress(f"kill {number}: {point}, service {victim}, {len(orphans)} orphans")
                self.watch.follow(victim, self.fleet)
                self.strike(point, victim)
                if self.settings.backend == "sqlite":
                    self.fleet.start(victim)  # PostgreSQL: the other replica takes over
                self.settle(orphans)
                self.progress(f"kill {number}: recovered")
                self.check(orphans)
                self.retry_unknown()
                if victim not in self.fleet.live:
                    self.fleet.start(victim)
                self.progress(f"kill {number}: checked ({len(self.report.violations)} violations)")
            self.finish()
            self.progress("finished")
        finally:
            self.watch.close()
            self.report.watch_events = len(self.watch.keys)
            self.report.watch_reconnects = self.watch.connects - 1
        return self.report

    def schedule(self) -> list[str]:
        """The kill points: shuffled blocks of all three, so each is hit as often
        (give or take one); an RNG of its own keeps them the same for a seed."""
        rng = random.Random(self.settings.seed)
        points: list[str] = []
        while len(points) < self.settings.kills:
            points += rng.sample(POINTS, len(POINTS))
        return points[: self.settings.kills]

    def open_executions(self) -> list[Tracked]:
        return [t for t in self.tracked.values() if not t.finished]

    def replenish(self) -> None:
        """Submit executions until `executions` of them are paused on a PENDING round.
        One that finishes before it pauses (its lease lapsed on a starved machine and
        another replica recovered it: documented, not a crash) is counted, and replaced."""
        client = self.fleet.client()
        for _ in range(100):
            for _ in range(self.settings.executions - len(self.open_executions())):
                self.submit(client)
            waiting = [t for t in self.open_executions() if not t.round_id]
            for attempt in range(1200):
                if not waiting:
                    return
                request = elicitation_service_pb2.ListRoundsRequest(
                    page_size=1000, statuses=[PENDING]
                )
                pending = {r.execution_id: r.round_id for r in all_rounds_filtered(client, request)}
                for t in waiting:
                    t.round_id = pending.get(t.execution_id, "")
                    if not t.round_id and attempt % 20 == 19:
                        t.finished = snapshot(client, t.execution_id).lifecycle == FINISHED
                        self.report.finished_before_pausing += t.finished
                lost = any(t.finished for t in waiting)
                waiting = [t for t in waiting if not (t.round_id or t.finished)]
                if lost:
                    break  # submit replacements
                time.sleep(0.1)
            else:
                raise CampaignError(f"{len(waiting)} executions never paused: {waiting[:3]}")
        raise CampaignError("executions kept finishing before they paused")

    def submit(self, client: Stubs) -> None:
        binding = self.rng.choice([HELD, RESUMABLE])
        marker = self.settings.workdir / "markers" / f"{len(self.tracked)}"
        step = execution_pb2.OperationStep(
            kind=execution_pb2.OPERATION_KIND_TOOL, name=TOOLS[binding]
        )
        step.arguments.update({"marker": str(marker), "hold": self.settings.hold_seconds})
        spec = execution_pb2.AgentSpec(
            harness="scripted",
            server=binding,
            tools=[f"{binding}:{TOOLS[binding]}"],
            prompt="Book a shipment.",
            script=[step],
        )
        request = execution_service_pb2.SubmitRequest(
            agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
        )
        execution_id = client.executions.Submit(request, timeout=60).execution_id
        self.tracked[execution_id] = Tracked(execution_id, binding, marker)
        self.report.submitted += 1

    def owned_by(self, slot: str) -> set[str]:
        """The open executions the slot's service runs: all of them with one service;
        with replicas, those its log shows it claimed."""
        open_ids = {t.execution_id for t in self.open_executions()}
        if len(self.fleet.live) == 1:
            return open_ids
        claimed = set(
            re.findall(r"event=execution\.claimed execution_id=(\S+)", self.fleet.log_text(slot))
        )
        return open_ids & claimed

    def next_answer(self, t: Tracked) -> Answer:
        self.answers += 1
        t.answered = True
        content = {"street": f"{self.answers} Crash Street", "city": "Pune"}
        return Answer(t.round_id, f"crash-{self.answers}", content)

    def acknowledge(
        self, answer: Answer, response: elicitation_service_pb2.RespondResponse
    ) -> None:
        if response.status == PENDING:
            self.violation(f"Respond on {answer.round_id} acknowledged with status PENDING")
        self.acks[answer.round_id] = answer
        self.report.acknowledged += 1

    def respond(self, stubs: Stubs, answer: Answer) -> elicitation_service_pb2.RespondResponse:
        request = respond_request(answer.round_id, answer.key, answer.content)
        response: elicitation_service_pb2.RespondResponse = stubs.elicitation.Respond(
            request, timeout=60
        )
        return response

    def strike(self, point: str, victim: str) -> None:
        """Answer some paused rounds and SIGKILL the victim at `point` of their cycle."""
        unanswered = [t for t in self.open_executions() if t.round_id and not t.answered]
        owned = self.owned_by(victim)
        candidates = [t for t in unanswered if t.execution_id in owned] or unanswered
        most = {"before_commit": 5, "after_ack": 3, "during_delivery": 3}[point]
        chosen = self.rng.sample(candidates, min(len(candidates), self.rng.randint(1, most)))
        answers = [self.next_answer(t) for t in chosen]
        client = self.fleet.client(victim)
        if point == "before_commit":
            outcomes: dict[str, Any] = {}

            def call(answer: Answer) -> None:
                try:
                    outcomes[answer.round_id] = self.respond(client, answer)
                except grpc.RpcError as error:
                    outcomes[answer.round_id] = error

            threads = [threading.Thread(target=call, args=(a,), daemon=True) for a in answers]
            for thread in threads:
                thread.start()
            time.sleep(self.rng.uniform(0.0, 0.05))
            self.fleet.kill(victim)
            for thread in threads:
                thread.join(timeout=120)
            for answer in answers:
                outcome = outcomes.get(answer.round_id)
                if isinstance(outcome, elicitation_service_pb2.RespondResponse):
                    self.acknowledge(answer, outcome)
                else:
                    self.unknown.append(answer)
        else:
            for answer in answers:
                self.acknowledge(answer, self.respond(client, answer))
            if point == "during_delivery":
                self.wait_for_delivery(chosen)
            self.fleet.kill(victim)
        client.close()

    def wait_for_delivery(self, chosen: list[Tracked]) -> None:
        """Until one chosen answer reached the MCP server, then a random part of its hold."""
        for _ in range(6000):
            if any(t.marker.exists() for t in chosen):
                time.sleep(self.rng.uniform(0.0, self.settings.hold_seconds / 2))
                return
            time.sleep(0.01)
        self.violation(f"no delivery started for {[t.round_id for t in chosen]}")

    # -- after a restart ---------------------------------------------------------------

    def settle(self, orphans: set[str], attempts: int = 2400) -> None:
        """Wait until recovery has run: every execution is finished or paused on one
        PENDING round, and every open orphan is resumable and released (the last word of
        the services' logs on it says so: released by recovery now, or at an earlier
        kill and claimed by no worker since, as a parked round waits for its answer)."""
        client = self.fleet.client()
        unsettled: list[str] = []
        for _ in range(attempts):
            rounds = all_rounds(client)
            released = released_now(self.fleet.all_logs())
            unsettled = []
            for t in self.open_executions():
                statuses = [r.status for r in rounds.values() if r.execution_id == t.execution_id]
                if all(s in TERMINAL for s in statuses):
                    if snapshot(client, t.execution_id).lifecycle == FINISHED:
                        t.finished = True
                    else:
                        unsettled.append(t.execution_id)
                elif statuses != [PENDING] or (
                    t.execution_id in orphans and not (t.resumable and t.execution_id in released)
                ):
                    unsettled.append(t.execution_id)
            if not unsettled:
                return
            time.sleep(0.25)
        raise CampaignError(f"not settled after recovery: {unsettled[:5]}")

    def retry_unknown(self) -> None:
        client = self.fleet.client()
        for answer in self.unknown:
            try:
                response = self.respond(client, answer)
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    self.violation(
                        f"retried Respond on {answer.round_id}: {error.code()} {reason(error)}"
                    )
                self.report.unknown_retried[f"refused {reason(error)}"] += 1
                continue
            self.report.unknown_retried["replayed" if response.replayed else "accepted"] += 1
            self.acknowledge(answer, response)
        self.unknown = []

    def check(self, orphans: set[str]) -> None:
        """Invariants 1-5 (see the module docstring) on a settled store."""
        client = self.fleet.client()
        barrier = self.submit_barrier(client)
        keys = self.watch.wait_for(("finished", barrier, "EXECUTION_OUTCOME_SUCCEEDED"), self.fleet)
        rounds = all_rounds(client)
        states = {eid: snapshot(client, eid) for eid in self.tracked}
        by_execution: dict[str, list[elicitation_pb2.ElicitationRound]] = {}
        for r in rounds.values():
            by_execution.setdefault(r.execution_id, []).append(r)
        self.check_rounds(rounds, by_execution)
        self.check_executions(states, by_execution, orphans)
        self.check_acks(client, rounds, states)
        self.check_orphans(orphans, by_execution, states)
        self.check_watch(keys, rounds, states)

    def submit_barrier(self, client: Stubs) -> str:
        step = execution_pb2.OperationStep(kind=execution_pb2.OPERATION_KIND_TOOL, name="quote")
        spec = execution_pb2.AgentSpec(
            harness="scripted", server=HELD, tools=[f"{HELD}:quote"], prompt="Quote.", script=[step]
        )
        request = execution_service_pb2.SubmitRequest(
            agent=spec, human_input=execution_pb2.HUMAN_INPUT_FAIL
        )
        execution_id = str(client.executions.Submit(request, timeout=60).execution_id)
        self.barriers.add(execution_id)
        return execution_id

    def check_rounds(
        self,
        rounds: dict[str, elicitation_pb2.ElicitationRound],
        by_execution: dict[str, list[elicitation_pb2.ElicitationRound]],
    ) -> None:
        """3: one round per execution, none pending twice, no status moving back."""
        for execution_id, its in by_execution.items():
            if len(its) != 1:
                self.violation(f"execution {execution_id} has {len(its)} rounds")
        for r in rounds.values():
            before = self.seen.get(r.round_id)
            if before is not None and (
                RANK[r.status] < RANK[before] or (before in TERMINAL and r.status != before)
            ):
                self.violation(
                    f"round {r.round_id} went from {status_name(before)} to {status_name(r.status)}"
                )
            self.seen[r.round_id] = r.status
            if r.status == FAILED and r.failure_code != RECOVERY_UNAVAILABLE:
                self.violation(f"round {r.round_id} failed {r.failure_code!r}")

    def check_executions(
        self,
        states: dict[str, execution_pb2.ExecutionState],
        by_execution: dict[str, list[elicitation_pb2.ElicitationRound]],
        orphans: set[str],
    ) -> None:
        """4: finished, or paused on exactly one PENDING round no dead service owns."""
        for execution_id, state in states.items():
            if state.lifecycle == FINISHED:
                self.tracked[execution_id].finished = True
                if state.outcome != SUCCEEDED and state.failure_code != RECOVERY_UNAVAILABLE:
                    self.violation(f"execution {execution_id} failed {state.failure_code!r}")
                continue
            statuses = [r.status for r in by_execution.get(execution_id, [])]
            if state.lifecycle != WAITING or statuses != [PENDING]:
                lifecycle = execution_pb2.ExecutionStatus.Name(state.lifecycle)
                self.violation(
                    f"execution {execution_id} left {lifecycle}"
                    f" with rounds {[status_name(s) for s in statuses]}"
                )
            elif execution_id in orphans and not self.tracked[execution_id].resumable:
                self.violation(f"held execution {execution_id} of a dead service still paused")

    def check_acks(
        self,
        client: Stubs,
        rounds: dict[str, elicitation_pb2.ElicitationRound],
        states: dict[str, execution_pb2.ExecutionState],
    ) -> None:
        """1: every acknowledged Respond is stored, with its content and a final status."""
        for round_id, answer in self.acks.items():
            r = rounds.get(round_id)
            if r is None:
                self.violation(f"acknowledged round {round_id} is gone")
                continue
            if r.status == PENDING or r.responses.idempotency_key != answer.key:
                self.violation(
                    f"acknowledged round {round_id} is {status_name(r.status)} with key "
                    f"{r.responses.idempotency_key!r}, not {answer.key!r}"
                )
                continue
            try:
                replay = self.respond(client, answer)
            except grpc.RpcError as error:
                self.violation(f"replay of {answer.key} refused: {error.code()} {reason(error)}")
                continue
            if not replay.replayed or replay.status != r.status:
                self.violation(f"replay of {answer.key}: {replay}")
            state = states[r.execution_id]
            if r.status == RESOLVED and round_id not in self.verified:
                result = client.executions.Result(
                    execution_service_pb2.ResultRequest(execution_id=r.execution_id), timeout=60
                ).result
                booked = [op.result["structuredContent"]["result"] for op in result.operations]
                if result.outcome != SUCCEEDED or booked != [answer.booked]:
                    self.violation(f"resolved round {round_id}: {answer.booked!r}, result {result}")
                self.verified.add(round_id)
            if r.status == FAILED and (
                state.lifecycle != FINISHED or state.failure_code != RECOVERY_UNAVAILABLE
            ):
                self.violation(f"failed round {round_id} of an execution in {state}")

    def check_orphans(
        self,
        orphans: set[str],
        by_execution: dict[str, list[elicitation_pb2.ElicitationRound]],
        states: dict[str, execution_pb2.ExecutionState],
    ) -> None:
        """2: the dead service's open rounds failed closed, or (resumable) were released."""
        for execution_id in orphans:
            t = self.tracked[execution_id]
            its = by_execution.get(execution_id, [])
            if not its:
                self.violation(f"orphan {execution_id} has no round")
                continue
            r = its[0]
            state = states[execution_id]
            kind = "resumable" if t.resumable else "held"
            if r.status == FAILED:
                self.report.orphans[f"{kind} failed closed"] += 1
                if t.resumable and r.delivery_attempts == 0:
                    self.violation(f"resumable round {r.round_id} failed before any delivery")
                if state.outcome == SUCCEEDED or state.failure_code != RECOVERY_UNAVAILABLE:
                    self.violation(f"orphan {execution_id} of a failed round ended {state}")
            elif r.status == RESOLVED:
                self.report.orphans[f"{kind} resolved before the kill"] += 1
            elif r.status == PENDING and t.resumable:
                self.report.orphans["resumable released"] += 1
            else:
                self.violation(f"orphaned {kind} round {r.round_id} is {status_name(r.status)}")

    def check_watch(
        self,
        keys: list[Key],
        rounds: dict[str, elicitation_pb2.ElicitationRound],
        states: dict[str, execution_pb2.ExecutionState],
    ) -> None:
        """5: every round event once, in order, nothing the store does not know."""
        for event, count in Counter(keys).items():
            if count > 1:
                self.violation(f"WatchPending sent {event} {count} times")
        position = {event: index for index, event in enumerate(keys)}
        lefts = {k[1]: k for k in keys if k[0] == "left"}
        for r in rounds.values():
            pending = ("pending", r.round_id)
            if pending not in position:
                self.violation(f"WatchPending lost the pending event of {r.round_id}")
                continue
            left = lefts.get(r.round_id)
            if r.status == PENDING:
                if left is not None:
                    self.violation(f"WatchPending: {left} for a round still PENDING")
                continue
            if left is None:
                self.violation(f"WatchPending lost the left-pending event of {r.round_id}")
            elif position[left] < position[pending] or (left[2] == "FAILED" and r.status != FAILED):
                self.violation(f"WatchPending: {left} out of order or wrong for {r.round_id}")
        finished = {k[1]: k for k in keys if k[0] == "finished"}
        for execution_id, state in states.items():
            done = finished.get(execution_id)
            if state.lifecycle != FINISHED:
                if done is not None:
                    self.violation(f"WatchPending: {done} of an unfinished execution")
                continue
            wanted = ("finished", execution_id, execution_pb2.ExecutionOutcome.Name(state.outcome))
            if done is None or done != wanted:
                self.violation(f"WatchPending: {done} instead of {wanted}")
                continue
            its_rounds = [
                k
                for k in keys
                if k[0] != "finished"
                and k[1] in rounds
                and rounds[k[1]].execution_id == execution_id
            ]
            if any(position[k] > position[done] for k in its_rounds):
                self.violation(f"WatchPending: a round event of {execution_id} after its finish")
        known = set(rounds) | set(self.tracked) | self.barriers
        for k in keys:
            if k[1] not in known:
                self.violation(f"WatchPending: {k} names nothing in the store")

    # -- the end -----------------------------------------------------------------------

    def finish(self) -> None:
        """Answer every round still paused: each execution must succeed (a live
        service owned it); then the invariants once more."""
        client = self.fleet.client()
        for t in self.open_executions():
            if t.round_id and not t.answered:
                answer = self.next_answer(t)
                self.acknowledge(answer, self.respond(client, answer))
        for t in self.open_executions():
            for _ in range(600):
                state = snapshot(client, t.execution_id)
                if state.lifecycle == FINISHED:
                    break
                time.sleep(0.2)
            else:
                self.violation(f"answered execution {t.execution_id} never finished")
                continue
            if state.outcome != SUCCEEDED:
                self.violation(f"answered execution {t.execution_id} ended {state}")
        self.check(set())
        for t in self.tracked.values():
            self.report.outcomes[
                execution_pb2.ExecutionOutcome.Name(snapshot(client, t.execution_id).outcome)
            ] += 1
        for round_id in self.acks:
            self.report.acknowledged_final[status_name(self.seen.get(round_id, PENDING))] += 1


def all_rounds_filtered(
    stubs: Stubs, request: elicitation_service_pb2.ListRoundsRequest
) -> list[elicitation_pb2.ElicitationRound]:
    found: list[elicitation_pb2.ElicitationRound] = []
    for _ in range(10_000):
        page = stubs.elicitation.ListRounds(request, timeout=60)
        found += page.rounds
        if not page.next_page_token:
            return found
        request.page_token = page.next_page_token
    raise CampaignError("ListRounds did not end")


def run(settings: Settings) -> Report:
    """The campaign against real services and a real MCP server on loopback."""
    (settings.workdir / "markers").mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [sys.executable, str(MCP_SERVERS / "crash_target.py"), "--http", "--port", str(port)]
    with serve_http(command, port) as url:
        fleet = Fleet(settings, url)
        try:
            for slot in fleet.slots:
                fleet.start(slot)
            return Campaign(settings, fleet).run()
        finally:
            fleet.stop()


@contextlib.contextmanager
def database_for(backend: str, workdir: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield str(workdir / "m3.sqlite")
        return
    from tests.storage.conftest import POSTGRES_URL, postgres_database

    if POSTGRES_URL is None:
        raise SystemExit("crash_campaign: --backend postgres needs M3_TEST_POSTGRES_URL")
    yield from postgres_database("m3_crash")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--executions", type=int, default=100)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--lease-seconds", type=float, default=3.0)
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temporary one)")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        workdir.mkdir(parents=True, exist_ok=True)
        database = stack.enter_context(database_for(args.backend, workdir))
        settings = Settings(
            args.backend,
            database,
            workdir,
            executions=args.executions,
            kills=args.kills,
            seed=args.seed,
            lease_seconds=args.lease_seconds,
        )
        report = run(settings)
    print(json.dumps(report.summary(), indent=2))
    return 1 if report.violations else 0


if __name__ == "__main__":
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    # SIGTERM unwinds like Ctrl-C, so the services and the MCP server are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
