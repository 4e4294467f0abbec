"""A new process's first block: what it builds once is built before its time budget starts."""

from __future__ import annotations

import subprocess
import sys

from tortoise_sdk import Memory, MemoryBlock
from tortoise_sdk.reflex import run


def test_a_new_process_warm_up_builds_the_blocks_shapes():
    # The shapes defer their validators to first use (about 5 ms): in a new process (a hook, a CLI
    # call) that fell inside the first block's 50 ms budget.
    code = """if True:
        from tortoise_sdk.models import MemoryBlock, MemoryRecord, Pointer, SearchHit
        from tortoise_sdk.reflex import run
        shapes = (MemoryBlock, Pointer, SearchHit, MemoryRecord)
        assert not any(s.__pydantic_complete__ for s in shapes), "already built at import: nothing to test"
        run._warm_process(object())
        assert all(s.__pydantic_complete__ for s in shapes), [s.__name__ for s in shapes if not s.__pydantic_complete__]
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_warm_up_runs_once_before_the_first_blocks_budget_starts(monkeypatch, tmp_path):
    calls: list[str] = []
    real_warm, real_clock = run._warm_process, run.time.perf_counter
    monkeypatch.setattr(run, "_warmed", False)
    monkeypatch.setattr(run, "_warm_process", lambda store: calls.append("warm") or real_warm(store))
    monkeypatch.setattr(run.time, "perf_counter", lambda: calls.append("clock") or real_clock())
    monkeypatch.setattr(run, "_steps", lambda *a, **k: calls.append("block") or MemoryBlock())
    with Memory(str(tmp_path / "m.db"), namespace="warm") as m:
        m.context("where does Maya work now?")
    # warm, then the clock read that starts the budget, then the block
    assert calls.index("warm") < calls.index("clock", calls.index("warm")) < calls.index("block")
