"""Draws bench/compare.py's results (its --json document) as one PNG; run by the peers'
interpreter (bench/.venv-bench has matplotlib).

    bench/.venv-bench/bin/python bench/compare_chart.py results.json bench/results/compare.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {
    "m3-embedded-legacy": "#1f77b4",
    "m3-embedded-mrtr": "#6baed6",
    "m3-grpc-legacy": "#d62728",
    "m3-grpc-mrtr": "#ff9896",
    "langgraph": "#2ca02c",
    "dbos": "#9467bd",
}


def value(document: dict[str, Any], system: str, phase: str, level: int, key: str) -> float:
    for row in document["results"]:
        if row["system"] == system and row["phase"] == phase and row["in_flight"] == level:
            found = row.get(key)
            return float(found) if found is not None else 0.0
    return 0.0


def main() -> int:
    document = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    systems: list[str] = document["systems"]
    levels: list[int] = document["settings"]["in_flight"]
    panels = [
        ("submit", "rounds_per_second", "rounds/s, counted from submit", False),
        ("answer", "rounds_per_second", "rounds/s, answering phase alone", False),
        ("submit", "resume_p50_ms", "answer -> resumed, median ms (log)", True),
        ("submit", "cpu_ms_per_round", "CPU ms per round, own processes (log)", True),
    ]
    figure, axes = plt.subplots(2, 2, figsize=(13, 8))
    width = 0.8 / max(len(systems), 1)
    for axis, (phase, key, title, log_scale) in zip(axes.flat, panels, strict=True):
        for index, system in enumerate(systems):
            xs = [position + index * width for position in range(len(levels))]
            ys = [value(document, system, phase, level, key) for level in levels]
            axis.bar(xs, ys, width, label=system, color=COLORS.get(system))
        axis.set_xticks([p + width * (len(systems) - 1) / 2 for p in range(len(levels))])
        axis.set_xticklabels([f"{level} in flight" for level in levels])
        axis.set_title(title)
        if log_scale:
            axis.set_yscale("log")
        axis.grid(axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    env = document["environment"]
    figure.suptitle(
        f"M3 vs LangGraph vs DBOS, one run, {env['nproc']} CPUs (load avg at end "
        f"{env['load_average_at_end'][0]}), SQLite WAL + synchronous=FULL everywhere"
    )
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=90)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
