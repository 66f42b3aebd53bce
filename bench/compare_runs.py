"""Issue 11's targets over several runs of bench/compare.py: each figure per run, its median
and range, and in how many runs it met its target.

    python bench/compare_runs.py RUN.json [RUN.json ...] [--json OUT]

One run's phase from submit swings by a third on a shared 2-core machine, so a claim about a
target rests on several runs of the same code, each figure a ratio to a peer (or a limit)
measured in that same run. For example, six runs of the figures
docs/how-it-works/performance.md reports:

    for i in 1 2 3 4 5 6; do
      python bench/compare.py --systems m3-grpc-mrtr,m3-grpc-legacy,langgraph,dbos \\
        --in-flight 16,128 --rounds 400 --json /tmp/compare-$i.json
    done
    python bench/compare_runs.py /tmp/compare-*.json

A figure is reported where its systems are in the runs (the peers are missing from
`--smoke` runs, which do not install them). Nothing here runs a benchmark or asserts
anything about speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_common import ratio

M3_SYSTEMS = ("m3-embedded-legacy", "m3-embedded-mrtr", "m3-grpc-legacy", "m3-grpc-mrtr")
MRTR_SYSTEMS = ("m3-embedded-mrtr", "m3-grpc-mrtr")
# CPU per round in M3's own processes (issue 11: the service or the kit, not the MCP
# server, not the caller), ms.
CPU_LIMIT_MS = 10.0
RESUME_LIMIT_X = 2.0  # answer -> resumed median, at most this many times LangGraph's
STORE_CYCLE_LIMIT_X = 10.0  # the store's round cycle, at most this many bare commits

# (system, phase, in flight) -> that measurement's result entry in one run.
Run = dict[tuple[str, str, int], dict[str, Any]]


@dataclass(frozen=True)
class Figure:
    """One target figure: its values run by run (None where a run lacks it)."""

    target: str
    name: str
    values: list[float | None]
    met: Callable[[float], bool] | None  # None: a figure for reading the others, no target

    def row(self) -> dict[str, Any]:
        present = [v for v in self.values if v is not None]
        return {
            "target": self.target,
            "figure": self.name,
            "per_run": [None if v is None else round(v, 3) for v in self.values],
            "median": round(statistics.median(present), 3) if present else None,
            "min": round(min(present), 3) if present else None,
            "max": round(max(present), 3) if present else None,
            "runs": len(present),
            "runs_met": None if self.met is None else sum(1 for v in present if self.met(v)),
        }


def load(path: Path) -> tuple[Run, dict[str, Any]]:
    document = json.loads(path.read_text())
    run: Run = {}
    for entry in document["results"]:
        if entry.get("failure_count"):
            continue  # a measurement with failed rounds says nothing of speed
        run[(entry["system"], entry["phase"], entry["in_flight"])] = entry
    return run, document.get("raw_limits") or {}


def _own_cpu(entry: dict[str, Any]) -> float | None:
    """M3's own CPU per round: the service (with its worker processes) over gRPC, the
    kit's process embedded (which is also the caller's: the embedded API has no other)."""
    if entry["system"].startswith("m3-grpc"):
        value = entry.get("cpu_service_ms_per_round")
    else:
        value = entry.get("cpu_ms_per_round")
    return None if value is None else float(value)


def figures(runs: Sequence[Run], limits: Sequence[dict[str, Any]]) -> list[Figure]:
    """Every target figure the runs hold."""
    keys = {key for run in runs for key in run}
    levels = sorted({level for _, phase, level in keys if phase == "submit"})
    systems = {system for system, _, _ in keys}
    found: list[Figure] = []

    def entries(system: str, level: int) -> list[dict[str, Any] | None]:
        """The system's from-submit measurement at `level`, run by run."""
        return [run.get((system, "submit", level)) for run in runs]

    def field(system: str, level: int, name: str) -> list[float | None]:
        return [None if e is None else e.get(name) for e in entries(system, level)]

    def add(
        target: str, name: str, values: list[float | None], met: Callable[[float], bool] | None
    ) -> None:
        if any(v is not None for v in values):
            found.append(Figure(target, name, values, met))

    for peer, own_systems in (("dbos", M3_SYSTEMS), ("langgraph", MRTR_SYSTEMS)):
        if peer not in systems:
            continue
        for system in own_systems:
            for level in levels:
                if level == 1:
                    continue  # the targets are at 16 and 128 in flight
                ours = field(system, level, "rounds_per_second")
                theirs = field(peer, level, "rounds_per_second")
                add(
                    f"rounds/s from submit >= {peer}",
                    f"{system} / {peer}, {level} in flight",
                    [ratio(a, b) for a, b in zip(ours, theirs, strict=True)],
                    lambda x: x >= 1.0,
                )
    for system in M3_SYSTEMS:
        for level in levels:
            add(
                f"CPU per round in M3's processes <= {CPU_LIMIT_MS:g} ms",
                f"{system}, {level} in flight (ms)",
                [None if e is None else _own_cpu(e) for e in entries(system, level)],
                lambda x: x <= CPU_LIMIT_MS,
            )
    for system in M3_SYSTEMS:
        for level in levels:
            add(
                "CPU per round in M3's processes / the MCP server's (the yardstick across "
                "the machine's phases: the MCP server's code is the same in every run)",
                f"{system}, {level} in flight",
                [
                    None if e is None else ratio(_own_cpu(e), e.get("cpu_mcp_ms_per_round"))
                    for e in entries(system, level)
                ],
                None,
            )
    if "langgraph" in systems and 1 in levels:
        for system in M3_SYSTEMS:
            ours = field(system, 1, "resume_p50_ms")
            theirs = field("langgraph", 1, "resume_p50_ms")
            add(
                f"answer -> resumed p50 <= {RESUME_LIMIT_X:g}x LangGraph's",
                f"{system} / langgraph, 1 in flight",
                [ratio(a, b) for a, b in zip(ours, theirs, strict=True)],
                lambda x: x <= RESUME_LIMIT_X,
            )
    cycle = [(limit.get("store_round_cycle") or {}).get("x_bare_commit") for limit in limits]
    add(
        f"store round cycle <= {STORE_CYCLE_LIMIT_X:g}x a bare commit",
        "store round cycle / bare SQLite commit",
        cycle,
        lambda x: x <= STORE_CYCLE_LIMIT_X,
    )
    return found


def report(rows: list[dict[str, Any]], names: list[str]) -> None:
    print(f"{len(names)} runs: {', '.join(names)}")
    target = None
    for row in rows:
        if row["target"] != target:
            target = row["target"]
            print(f"\n{target}")
        per_run = " ".join("-" if v is None else f"{v:.2f}" for v in row["per_run"])
        met = "" if row["runs_met"] is None else f"  met in {row['runs_met']} of {row['runs']}"
        print(
            f"  {row['figure']:<44} median {row['median']:7.2f}  "
            f"range {row['min']:.2f}-{row['max']:.2f}{met}  [{per_run}]"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="JSON files of bench/compare.py")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    loaded = [load(path) for path in args.runs]
    rows = [f.row() for f in figures([r for r, _ in loaded], [lim for _, lim in loaded])]
    if not rows:
        print("no target figure in these runs", file=sys.stderr)
        return 1
    report(rows, [path.name for path in args.runs])
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": [str(p) for p in args.runs], "figures": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
