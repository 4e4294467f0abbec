"""Peak memory of one hook-sized ``Memory.follow`` call on a long transcript (issue 24).

Builds a transcript of ``--mb`` MB (cheap non-message lines), follows it once to its end in a
separate process, appends a short session, then measures the peak RSS of a process that opens the
memory and follows the new lines with the hook's ``max_bytes`` (4 MiB), against the same process
doing nothing but open the memory. ``--rev DIR`` runs another checkout's ``tortoise_sdk`` (e.g. main's)
beside this one, alternating.

    python benchmarks/bench_follow_memory.py --mb 200 --rev /tmp/main-checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import figures

HERE = Path(__file__).resolve().parent.parent
SHORT = HERE / "tests" / "data" / "claude_code_short.jsonl"

CHILD = r"""
import resource, sys
from tortoise_sdk import Memory
mem = Memory(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if sys.argv[3] == "follow":
    mem.follow(sys.argv[2], "claude-code", max_bytes=4 * 1024 * 1024)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def run(src: Path, db: str, transcript: Path, what: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", CHILD, db, str(transcript), what], env=env, check=True,
                         capture_output=True, text=True, cwd=transcript.parent).stdout
    return int(out.split()[-1])  # KiB


def _which(src: Path, cwd: str) -> str:
    return subprocess.run([sys.executable, "-c", "import tortoise_sdk; print(tortoise_sdk.__file__)"], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--rev", type=Path, help="a directory holding another tortoise_sdk to compare")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="a 2 MB file, one round")
    args = ap.parse_args()
    mb, rounds = (2, 1) if args.smoke else (args.mb, args.rounds)
    line = json.dumps({"type": "file-history-snapshot", "messageId": "m", "snapshot": "x" * 1000}).encode() + b"\n"
    variants = {"this": HERE, **({"rev": args.rev} if args.rev else {})}
    with tempfile.TemporaryDirectory() as tmp:
        transcript = Path(tmp) / "t.jsonl"
        with transcript.open("wb") as f:
            for _ in range(mb * 1024 * 1024 // len(line)):
                f.write(line)
        size = transcript.stat().st_size
        for name, src in variants.items():  # each variant's cursor reaches the end once, unmeasured
            subprocess.run([sys.executable, "-c", f"from tortoise_sdk import Memory; "
                            f"Memory({str(Path(tmp) / (name + '.db'))!r}).follow({str(transcript)!r}, 'claude-code')"],
                           env={**os.environ, "PYTHONPATH": str(src)}, check=True, cwd=tmp)
        print(f"transcript {size / 2**20:.0f} MiB, then {SHORT.stat().st_size} new bytes a round; peak RSS added "
              "by one follow(max_bytes=4 MiB), MiB")
        for r in range(rounds):
            with transcript.open("ab") as f:  # new lines for this round (turns stored once, parsed each time)
                f.write(SHORT.read_bytes())
            for name, src in variants.items():
                db = str(Path(tmp) / f"{name}.db")
                idle = run(src, db, transcript, "open")
                used = run(src, db, transcript, "follow")
                print(f"round {r + 1} {name:5s} {_which(src, tmp)}  follow {used / 1024:7.1f}   (open only {idle / 1024:5.1f})")


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    main()
