"""The SQLite pipeline cassettes, replayed with a PostgreSQL store: the same prompts, the same outcomes.

A cassette matches requests by body, and the S4 prompt carries the priors the
store found (search, entity neighbourhood, order). Replaying a SQLite-recorded
cassette against PostgreSQL therefore checks that both engines hand the
pipeline the same priors, then that the writes come out the same.
"""

from __future__ import annotations

import pytest
from conftest import CASSETTES, ModelEndpoint
from pgtemp import require_postgres, temp_database
from pipeline_scenarios import (
    later_session_supersedes,
    memory,
    repeated_capture_noops,
    whole_cassette_played,  # noqa: F401 - autouse: every recorded exchange is played
)

pytestmark = pytest.mark.vcr


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


def test_later_session_supersedes_on_postgres(pg_url: str, model_endpoint: ModelEndpoint) -> None:
    with memory(pg_url, model_endpoint) as mem:
        later_session_supersedes(mem)


def test_repeated_capture_noops_on_postgres(pg_url: str, model_endpoint: ModelEndpoint) -> None:
    with memory(pg_url, model_endpoint) as mem:
        repeated_capture_noops(mem)
