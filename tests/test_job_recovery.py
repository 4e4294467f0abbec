"""Jobs that fail are visible and recoverable (issue 22 §2 and §3): a partial run's turns wait for a retry,
a job failed for good is listed, counted and said by flush and worker, and ``flush --retry-failed`` runs it.

The model is a live stub on loopback (tests/stub_model.py) answering with the demo's
recorded replies, with HTTP 500s in front where a stage must fail.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from conftest import FAST_RETRY, run_cli
from tortoise_sdk import Memory
from tortoise_sdk.demo import load_demo_sessions, load_recorded_extraction
from tortoise_sdk.store import Store

pytestmark = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])

DEMO = {s["session_id"]: s for s in load_demo_sessions()}
FAILED_FOR_GOOD = "tortoise: 1 job(s) failed for good (demo-1); run `tortoise flush --retry-failed`"


@pytest.fixture
def fast_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line with a quick backoff and 2 attempts per call, as the Memory tests use."""
    real = Memory._llm_config
    monkeypatch.setattr(Memory, "_llm_config",
                        lambda self: real(self).model_copy(update={**FAST_RETRY, "max_attempts": 2}))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub")


def demo_replies(stage: str) -> dict[str, Any]:
    """The recorded demo-1 reply of a stage."""
    route = next(r for r in load_recorded_extraction()["routes"]
                 if r["stage"] == stage and "Northwind Labs, the biotech startup" in r["contains"])
    return route["replies"][0]


def queue_demo_1(db: str) -> str:
    with Memory(db, model="openai/stub-model") as mem:
        s = DEMO["demo-1"]
        return mem.capture("demo-1", s["turns"], session_date=s["date"], extract="background").extraction.job_id


def kill_three_workers(store: Store, namespace: str, session_id: str = "demo-1") -> None:
    """Three workers lease the session's job and die (each lease runs out); the next lease gives it up for good."""
    at = datetime.now(timezone.utc)
    for n in (1, 2, 3, 5):
        leased = store.lease_job(namespace, lease_s=30, max_attempts=3, now=at + timedelta(minutes=n),
                                 session_id=session_id, due_only=False)
        assert (leased is None) == (n == 5)


def test_failed_s1_and_s2_leave_the_turns_waiting_and_the_retry_extracts_them(
        tmp_path: Path, stub_model: Any, fast_cli: None, capsys: pytest.CaptureFixture[str]) -> None:
    # The run: S1 and S2 answer HTTP 500 (both attempts), S4 answers. It ended `done`, exit 0, and the
    # watermark moved past the window, so no flush or worker read those turns again.
    stub = stub_model({"routes": [
        {"stage": "s1", "replies": [{"status": 500}, {"status": 500}, demo_replies("s1")]},
        {"stage": "s2", "replies": [{"status": 500}, {"status": 500}, demo_replies("s2")]},
        {"stage": "s4", "replies": [demo_replies("s4"), demo_replies("s4")]},
    ]})
    db = str(tmp_path / "m.db")
    job_id = queue_demo_1(db)
    model = ["--model", "openai/stub-model", "--api-base", stub.base_url]
    code, out, err = run_cli(capsys, "--db", db, "flush", *model)
    assert code == 3
    waits = "turns 0-6 wait for another run (S2 failed, S1 failed on turns 0-6)"
    assert f"job {job_id} demo-1: pending (attempt 1), turns 0-6 wait, due again at " in out
    # Why it failed is said once, on stderr.
    assert f"tortoise: extraction of demo-1 failed (job {job_id}, attempt 1): s1: server; s2: server; {waits}" in err
    assert waits not in out
    with Memory(db) as mem:
        # What S4 found is written; no turn is covered, so the watermark was not set.
        assert mem.store.extraction_state(mem.namespace, "demo-1") is None
        assert [m.content for m in mem.memories()] == ["Maya's neighbour Tomás offered to walk Biscuit on "
                                                       "Tuesdays and Thursdays."]
        report = mem.receipts("demo-1")[0].extraction
        assert (report.status, report.window, report.waiting) == ("partial", (0, 6), (0, 6))
        assert report.reason.endswith(waits)
        (job,) = mem.jobs(status="pending")
        assert (job.job_id, job.attempts, job.turns, job.last_error) == (job_id, 1, (0, 6), f"attempt 1: {report.reason}")
    code, out, _ = run_cli(capsys, "--db", db, "jobs", "--status", "pending")
    assert code == 0 and out.startswith(f"{job_id} demo-1: pending, 1 attempt(s), turns 0-6, updated ")
    # The provider is back: the next flush reads the same turns again.
    code, out, err = run_cli(capsys, "--db", db, "flush", *model)
    assert (code, err) == (0, "")
    assert f"job {job_id} demo-1: done (attempt 2)" in out
    with Memory(db) as mem:
        assert mem.store.extraction_state(mem.namespace, "demo-1").watermark == 6
        assert len(mem.memories()) == 7
        assert mem.receipts("demo-1")[0].extraction.outcomes == {"ADD": 6, "NOOP": 1}
        assert mem.jobs(status="pending") == []
    code, out, _ = run_cli(capsys, "--db", db, "jobs")
    assert code == 0 and out.startswith(f"{job_id} demo-1: done, 2 attempt(s), no turn waits, updated ")
    assert out.rstrip().endswith(f"(earlier: attempt 1: {report.reason})")  # the failure before the success
    assert [r.stage for r in stub.requests] == ["s1", "s1", "s2", "s2", "s4", "s1", "s2", "s4"]
    assert stub.unanswered == []


