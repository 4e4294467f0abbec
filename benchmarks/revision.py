"""Measure a benchmark beside another git revision's code, alternating, in one run (``--rev REV``).

The machine is shared, so a figure only means something beside a baseline taken in the same
conditions. ``alternate`` extracts REV's ``tortoise_sdk`` (``git archive``, no worktree left
behind) into a temporary directory and runs the calling script's own measurement in
subprocesses, one round for the working tree, one for REV, and so on: the workload is the
script's, only the library differs. The script's measurement prints one JSON object when run
with ``--measure-json``; each side's value is the median over rounds.

Not a benchmark itself (the smoke tests skip it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ("REPO", "add_options", "alternate", "report")

REPO = Path(__file__).resolve().parents[1]


def add_options(ap: argparse.ArgumentParser, *, rounds: int = 3) -> None:
    """``--rev``, ``--rounds`` and the hidden ``--measure-json`` (one side's measurement, for ``alternate``)."""
    ap.add_argument("--rev", help="also measure the code of this git revision (e.g. 9364ca8), alternating with "
                                  "the working tree's, and print the ratio")
    ap.add_argument("--rounds", type=int, default=rounds, help="alternations with --rev (default: %(default)s)")
    ap.add_argument("--measure-json", action="store_true", help=argparse.SUPPRESS)


def _extract(rev: str, into: str) -> None:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "tortoise_sdk"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)


def _run(script: str, argv: Sequence[str], root: Path) -> dict[str, float]:
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run([sys.executable, script, *argv, "--measure-json"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{Path(script).name} failed with the code at {root}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def alternate(script: str, argv: Sequence[str], rev: str, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """The medians of each figure for the working tree and for ``rev``, measured alternately."""
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="tortoise-rev-") as d:
        _extract(rev, d)
        for _ in range(rounds):
            ours.append(_run(script, argv, REPO))
            theirs.append(_run(script, argv, Path(d)))

    def medians(rows: list[dict[str, float]]) -> dict[str, float]:
        return {k: statistics.median(r[k] for r in rows) for k in rows[0]}

    return medians(ours), medians(theirs)


def report(rev: str, rounds: int, ours: Mapping[str, float], theirs: Mapping[str, float],
           labels: Mapping[str, str], fmt: Callable[[float], str] = "{:,.2f}".format) -> None:
    """Print each figure for both sides and their ratio (working tree / ``rev``)."""
    print(f"  alternated with {rev} ({rounds} rounds each, medians):")
    print(f"  {'figure':<36}{'this tree':>14}{rev:>14}{'ratio':>8}")
    for key, label in labels.items():
        a, b = ours[key], theirs[key]
        print(f"  {label:<36}{fmt(a):>14}{fmt(b):>14}{a / b if b else float('nan'):>8.2f}")
