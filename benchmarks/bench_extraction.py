"""Extraction wall time against a stub model that answers every call after a fixed delay D.

A 200-turn session in 4 S1 chunks: S1 runs its chunks concurrently, then S2 and
S4 run in turn, so the pipeline needs 3·D of model time; the goal is under
4·D + 0.25 s. The same run measures the sequential lower bound (every call
serial: concurrency 1, 6·D of model time) and reports LLM calls and tokens per
session.

    .venv/bin/python benchmarks/bench_extraction.py [--delay 0.5] [--turns 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from stub_model import StubModel  # noqa: E402

import figures  # noqa: E402
from tortoise_sdk import Memory  # noqa: E402

TOPICS = ["hiking", "the new job", "her sister", "a pottery class", "the garden", "a trip to Porto", "chess",
          "the dog", "a podcast", "baking bread"]


def session(n: int) -> list[dict]:
    turns = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        if i % 2 == 0:
            turns.append({"role": "user", "name": "Maya", "content": f"Update {i}: I spent time on {topic} this week."})
        else:
            turns.append({"role": "assistant", "content": f"Nice, tell me more about {topic}."})
    return turns


def script(n: int) -> dict:
    points = [{"content": f"Maya spent time on {TOPICS[i % len(TOPICS)]} (update {i}).", "about": ["Maya"],
               "quote": f"Update {i}: I spent time on", "turn": i, "search_keys": [TOPICS[i % len(TOPICS)]]}
              for i in range(0, n, 20)]
    s2 = {"entities": [{"name": "Maya", "kind": "person"}], "events": [], "points": points, "retractions": []}
    empty = {"entities": [], "events": [], "points": [], "retractions": []}
    return {"routes": [
        {"stage": "s1", "replies": [{"content": "Maya gave weekly updates on her hobbies and family."}], "cycle": True},
        {"stage": "s2", "replies": [{"content": s2}], "cycle": True},
        {"stage": "s4", "replies": [{"content": empty}], "cycle": True},
    ]}


def run(stub: StubModel, db: str, session_id: str, concurrency: int) -> tuple[float, object]:
    with Memory(db, namespace=f"bench-{session_id}", model="openai/stub-model", api_base=stub.base_url,
                api_key="sk-stub", concurrency=concurrency, chunk_turns=50) as mem:
        mem.capture(session_id, session(ARGS.turns), session_date="2024-01-01", extract=False)
        started = time.perf_counter()
        report = mem.extract(session_id)
        return time.perf_counter() - started, report


def main() -> int:
    d = ARGS.delay
    with tempfile.TemporaryDirectory() as tmp, StubModel(script(ARGS.turns), delay=d) as stub:
        db = str(Path(tmp) / "bench.db")
        run(stub, db, "warmup", 4)  # imports litellm and opens its HTTP client outside the timing
        concurrent, report = run(stub, db, "concurrent", 4)
        sequential, _ = run(stub, db, "sequential", 1)
    assert report.status == "ok", report
    total = report.stages["total"]
    goal = 4 * d + 0.25
    print(f"session: {ARGS.turns} turns, 4 S1 chunks, stub delay D = {d:.2f} s per call")
    print(f"extraction (S1 concurrent):   {concurrent:6.2f} s   goal < 4·D + 0.25 = {goal:.2f} s   "
          f"model-time floor 3·D = {3 * d:.2f} s")
    print(f"sequential (every call serial): {sequential:6.2f} s   (floor 6·D = {6 * d:.2f} s)")
    print(f"speed-up over sequential: {sequential / concurrent:.2f}x")
    per_stage = {k: (v.calls, v.prompt_tokens, v.completion_tokens) for k, v in report.stages.items()
                 if k in ("s1", "s2", "vet", "s4")}
    print(f"LLM calls per session: {total.calls}  prompt tokens: {total.prompt_tokens}  "
          f"completion tokens: {total.completion_tokens}")
    print("per stage (calls, prompt, completion): " + json.dumps(per_stage))
    print(f"our overhead beyond 3·D: {concurrent - 3 * d:.3f} s")
    return 0 if concurrent < goal or ARGS.smoke else 1  # a smoke run checks the path, not the time


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(parser)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds the stub waits before each reply")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--smoke", action="store_true", help="a short stub delay, for the tests (no time goal)")
    ARGS = parser.parse_args()
    if ARGS.smoke:
        ARGS.delay = 0.05
    sys.exit(main())
