"""Options of the embedding benchmarks that choose what is measured (the figures in docs/benchmarks.md depend on them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_embeddings  # noqa: E402


def test_named_conversations_are_measured_instead_of_the_first_ones():
    files = [Path(f"/data/conv-{n}.json") for n in (26, 30, 41, 42)]
    assert bench_embeddings.choose(files, 2, None) == files[:2]
    assert bench_embeddings.choose(files, 2, ["conv-41", "conv-42"]) == files[2:]
    with pytest.raises(SystemExit, match="conv-99"):
        bench_embeddings.choose(files, 2, ["conv-41", "conv-99"])
    assert bench_embeddings.choose([], 2, ["conv-41"]) == []  # no shared data: the part says it skipped


@pytest.mark.slow(reason="extracts an older revision and builds two small stores: ~10-40 s")
def test_vector_search_beside_a_revision_whose_schema_is_older():
    """The older code cannot open a store the working tree migrated: each code measures a store it built itself."""
    if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", "a44858e^{commit}"], capture_output=True).returncode:
        pytest.skip("a44858e is not in this clone's history")
    env = {k: v for k, v in os.environ.items() if k != "TORTOISE_FIGURES_CHILD"}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_vector_search.py"), "--items", "300",
                           "--queries", "2", "--write-queries", "1", "--rev", "a44858e", "--rounds", "1"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = done.stdout.split("a44858e (alternating")[1]
    assert "fused after a write" in theirs and "words" in theirs
