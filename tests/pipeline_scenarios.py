"""The demo pipeline scenarios of test_pipeline (SQLite), replayed by test_pipeline_postgres on PostgreSQL.

Both modules play the same cassettes (``cassettes/test_pipeline/``), so a
scenario's checks are written once, here; conftest registers this module for
pytest's assert rewriting.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from conftest import FAST_RETRY, ModelEndpoint, call_passed
from tortoise_sdk import Memory, MemoryRecord
from tortoise_sdk.demo import load_demo_sessions

__all__ = (
    "DEMO",
    "capture_demo",
    "later_session_supersedes",
    "memory",
    "repeated_capture_noops",
    "whole_cassette_played",
)

DEMO = {s["session_id"]: s for s in load_demo_sessions()}


def memory(db: Path | str, endpoint: ModelEndpoint, **kwargs: Any) -> Memory:
    """A ``Memory`` (namespace ``t``) calling ``endpoint``: at ``db``, a database URL, or ``m.db`` in a directory."""
    settings = {**({} if endpoint.live else FAST_RETRY), "max_attempts": 2, **kwargs.pop("model_settings", {})}
    where = str(db / "m.db") if isinstance(db, Path) else db
    return Memory(where, namespace="t", model=endpoint.model, api_base=endpoint.api_base,
                  api_key=endpoint.api_key, model_settings=settings, **kwargs)


def capture_demo(mem: Memory, name: str, session_id: str | None = None) -> Any:
    s = DEMO[name]
    return mem.capture(session_id or s["session_id"], s["turns"], session_date=s["date"])


@pytest.fixture(autouse=True)
def whole_cassette_played(vcr: Any, request: pytest.FixtureRequest) -> Any:
    """On replay, every recorded exchange must have been asked for: the pipeline made exactly the recorded calls.

    Checked only after a passing test: a skipped test (no PostgreSQL) played nothing, a failed one says why itself.
    Autouse in the modules that import it.
    """
    yield
    if vcr is not None and vcr.write_protected and call_passed(request):
        assert vcr.play_count == len(vcr.requests), f"played {vcr.play_count} of {len(vcr.requests)} recorded exchanges"


def later_session_supersedes(mem: Memory) -> MemoryRecord:
    """demo-1 then demo-2: Maya's new job supersedes the old one. Returns the new memory."""
    assert capture_demo(mem, "demo-1").extraction.outcomes == {"ADD": 7}
    report = capture_demo(mem, "demo-2").extraction
    assert report.status == "ok"
    assert report.outcomes == {"ADD": 3, "UPDATE": 3}
    old = next(m for m in mem.memories(include_superseded=True) if m.content.startswith("Maya works at Northwind"))
    new = next(m for m in mem.memories() if m.content.startswith("Maya works at Helix"))
    assert (old.status, old.superseded_by, new.supersedes) == ("superseded", new.id, old.id)
    assert old.invalid_at == datetime(2024, 6, 14, 9, 5, tzinfo=timezone.utc)
    assert [m.id for m in mem.store.supersession_chain("t", new.id)] == [old.id, new.id]
    # Leaving Northwind also ends her role there: S4 supersedes it with the new one.
    role = next(m for m in mem.memories(include_superseded=True) if m.content.startswith("Maya is a data engineer"))
    lead = next(m for m in mem.memories() if m.content == "Maya leads the data platform at Helix Health.")
    assert (role.status, role.superseded_by, lead.supersedes) == ("superseded", lead.id, role.id)
    assert len(mem.memories(include_superseded=True)) == 13 and len(mem.memories()) == 10
    g = mem.graph()
    assert g.has_edge(f"memory:{new.id}", f"memory:{old.id}", key="supersedes")
    assert json.loads(mem.receipts("demo-2")[0].model_dump_json())["extraction"]["outcomes"] == {"ADD": 3, "UPDATE": 3}
    return new


def repeated_capture_noops(mem: Memory) -> None:
    """The same turns again, then the same conversation under another id: nothing new is extracted."""
    first = capture_demo(mem, "demo-1", "chat-1").extraction
    assert first.outcomes == {"ADD": 7}
    # The same turns again in the same session: nothing new, no model call.
    again = capture_demo(mem, "demo-1", "chat-1")
    assert (again.turns_stored, again.extraction.status) == (0, "skipped")
    # The same conversation imported again under another id: every fact is already known.
    second = capture_demo(mem, "demo-1", "chat-1-again").extraction
    assert second.status == "ok"
    assert second.outcomes == {"NOOP": 6}
    assert len(mem.memories()) == 7
    dog = next(m for m in mem.memories() if m.content.startswith("Maya has a dog"))
    assert sorted(s.session_id for s in dog.sources) == ["chat-1", "chat-1-again"]
    assert [r.extraction.status for r in mem.receipts()] == ["ok", "skipped", "ok"]
