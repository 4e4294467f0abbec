"""Every script in benchmarks/ runs at its ``--smoke`` size, so a benchmark that breaks fails the build.

Each runs in a subprocess, as a user runs it, and must exit 0 (a smoke run checks the script's
own accounting, never a time goal). The ones that spend most of their time starting processes
or waiting on a stub model are ``slow``: they run with ``-m slow`` (CI's benchmark job).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from locomo import load_questions, locomo_files
from needs import SHARED_DATA, needs_locomo, needs_transcripts

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _slow(why: str) -> pytest.MarkDecorator:
    return pytest.mark.slow(reason=why)


CASES = [
    pytest.param("bench_capture.py", id="capture"),
    pytest.param("bench_grounding.py", id="grounding", marks=needs_locomo),
    pytest.param("bench_memory_search.py", id="memory_search"),
    pytest.param("bench_reflex_latency.py", id="reflex_latency"),
    pytest.param("bench_reflex_recall.py", id="reflex_recall", marks=needs_locomo),
    pytest.param("bench_search.py", id="search", marks=needs_locomo),
    pytest.param("bench_follow_memory.py", id="follow_memory"),
    pytest.param("bench_serve.py", id="serve"),
    pytest.param("bench_embeddings.py", id="embeddings"),
    pytest.param("bench_dedupe.py", id="dedupe", marks=_slow("four sessions through the stub model: ~10-40 s")),
    pytest.param("bench_vector_search.py", id="vector_search"),
    pytest.param("bench_eval.py", id="eval"),
    pytest.param("bench_tokens.py", id="tokens", marks=needs_locomo),
    pytest.param("bench_coding_memory.py", id="coding_memory", marks=pytest.mark.shared_data("claude-projects")),
    pytest.param("bench_scale.py", id="scale",
                 marks=_slow("builds one- and three-namespace stores on both engines, starts processes: ~60-120 s")),
    pytest.param("bench_workers.py", id="workers", marks=_slow("worker processes against a stub on PostgreSQL: ~20-60 s")),
    pytest.param("bench_extraction.py", id="extraction", marks=_slow("waits on a stub model: ~10-30 s")),
    pytest.param("bench_hooks.py", id="hooks",
                 marks=[needs_transcripts, _slow("starts a tortoise process per hook event: ~20-60 s")]),
    pytest.param("bench_load.py", id="load", marks=_slow("spawns capture and worker processes: ~30-90 s")),
    pytest.param("bench_loop.py", id="loop", marks=[needs_locomo, _slow("replays a chat through a stub: ~30-80 s")]),
    pytest.param("bench_provider_failures.py", id="provider_failures",
                 marks=_slow("sits out the default retry backoff twice, at HEAD too: ~30-70 s")),
    pytest.param("bench_startup.py", id="startup", marks=_slow("times cold process starts (import litellm): ~20-80 s")),
]


def test_every_benchmark_script_has_a_smoke_case():
    listed = {p.values[0] for p in CASES}
    assert listed == {p.name for p in BENCHMARKS.glob("bench_*.py")}


@pytest.mark.parametrize("script", CASES)
def test_benchmark_runs_green_at_its_smoke_size(script: str, request: pytest.FixtureRequest):
    slow = request.node.get_closest_marker("slow")
    if slow is not None and "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip(f"slow ({slow.kwargs['reason']}); run with -m slow")
    env = {**os.environ, "TORTOISE_TEST_SHARED_DATA": str(SHARED_DATA), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--smoke"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (f"{script} --smoke exited {done.returncode}:\n"
                                  f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    assert done.stdout.strip(), f"{script} --smoke printed nothing"


def test_the_dedupe_replies_file_is_what_the_benchmark_replays(tmp_path: Path):
    out = tmp_path / "replies.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_dedupe.py"), "--write-script", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8") == (BENCHMARKS / "dedupe_replies.json").read_text(encoding="utf-8")


@needs_locomo
def test_the_dev_loop_says_where_every_evidence_turn_ends():
    """``dev_reflex_loo.py --where`` (not a ``bench_`` script: it reads the --loo record's choices) runs, and its
    places account for every evidence turn of every category exactly once."""
    env = {**os.environ, "TORTOISE_TEST_SHARED_DATA": str(SHARED_DATA)}
    done = subprocess.run([sys.executable, str(BENCHMARKS / "dev_reflex_loo.py"), "--where"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    rows = {}
    for line in done.stdout.splitlines():
        m = re.fullmatch(r"\s+(\S+)\s+(\d+)((?:\s+\d+ \(\s*\d+%\)){4})", line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), [int(x) for x in re.findall(r"(\d+) \(", m.group(3))])
    evidence = Counter()
    for path in locomo_files():
        for q in load_questions(path):
            evidence[q.category_name] += len(q.evidence)
    assert {name: turns for name, (turns, _) in rows.items()} == {**evidence, "all": sum(evidence.values())}, done.stdout
    for name, (turns, places) in rows.items():
        assert sum(places) == turns, (name, turns, places)
