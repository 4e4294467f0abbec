"""The SQLite pipeline cassettes, replayed with a PostgreSQL store: the same prompts, the same outcomes.

A cassette matches requests by body, and the S4 prompt carries the priors the
store found (search, entity neighbourhood, order). Replaying a SQLite-recorded
cassette against PostgreSQL therefore checks that both engines hand the
pipeline the same priors, then that the writes come out the same.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from conftest import CASSETTES, FAST_RETRY, ModelEndpoint
from pgtemp import require_postgres, temp_database

from tortoise_sdk import Memory
from tortoise_sdk.demo import load_demo_sessions

pytestmark = pytest.mark.vcr

DEMO = {s["session_id"]: s for s in load_demo_sessions()}


@pytest.fixture(scope="module")
def vcr_cassette_dir() -> str:
    return str(CASSETTES / "test_pipeline")


@pytest.fixture
def default_cassette_name(request: pytest.FixtureRequest) -> str:
    return request.node.name.removesuffix("_on_postgres")


@pytest.fixture
def pg_url():
    require_postgres()
    with temp_database("tortoise_pipeline") as url:
        yield url


@pytest.fixture(autouse=True)
def _whole_cassette_played(vcr: Any) -> Any:
    yield
    if vcr is not None and vcr.write_protected:
        assert vcr.play_count == len(vcr.requests), f"played {vcr.play_count} of {len(vcr.requests)} recorded exchanges"


def memory(url: str, endpoint: ModelEndpoint) -> Memory:
    settings = {**({} if endpoint.live else FAST_RETRY), "max_attempts": 2}
    return Memory(url, namespace="t", model=endpoint.model, api_base=endpoint.api_base,
                  api_key=endpoint.api_key, model_settings=settings)


def capture_demo(mem: Memory, name: str, session_id: str | None = None) -> Any:
    s = DEMO[name]
    return mem.capture(session_id or s["session_id"], s["turns"], session_date=s["date"])


def test_later_session_supersedes_on_postgres(pg_url: str, model_endpoint: ModelEndpoint) -> None:
    with memory(pg_url, model_endpoint) as mem:
        assert capture_demo(mem, "demo-1").extraction.outcomes == {"ADD": 7}
        report = capture_demo(mem, "demo-2").extraction
        assert (report.status, report.outcomes) == ("ok", {"ADD": 3, "UPDATE": 2})
        old = next(m for m in mem.memories(include_superseded=True) if m.content.startswith("Maya works at Northwind"))
        new = next(m for m in mem.memories() if m.content.startswith("Maya works at Helix"))
        assert (old.status, old.superseded_by, new.supersedes) == ("superseded", new.id, old.id)
        assert old.invalid_at == datetime(2024, 6, 14, 9, 5, tzinfo=timezone.utc)
        assert [m.id for m in mem.store.supersession_chain("t", new.id)] == [old.id, new.id]
        assert len(mem.memories(include_superseded=True)) == 12 and len(mem.memories()) == 10
        g = mem.graph()
        assert g.has_edge(f"memory:{new.id}", f"memory:{old.id}", key="supersedes")
        assert json.loads(mem.receipts("demo-2")[0].model_dump_json())["extraction"]["outcomes"] == {
            "ADD": 3, "UPDATE": 2}


def test_repeated_capture_noops_on_postgres(pg_url: str, model_endpoint: ModelEndpoint) -> None:
    with memory(pg_url, model_endpoint) as mem:
        assert capture_demo(mem, "demo-1", "chat-1").extraction.outcomes == {"ADD": 7}
        again = capture_demo(mem, "demo-1", "chat-1")
        assert (again.turns_stored, again.extraction.status) == (0, "skipped")
        second = capture_demo(mem, "demo-1", "chat-1-again").extraction
        assert (second.status, second.outcomes) == ("ok", {"NOOP": 6})
        assert len(mem.memories()) == 7
        dog = next(m for m in mem.memories() if m.content.startswith("Maya has a dog"))
        assert sorted(s.session_id for s in dog.sources) == ["chat-1", "chat-1-again"]
        assert [r.extraction.status for r in mem.receipts()] == ["ok", "skipped", "ok"]
