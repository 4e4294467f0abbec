"""The README's test command on a machine with no PostgreSQL and no ../shared: skips, each reason said once.

Runs a few of the suite's own tests in a pytest subprocess, with PostgreSQL pointed at a closed
port and the shared data at a missing directory: locally they skip (no teardown error, one line
per reason in the summary); under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
CLOSED_PG = "postgresql://postgres@127.0.0.1:1/postgres"
#: Tests that need PostgreSQL (a replayed cassette among them), the transcripts and LoCoMo, and one that needs nothing.
SELECTED = (
    "tests/test_pipeline_postgres.py",
    "tests/test_store_conformance.py::test_capture_stores_turns_in_order_with_deterministic_ids",
    "tests/test_streams.py::test_real_subagent_transcript_reports_the_completed_task_exactly",
    "tests/test_search.py::test_locomo_evidence_recall_at_10_meets_goal",
)


def run_selected(tmp_path: Path, *, ci: bool) -> tuple[int, str, dict[str, int]]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env |= {"TORTOISE_TEST_PG_URL": CLOSED_PG, "TORTOISE_TEST_SHARED_DATA": str(tmp_path / "no-shared-data")}
    if ci:
        env["CI"] = "true"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SELECTED],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    last = proc.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|skipped|failed|errors?)", last)}
    return proc.returncode, proc.stdout, counts


def test_without_postgres_and_shared_data_the_tests_skip_with_one_reason_each(tmp_path: Path) -> None:
    code, out, counts = run_selected(tmp_path, ci=False)
    assert (code, counts) == (0, {"passed": 1, "skipped": 5}), out
    assert "played 0 of" not in out and "Error" not in out
    reasons = [line for line in out.splitlines() if line.startswith("SKIPPED ")]
    assert len(reasons) == 3, out  # one line per reason, however many tests it skipped
    pg, = (r for r in reasons if "PostgreSQL" in r)
    assert pg.startswith(f"SKIPPED 3: PostgreSQL tests: PostgreSQL at {CLOSED_PG} is unreachable")
    assert "TORTOISE_TEST_PG_URL" in pg and "tests/test_pipeline_postgres.py" in pg
    assert any(r.startswith("SKIPPED 1: needs ../shared/data/claude-transcripts") for r in reasons)
    assert any(r.startswith("SKIPPED 1: needs ../shared/data/locomo") for r in reasons)


def test_under_ci_the_same_tests_fail_instead_of_skipping(tmp_path: Path) -> None:
    code, out, counts = run_selected(tmp_path, ci=True)
    assert code == 1, out
    assert counts.get("skipped", 0) == 0 and counts["passed"] == 1, out
    assert counts.get("errors", 0) + counts.get("error", 0) + counts.get("failed", 0) == 5, out
    assert "CI=true, so this cannot be skipped: PostgreSQL tests" in out
    assert "CI=true, so this cannot be skipped: needs ../shared/data/locomo" in out
