"""Record what a benchmark printed as a docs fragment (``--record``), so docs quote runs, not memory.

Each ``bench_*.py`` calls ``record_if_asked(__file__)`` first. Run with ``--record`` (or
``--record=LABEL`` for a second configuration of the same script), the script runs again in a
subprocess without that option; what it prints on stdout is shown as usual and, if it printed
anything, written to ``docs/figures/<script>.md`` (``<script>-<label>.md``): the exact output, its
exit status (a script exits 1 when a goal is missed), the command line that regenerates the
fragment, the git revision measured, the date, the run time, the machine's load average before and
after, and a checksum of the output (so an edit by hand is caught). Docs pages include a fragment
with pymdownx.snippets (``--8<-- "figures/bench_capture.md"``); ``tests/test_docs.py`` checks that
every fragment is well-formed, included by a page and named after its own command, and that a
figure a page quotes appears in a fragment.

Not a benchmark itself (the smoke tests skip it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ("FIGURES", "REPO", "add_option", "fragment_name", "parse", "record_if_asked", "render")

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "docs" / "figures"
_LABEL = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_HEAD = "<!-- Recorded by benchmarks/figures.py: do not edit, run the command below again. -->"
_META = re.compile(r"\A" + re.escape(_HEAD) + r"\n<!-- figure (\{.*?\}) -->\n", re.S)
_KEYS = {"command", "revision", "modified", "recorded_at", "seconds", "load_before", "load_after", "cpus",
         "python", "exit_status", "output"}


def add_option(ap: argparse.ArgumentParser) -> None:
    """List ``--record`` in the script's ``--help`` (``record_if_asked`` handles it before parsing)."""
    ap.add_argument("--record", nargs="?", const="", metavar="LABEL",
                    help="also write what this run prints to docs/figures/<script>[-LABEL].md, "
                         "the fragment the docs include (use --record=LABEL)")


def fragment_name(script: str, label: str = "") -> str:
    """``bench_capture`` for ``--record``, ``bench_capture-pastes`` for ``--record=pastes``."""
    if label and not _LABEL.fullmatch(label):
        raise SystemExit(f"--record={label}: a label is lower-case letters, digits and hyphens (e.g. --record=pastes)")
    stem = Path(script).stem
    return f"{stem}-{label}" if label else stem


def _split(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    label, rest = None, []
    for arg in argv:
        if arg == "--record":
            label = ""
        elif arg.startswith("--record="):
            label = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return label, rest


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def record_if_asked(script: str, argv: Sequence[str] | None = None) -> None:
    """With ``--record[=LABEL]`` in ``argv``: run the script without it, tee its stdout, write the fragment, exit."""
    label, rest = _split(sys.argv[1:] if argv is None else argv)
    if label is None or os.environ.get("TORTOISE_FIGURES_CHILD"):
        return
    name = fragment_name(script, label)
    if "--smoke" in rest and "TORTOISE_FIGURES_DIR" not in os.environ:
        raise SystemExit("--record with --smoke would put a smoke run's figures in the docs; drop one of them")
    revision = _git("rev-parse", "--short", "HEAD")  # the code measured: read before a commit can move HEAD
    modified = bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"))
    load_before, started = os.getloadavg(), time.monotonic()
    env = {**os.environ, "TORTOISE_FIGURES_CHILD": "1", "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen([sys.executable, script, *rest], stdout=subprocess.PIPE, text=True, env=env)
    lines = []
    assert child.stdout is not None
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    code = child.wait()
    if not "".join(lines).strip():  # nothing measured (a bad option, a crash before the first figure)
        print(f"{Path(script).name} exited {code} and printed nothing: nothing recorded", file=sys.stderr)
        raise SystemExit(code or 1)
    flag = f"--record={label}" if label else "--record"
    meta: dict[str, Any] = {
        "command": shlex.join(["python", f"benchmarks/{Path(script).name}", *rest, flag]),
        "revision": revision,
        "modified": modified,
        "recorded_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": round(time.monotonic() - started, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "exit_status": code,
        "output": "".join(lines).rstrip("\n"),
    }
    out = Path(os.environ.get("TORTOISE_FIGURES_DIR") or FIGURES)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.md"
    path.write_text(render(meta), encoding="utf-8")
    print(f"recorded in {path.relative_to(REPO) if path.is_relative_to(REPO) else path}", file=sys.stderr)
    raise SystemExit(code)


def render(meta: dict[str, Any]) -> str:
    """The fragment's Markdown: the metadata as a comment, the output verbatim, a line saying how it was measured."""
    fence = "```"
    while fence in meta["output"]:
        fence += "`"
    when = meta["recorded_at"].replace("T", " ").rstrip("Z")
    code = f"`{meta['revision']}`" + (" with uncommitted changes" if meta["modified"] else "")
    header = json.dumps({**{k: v for k, v in meta.items() if k != "output"}, "sha256": _digest(meta["output"])},
                        ensure_ascii=False)
    return (f"{_HEAD}\n<!-- figure {header} -->\n\n{fence}text\n{meta['output']}\n{fence}\n\n"
            f"*Recorded {when} UTC, code at {code}, Python {meta['python']}, {meta['cpus']} CPUs, "
            f"load average (1 / 5 / 15 min) {_load(meta['load_before'])} before and {_load(meta['load_after'])} after, "
            f"{meta['seconds']:.0f} s{_status(meta['exit_status'])}:* `{meta['command']}`\n")


def _status(code: int) -> str:
    return "" if code == 0 else f", exit status {code} (a goal missed, or a failure: read the output)"


def _digest(output: str) -> str:
    return hashlib.sha256(output.encode()).hexdigest()[:16]


def _load(averages: Sequence[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in averages)


def parse(text: str) -> dict[str, Any]:
    """A fragment's metadata and output; ``ValueError`` saying what is wrong when it is not what ``render`` wrote."""
    m = _META.match(text)
    if not m:
        raise ValueError("no metadata comment at the top: re-run the benchmark with --record")
    meta = json.loads(m.group(1))
    digest = meta.pop("sha256", None)
    if set(meta) | {"output"} != _KEYS:
        raise ValueError(f"metadata keys {sorted(meta)}, expected {sorted(_KEYS - {'output'})} and sha256")
    body = re.search(r"\n(`{3,})text\n(.*)\n\1\n", text, re.S)
    if not body:
        raise ValueError("no ```text block holding the output")
    meta["output"] = body.group(2)
    if digest != _digest(meta["output"]) or render(meta) != text:
        raise ValueError("edited by hand (it differs from what --record writes): re-run the benchmark with --record")
    return meta