def test_a_job_failed_for_good_is_listed_counted_said_and_retried(
        tmp_path: Path, stub_model: Any, fast_cli: None, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    job_id = queue_demo_1(db)
    with Memory(db) as mem:
        kill_three_workers(mem.store, mem.namespace)
    stub = stub_model(load_recorded_extraction())
    model = ["--model", "openai/stub-model", "--api-base", stub.base_url]
    # Before: "nothing pending", exit 0, and the failed job nowhere to be seen.
    code, out, err = run_cli(capsys, "--db", db, "flush", *model)
    assert (code, out) == (3, "nothing pending\n") and err.startswith(FAILED_FOR_GOOD)
    code, out, err = run_cli(capsys, "--db", db, "worker", "--once", *model)
    assert (code, out) == (3, "no job queued\n") and err.startswith(FAILED_FOR_GOOD)
    code, out, _ = run_cli(capsys, "--db", db, "jobs", "--status", "failed", "--json")
    (row,) = json.loads(out)
    assert (row["job_id"], row["session_id"], row["status"], row["attempts"], row["turns"]) == (
        job_id, "demo-1", "failed", 3, [0, 6])
    assert row["last_error"] == "attempt 3: lease expired (worker crashed or stalled); giving up after 3 attempts"
    assert {"created_at", "updated_at", "errors"} <= set(row)
    code, out, _ = run_cli(capsys, "--db", db, "stats", "--json")
    assert json.loads(out)["jobs"] == {"failed": 1}
    code, out, _ = run_cli(capsys, "--db", db, "stats")
    assert "jobs: failed 1 (`tortoise flush --retry-failed` queues the failed ones again)" in out
    assert stub.requests == []

    code, out, err = run_cli(capsys, "--db", db, "flush", "--retry-failed", *model)
    assert (code, err) == (0, "") and f"job {job_id} demo-1: done (attempt 1)" in out
    with Memory(db) as mem:
        assert len(mem.memories()) == 7
        (job,) = mem.jobs()
        assert (job.status, job.turns) == ("done", None)
        assert job.errors[-1] == "re-queued after 3 attempt(s); attempts start over"
    code, out, err = run_cli(capsys, "--db", db, "flush", *model)
    assert (code, out, err) == (0, "nothing pending\n", "")
    code, out, _ = run_cli(capsys, "--db", db, "stats", "--json")
    assert json.loads(out)["jobs"] == {"done": 1}


def test_a_long_running_worker_says_a_job_failed_for_good(tmp_path: Path, stub_model: Any, fast_cli: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    queue_demo_1(db)
    with Memory(db, model="openai/stub-model", extract_every=1) as mem:
        kill_three_workers(mem.store, mem.namespace)
        s = DEMO["demo-2"]
        mem.capture("demo-2", s["turns"], session_date=s["date"], extract="background")
    stub = stub_model(load_recorded_extraction())
    code, out, err = run_cli(capsys, "--db", db, "worker", "--max-jobs", "1", "--poll", "0.01", "--model",
                             "openai/stub-model", "--api-base", stub.base_url)
    # Said when it starts (and whenever a job it runs fails for good); it then runs what is due.
    assert err.startswith(FAILED_FOR_GOOD) and " demo-2: done (attempt 1)" in out
    assert code == 3


# -- both engines ---------------------------------------------------------------------------------------


@pytest.fixture(params=("sqlite", "postgres"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "jobs.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")


def test_retry_failed_requeues_or_folds_into_a_pending_job_on_both_engines(url: str,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    ns = f"retry_{datetime.now(timezone.utc).timestamp():.0f}"
    with Memory(url, namespace=ns, model="openai/stub-model") as mem:
        for sid in ("a", "b"):
            mem.capture(sid, DEMO["demo-1"]["turns"], extract="background")
        with caplog.at_level(logging.WARNING, logger="tortoise_sdk.store"):
            kill_three_workers(mem.store, ns, "a")
            kill_three_workers(mem.store, ns, "b")
        # The worker that gives a job up says so (a running `tortoise worker` prints it on stderr).
        said = [r.getMessage() for r in caplog.records if "failed for good" in r.getMessage()]
        assert [m.split(" failed for good")[0].split(" of ")[1] for m in said] == ["session a", "session b"]
        assert all(m.endswith("`tortoise flush --retry-failed` queues it again") for m in said)
        failed = mem.jobs(status="failed")
        assert [(j.session_id, j.attempts, j.turns) for j in failed] == [("a", 3, (0, 6)), ("b", 3, (0, 6))]
        assert mem.jobs(status="failed", session_id="b") == failed[1:]
        # b gets a new capture meanwhile: its new pending job reads every turn after the watermark, the old ones too.
        mem.capture("b", [*DEMO["demo-1"]["turns"], {"role": "user", "content": "One more thing: I moved to Berkeley."}],
                    extract="background")
        newer = mem.jobs(status="pending", session_id="b")[0]
        queued = mem.store.retry_failed_jobs(ns)
        assert [(j.session_id, j.status, j.attempts, j.due_at) for j in queued] == [
            ("a", "pending", 0, None), ("b", "pending", 0, None)]
        assert queued[0].job_id == failed[0].job_id and queued[1].job_id == newer.job_id
        old_b = mem.store.get_job(failed[1].job_id)
        assert (old_b.status, old_b.errors[-1]) == ("done", f"re-queued: retried as pending job {newer.job_id} of the "
                                                            "same session")
        assert mem.jobs(status="failed") == [] and mem.store.retry_failed_jobs(ns) == []
        assert [(j.session_id, j.turns) for j in mem.jobs(status="pending")] == [("a", (0, 6)), ("b", (0, 7))]


def test_flush_says_a_job_waits_for_another_worker_s_run_of_its_session(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The verification pass: a job held back by a run of the same session was 'nothing pending', exit 0."""
    db = str(tmp_path / "m.db")
    with Memory(db, model="openai/stub-model") as mem:
        mem.capture("s1", [{"role": "user", "content": "My dog Biscuit is a beagle."}], extract="background")
        mem.store.lease_job(mem.namespace, lease_s=600, max_attempts=3, due_only=False)  # another worker runs s1
        mem.capture("s1", [{"role": "user", "content": "My dog Biscuit is a beagle."},
                           {"role": "user", "content": "He is two."}], extract="background")
    code, out, _ = run_cli(capsys, "--db", db, "flush", "--model", "openai/stub-model")
    assert code == 0 and "nothing pending" not in out
    assert "1 job(s) left pending: another worker is running a job of the same session (s1)" in out
