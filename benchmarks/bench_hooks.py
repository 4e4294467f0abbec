"""Wall time of ``tortoise hook`` as Claude Code runs it, on a long session, beside baselines from the same run.

A Claude Code transcript is built from the real ``subagent.jsonl`` (``../shared/data``), repeated
with fresh message ids until it is ``--mb`` MiB, and captured by ``Stop`` events (``HOOK_MAX_BYTES`` per call at most). Then,
``--repeat`` times, one more line is appended and a ``UserPromptSubmit`` event is handed to
``tortoise hook`` (a new process each time, as Claude Code does): it follows the transcript from the
stored offset (re-reading the earlier lines' ids) and prints the block (the prompt asks, so the
block is not held back as already shown). The prompt asks about what the transcript holds (how
Credo and Dialyzer were set up); each run must print a block, else the script fails. (It asked
"why the credo setup failed?" until the reflex's coverage gate rightly held that back: nothing in
the transcript says a setup failed.) Baselines: the bare interpreter, and ``tortoise sessions``
(start-up plus one store read), and the same prompt again with nothing new after each
run: what capturing the one line costs, which must not grow with the transcript (each prompt once
parsed every earlier line again, and read every stored turn of the session).

Run: .venv/bin/python benchmarks/bench_hooks.py [--mb 8] [--repeat 10] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench_startup import wall  # the same baseline measure as the start-up benchmark

import figures
from tortoise_sdk.cli.hosts import HOOK_MAX_BYTES

SHARED = Path(os.environ.get("TORTOISE_TEST_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
SOURCE = SHARED / "claude-transcripts" / "subagent.jsonl"
SESSION = "bench-session"


def copies(lines: list[dict], mb: float) -> list[str]:
    """The transcript's lines repeated with fresh ids (uuids, tool ids, agent ids) until ``mb`` MiB."""
    out: list[str] = []
    size = 0
    while size < mb * 1024 * 1024:
        text = "\n".join(json.dumps(o) for o in lines)
        for old in {v for o in lines for v in _ids(o)}:
            text = text.replace(old, f"{old[:8]}-{uuid.uuid4().hex[:12]}")
        text = text.replace('"sessionId": "491e126e-1e71-469c-ade2-fcc8af567c74"', f'"sessionId": "{SESSION}"')
        out.extend(text.splitlines())
        size += len(text) + 1
    return out


def _ids(obj: object) -> list[str]:
    found: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("uuid", "parentUuid", "id", "tool_use_id", "parentToolUseID", "toolUseID", "agentId",
                     "sourceToolAssistantUUID") and isinstance(v, str) and len(v) >= 7:
                found.append(v)
            found.extend(_ids(v))
    elif isinstance(obj, list):
        for v in obj:
            found.extend(_ids(v))
    return found


def hook(tortoise: str, db: str, event: dict) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run([tortoise, "--db", db, "hook"], input=json.dumps(event), capture_output=True, text=True,
                          check=True)
    return time.perf_counter() - t, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    figures.add_option(ap)
    ap.add_argument("--mb", type=float, default=8.0, help="transcript size in MiB (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="a tiny size (0.3 MiB, 2 runs), for the tests")
    args = ap.parse_args()
    if args.smoke:
        args.mb, args.repeat = 0.3, 2
    if not SOURCE.is_file():
        sys.exit(f"needs the shared transcripts at {SOURCE}")
    tortoise = str(Path(sys.executable).with_name("tortoise"))
    lines = copies([json.loads(line) for line in SOURCE.read_text().splitlines()], args.mb)
    with tempfile.TemporaryDirectory() as d:
        db, transcript = str(Path(d) / "m.db"), Path(d) / f"{SESSION}.jsonl"
        transcript.write_text("\n".join(lines[:-args.repeat]) + "\n")
        base = {"session_id": SESSION, "transcript_path": str(transcript), "cwd": d, "permission_mode": "default"}
        # A Stop captures at most HOOK_MAX_BYTES of backlog per call: enough calls to catch up.
        stops = [hook(tortoise, db, {**base, "hook_event_name": "Stop", "stop_hook_active": False})[0]
                 for _ in range(int(args.mb * 1024 * 1024 // HOOK_MAX_BYTES) + 2)]
        prompt = {**base, "hook_event_name": "UserPromptSubmit",
                  # Answered by a sub-agent's own work (its read of config.exs), which Claude Code's context does not
                  # hold; the prompt the agent gave that sub-agent ("Draft bead content for setting up Credo...")
                  # it holds, so a question about credo finds nothing to point to in this one-session store.
                  "prompt": "which Oban engine does the spotter config use?"}
        times, idle, shown = [], [], 0
        for line in lines[-args.repeat:]:
            with transcript.open("a") as f:
                f.write(line + "\n")
            t, out = hook(tortoise, db, prompt)
            times.append(t)
            shown += bool(out.strip())
            idle.append(hook(tortoise, db, prompt)[0])  # the same prompt again, nothing new to capture
        size = transcript.stat().st_size / 1024 / 1024
        print(f"transcript: {len(lines)} lines, {size:.1f} MiB; median wall time of {args.repeat} runs")
        print(f"  {'python -c pass (baseline)':<52}{wall([sys.executable, '-c', 'pass'], args.repeat) * 1000:>8.0f} ms")
        print(f"  {'tortoise sessions (baseline)':<52}"
              f"{wall([tortoise, '--db', db, 'sessions'], args.repeat) * 1000:>8.0f} ms")
        print(f"  {'tortoise hook UserPromptSubmit (+1 line, block)':<52}{statistics.median(times) * 1000:>8.0f} ms"
              f"  (max {max(times) * 1000:.0f} ms, block printed {shown}/{args.repeat})")
        # What capturing one line costs on a long transcript: the same prompt with nothing new, run after each.
        print(f"  {'tortoise hook UserPromptSubmit (nothing new, block)':<52}{statistics.median(idle) * 1000:>8.0f} ms"
              f"  (the +1 line run costs {(statistics.median(times) - statistics.median(idle)) * 1000:+.0f} ms more)")
        print(f"  {f'Stop calls catching up ({HOOK_MAX_BYTES // 1024 // 1024} MiB each at most)':<52}"
              + ", ".join(f"{t * 1000:.0f}" for t in stops) + " ms")
        log = Path(d) / "hooks.log"
        if log.exists():
            print("hooks.log:\n" + log.read_text())
    if shown < args.repeat:
        sys.exit(f"FAILED: the block was printed {shown} of {args.repeat} times")


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    main()
