"""A provider that refuses or hangs: how long a capture takes and how many calls it makes, beside a baseline checkout.

Two captures of demo sessions into one Memory at the default settings (max_attempts=4,
1 s backoff base), the second right after the first, for:

- a missing key: ``openai/gpt-4o-mini`` with no ``OPENAI_API_KEY`` (litellm refuses
  before connecting: nothing leaves the machine);
- a refused connection: ``api_base`` on a loopback port that is bound and never listens;
- a hanging provider: ``api_base`` on a loopback port that listens (the kernel accepts each
  connection) and never answers, with a 1 s request timeout on both sides
  (``model_settings={"timeout_s": 1}``, which the baseline reads too; ``request_timeout_s=1`` here).

Goal: the first capture well under a second with one call (at most two attempts),
the second making no call; with a hanging provider, the first capture about two
timeouts (one retry), the second no call. The baseline is the same script run against another
revision's code (``--baseline REF``, default ``main``; extracted with ``git archive``
into a temporary directory and put first on ``PYTHONPATH``), in the same run.

Run: .venv/bin/python benchmarks/bench_provider_failures.py [--baseline main]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import figures

REPO = Path(__file__).resolve().parents[1]


def measure() -> list[dict[str, object]]:
    """Run the cases in this process (the code on ``sys.path``) and return one row per capture."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    for name in ("OPENAI_API_KEY", "TORTOISE_API_KEY", "TORTOISE_MODEL"):
        os.environ.pop(name, None)
    import litellm  # noqa: F401 - imported once, outside the timings

    from tortoise_sdk import Memory
    from tortoise_sdk.demo import load_demo_sessions

    demo = {s["session_id"]: s for s in load_demo_sessions()}
    rows = []
    with socket.socket() as probe, socket.socket() as silent, tempfile.TemporaryDirectory() as d:
        probe.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
        silent.bind(("127.0.0.1", 0))
        silent.listen(512)  # never accepted: each request is sent and never answered
        hanging = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        cases = [("missing key", {"model": "openai/gpt-4o-mini"}),
                 ("refused connection", {"model": "openai/stub-model", "api_base": refused, "api_key": "k"}),
                 ("hanging, 1 s timeout", {"model": "openai/stub-model", "api_base": hanging, "api_key": "k",
                                           "model_settings": {"timeout_s": 1.0}})]
        for n, (case, settings) in enumerate(cases):
            with Memory(str(Path(d) / f"{n}.db"), namespace="bench", **settings) as mem:
                for sid in ("demo-1", "demo-2"):
                    started = time.perf_counter()
                    report = mem.capture(sid, demo[sid]["turns"], session_date=demo[sid]["date"]).extraction
                    took = time.perf_counter() - started
                    stages = {k: v for k, v in report.stages.items() if k != "total"}
                    rows.append({"case": case, "session": sid, "seconds": round(took, 3), "status": report.status,
                                 "calls": sum(v.calls for v in stages.values()),
                                 "attempts": sum(v.calls + v.retries for v in stages.values()),
                                 "reason": (report.reason or "")[:70]})
    return rows


def baseline(ref: str) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as d:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "tortoise_sdk", "prompts"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", d], input=archive, check=True)
        # The repository's prompts/ ship as tortoise_sdk.prompts (mapped at build time): without this the
        # baseline's code would read the installed checkout's prompts, and fail on a placeholder it lacks.
        (Path(d) / "prompts").rename(Path(d) / "tortoise_sdk" / "prompts")
        env = {**os.environ, "PYTHONPATH": d}
        out = subprocess.run([sys.executable, __file__, "--json"], env=env, check=True, capture_output=True,
                             text=True).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    figures.add_option(ap)
    ap.add_argument("--baseline", default="main", help="git revision to compare with (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one side, for the baseline run
    ap.add_argument("--smoke", action="store_true", help="baseline: the checked-out HEAD, for the tests")
    args = ap.parse_args()
    if args.smoke:
        args.baseline = "HEAD"
    if args.json:
        print(json.dumps(measure()))
        return
    now, before = measure(), baseline(args.baseline)
    print(f"{'case':20} {'capture':8} | {'this tree':>9} {'calls':>5} {'tries':>5} {'status':8} | "
          f"{args.baseline + ' (baseline)':>17} {'calls':>5} {'tries':>5} {'status':8}")
    for a, b in zip(now, before):
        print(f"{a['case']:20} {a['session']:8} | {a['seconds']:8.2f}s {a['calls']:5} {a['attempts']:5} "
              f"{a['status']:8} | {b['seconds']:16.2f}s {b['calls']:5} {b['attempts']:5} {b['status']:8}")
    print()
    for a in now:
        print(f"{a['case']}, {a['session']}: {a['reason']}")


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    main()
