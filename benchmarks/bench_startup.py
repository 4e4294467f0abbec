"""CLI start-up time of the commands that call no model, beside the bare interpreter.

Goal: under 0.5 s. litellm is imported lazily, only when a model is called.

Run: .venv/bin/python benchmarks/bench_startup.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import figures


def wall(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    figures.add_option(ap)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="one run of each, for the tests")
    args = ap.parse_args()
    if args.smoke:
        args.repeat = 1
    tortoise = str(Path(sys.executable).with_name("tortoise"))
    with tempfile.TemporaryDirectory() as d:
        db = str(Path(d) / "m.db")
        subprocess.run([tortoise, "--db", db, "demo"], check=True, capture_output=True)
        rows = [
            ("python -c pass (baseline)", [sys.executable, "-c", "pass"]),
            ("python -c 'import litellm' (avoided)", [sys.executable, "-c", "import litellm"]),
            ("tortoise sessions", [tortoise, "--db", db, "--namespace", "demo", "sessions"]),
            ("tortoise search", [tortoise, "--db", db, "--namespace", "demo", "search", "where does Maya work"]),
            ("tortoise subagents", [tortoise, "--db", db, "--namespace", "demo", "subagents"]),
        ]
        print(f"median wall time of {args.repeat} runs")
        for label, cmd in rows:
            print(f"  {label:<40}{wall(cmd, args.repeat) * 1000:>8.0f} ms")


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    main()
