"""``tortoise eval locomo`` without a model, run as a user runs it, so its table can be recorded for the docs.

The command captures each LoCoMo conversation (a namespace each), builds the memory block for every
question (``Memory.context``, the question as the window, budget 5) and, with ``--judge exact
--answer-from-block``, scores whether the block holds the gold answer verbatim, beside the evidence
recall@5, the block's tokens and ``context()``'s latency per category. No model, no network: the
recall and token columns do not depend on the machine; the latency columns do (read them with the
load the record gives).

This script only runs the command (``tortoise eval locomo FILES --judge exact --answer-from-block``,
its report in a temporary directory) and prints what it printed, so ``--record`` can keep it. The
conversations default to conv-26 and conv-30, the two the reflex's constants were chosen on (fitted,
not held out); ``--conversations`` names others of ``../shared/data/locomo``. ``--smoke``: the LoCoMo
excerpt in ``tests/data``, for the tests.

Run: .venv/bin/python benchmarks/bench_eval.py [--conversations conv-26,conv-30]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import figures

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from locomo import LOCOMO_DIR, SKIP_REASON  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--conversations", default="conv-26,conv-30",
                    help="comma-separated LoCoMo conversations of ../shared/data/locomo (default: %(default)s)")
    ap.add_argument("--smoke", action="store_true", help="the LoCoMo excerpt in tests/data, for the tests")
    args = ap.parse_args()
    if args.smoke:
        files = [ROOT / "tests" / "data" / "locomo_conv26_excerpt.json"]
    else:
        files = [LOCOMO_DIR / f"{name.strip()}.json" for name in args.conversations.split(",") if name.strip()]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            print(SKIP_REASON if not LOCOMO_DIR.is_dir() else f"no such conversation: {', '.join(missing)}",
                  file=sys.stderr)
            return 1
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "import sys; from tortoise_sdk.cli import main; sys.exit(main())", "eval",
               "locomo", *map(str, files), "--judge", "exact", "--answer-from-block", "--out",
               str(Path(tmp) / "locomo-eval.json")]
        print(f"tortoise eval locomo {' '.join(f.name for f in files)} --judge exact --answer-from-block", flush=True)
        return subprocess.run(cmd, cwd=tmp).returncode


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    sys.exit(main())
