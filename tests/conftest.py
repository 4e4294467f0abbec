"""Shared fixtures: an isolated environment, VCR cassettes, and the model endpoint cassette tests call.

Cassettes live in ``cassettes/<test_module>/<test_name>.yaml``, each with the
stub script it was recorded from beside it (``<test_name>.script.json``).
Replay (the default, ``record_mode="none"``) needs no server and no network.
``--record-mode=rewrite`` re-records: the ``model_endpoint`` fixture then
starts the stub on :data:`STUB_PORT` with the test's script, or, with
``TORTOISE_LIVE_MODEL`` set, points the test at a real provider. See
``tests/record_cassettes.md``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Before they are imported: their asserts then report values like a test module's.
pytest.register_assert_rewrite("pipeline_scenarios")

from needs import require_shared  # noqa: E402
from stub_model import StubModel  # noqa: E402
from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.cli import main as cli_main  # noqa: E402
from tortoise_sdk.demo import load_demo_sessions  # noqa: E402
from tortoise_sdk.llm import LLMClient, LLMConfig  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CASSETTES = REPO / "cassettes"

STUB_PORT = 8765
STUB_API_BASE = f"http://127.0.0.1:{STUB_PORT}/v1"
STUB_MODEL = "openai/stub-model"
STUB_API_KEY = "sk-stub-not-a-secret"

# Backoff that keeps fault tests fast; live recording keeps the production defaults.
FAST_RETRY: dict[str, Any] = {"backoff_base_s": 0.01, "backoff_max_s": 0.05}

_SECRET_HEADERS = ("authorization", "api-key", "x-api-key", "openai-organization", "openai-project", "cookie")
_SECRET_RESPONSE_HEADERS = ("set-cookie", "openai-organization", "openai-project", "x-request-id", "cf-ray")
_WIRE_HEADERS = ("x-tortoise-stage", "x-tortoise-chunk")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "stub_only: record this cassette from the stub even when TORTOISE_LIVE_MODEL is set (fault scripts)"
    )
    config.addinivalue_line(
        "markers", "shared_data(name): reads ../shared/data/<name>; skipped when absent, failed under CI=true"
    )
    config.addinivalue_line(
        "markers", "reflex_time_budget: Memory.context keeps its 50 ms default budget (tests of the timeout itself)"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("shared_data"):
        require_shared(*mark.args)


_PHASES = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Keep each phase's report on the item, so a fixture's teardown can tell whether its test ran and passed."""
    report = yield
    item.stash.setdefault(_PHASES, {})[report.when] = report
    return report


def call_passed(request: pytest.FixtureRequest) -> bool:
    """Whether the test of this fixture ran and passed (False when it was skipped or failed)."""
    call = request.node.stash.get(_PHASES, {}).get("call")
    return call is not None and call.passed


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Every skip reason once, with how many tests and which files it skipped (so a missing server or data set is loud)."""
    by_reason: dict[str, list[str]] = defaultdict(list)
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        by_reason[reason.removeprefix("Skipped: ")].append(report.nodeid.split("::")[0])
    if not by_reason:
        return
    terminalreporter.section("skipped tests, by reason", sep="-", yellow=True)
    for reason, files in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        terminalreporter.write_line(f"SKIPPED {len(files)}: {reason} [{', '.join(sorted(set(files)))}]", yellow=True)


def pytest_recording_configure(config: pytest.Config, vcr: Any) -> None:
    vcr.register_matcher("tortoise_headers", _match_tortoise_headers)


def _match_tortoise_headers(r1: Any, r2: Any) -> None:
    """Replay only answers a request whose stage and chunk headers equal the recorded ones."""
    for name in _WIRE_HEADERS:
        assert r1.headers.get(name) == r2.headers.get(name), f"{name}: {r1.headers.get(name)} != {r2.headers.get(name)}"


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    headers = response.get("headers") or {}
    for key in list(headers):
        if key.lower() in _SECRET_RESPONSE_HEADERS:
            del headers[key]
    return response


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME and TORTOISE_DB into tmp_path and drop TORTOISE_MODEL, so no test sees the developer's setup."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TORTOISE_DB", str(tmp_path / "memory.db"))
    monkeypatch.delenv("TORTOISE_MODEL", raising=False)
    monkeypatch.delenv("TORTOISE_API_KEY", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return home


@pytest.fixture
def vcr_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """VCR settings: replay only by default, secrets filtered, match on method, uri, body and stage headers."""
    return {
        # pytest-recording lets this key override --record-mode, so mirror the flag.
        "record_mode": request.config.getoption("--record-mode") or "none",
        # The body tells concurrent S1 chunks and the larger-cap retry apart;
        # identical retries replay their recorded responses in order.
        "match_on": ("method", "uri", "body", "tortoise_headers"),
        "filter_headers": list(_SECRET_HEADERS),
        "before_record_response": _scrub_response,
        "decode_compressed_response": True,
    }


@pytest.fixture(scope="module")
def vcr_cassette_dir(request: pytest.FixtureRequest) -> str:
    """Cassettes of tests/test_x.py live in cassettes/test_x/ at the repository top."""
    return str(CASSETTES / request.module.__name__.rsplit(".", 1)[-1])


@dataclass(frozen=True)
class ModelEndpoint:
    """Where a cassette test sends its model calls, and whether they are being recorded.

    Attributes:
        model, api_base, api_key: hand these to ``LLMConfig`` / ``Memory``.
        stub: the running stub while recording from a script, else None.
        recording: the cassette is being written by this run.
        live: the exchange is (being) recorded from a real provider, not the
            stub: replies are a real model's, so assert shapes, not exact text.
        script: the stub script beside the cassette.
    """

    model: str
    api_base: str | None
    api_key: str | None = field(repr=False)
    stub: StubModel | None
    recording: bool
    live: bool
    script: Path

    @property
    def retry_settings(self) -> dict[str, Any]:
        """Backoff for this run: production defaults while calling a real provider, else fast."""
        return {} if (self.live and self.recording) else dict(FAST_RETRY)

    def config(self, **settings: Any) -> LLMConfig:
        """An ``LLMConfig`` for this endpoint (``settings`` override ``retry_settings``)."""
        merged = self.retry_settings | settings
        merged.setdefault("model", self.model)
        return LLMConfig(api_base=self.api_base, api_key=self.api_key, **merged)

    def client(self, **settings: Any) -> LLMClient:
        """An ``LLMClient`` for this endpoint."""
        return LLMClient(self.config(**settings))


@pytest.fixture
def model_endpoint(
    request: pytest.FixtureRequest,
    vcr: Any,
    vcr_cassette_dir: str,
    default_cassette_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[ModelEndpoint]:
    """The model endpoint of a ``@pytest.mark.vcr`` test.

    Replay: the stub's constant address (or the live endpoint the cassette
    was recorded from), no server. Recording: the stub on :data:`STUB_PORT`
    serving ``<cassette>.script.json``, or the live model named by
    ``TORTOISE_LIVE_MODEL`` (``TORTOISE_LIVE_API_BASE``,
    ``TORTOISE_LIVE_API_KEY`` optional) unless the test is ``stub_only``.
    """
    if vcr is None:
        raise pytest.UsageError("model_endpoint needs @pytest.mark.vcr on the test")
    base = Path(vcr_cassette_dir) / default_cassette_name
    script = base.with_name(base.name + ".script.json")
    sidecar = base.with_name(base.name + ".endpoint.json")
    recording = not vcr.write_protected
    live_model = os.environ.get("TORTOISE_LIVE_MODEL")
    live = recording and bool(live_model) and request.node.get_closest_marker("stub_only") is None

    if live:
        api_base = os.environ.get("TORTOISE_LIVE_API_BASE") or None
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        sidecar.write_text(json.dumps({"model": live_model, "api_base": api_base}, indent=2) + "\n", encoding="utf-8")
        yield ModelEndpoint(live_model, api_base, os.environ.get("TORTOISE_LIVE_API_KEY"), None, True, True, script)  # type: ignore[arg-type]
        return

    if recording:
        if not script.exists():
            pytest.fail(f"no stub script to record from: write {script.relative_to(REPO)}")
        sidecar.unlink(missing_ok=True)
        with StubModel(script, port=STUB_PORT) as stub:
            yield ModelEndpoint(STUB_MODEL, STUB_API_BASE, STUB_API_KEY, stub, True, False, script)
        return

    model, api_base = STUB_MODEL, STUB_API_BASE
    if sidecar.exists():
        recorded = json.loads(sidecar.read_text(encoding="utf-8"))
        model, api_base = recorded["model"], recorded.get("api_base")
        # A live cassette's URL came from litellm's default for the provider.
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    yield ModelEndpoint(model, api_base, STUB_API_KEY, None, False, sidecar.exists(), script)


@pytest.fixture
def stub_model() -> Iterator[Any]:
    """Start stubs on free ports, for tests that need a live one (timeouts).

    Mark such tests ``@pytest.mark.block_network(allowed_hosts=["127.0.0.1"])``.
    Usage: ``stub = stub_model([{"content": "hi"}], delay=0.1)``; every stub stops at teardown.
    """
    started: list[StubModel] = []

    def start(script: Any, **kwargs: Any) -> StubModel:
        stub = StubModel(script, **kwargs).start()
        started.append(stub)
        return stub

    yield start
    for stub in started:
        stub.stop()


@pytest.fixture(autouse=True)
def _no_wall_clock_reflex_budget(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Memory.context`` called without ``time_budget_ms`` runs unbudgeted in tests.

    Its 50 ms default is a host's latency bound, not part of what a test checks: on a loaded
    machine a correct block would come back empty with ``degraded_reason="timeout"`` (adapters
    call it with the default). Tests of the budget pass one, or are marked ``reflex_time_budget``;
    performance is measured in ``benchmarks/``.
    """
    if request.node.get_closest_marker("reflex_time_budget") is not None:
        return
    context = Memory.context

    def unbudgeted(self: Memory, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("time_budget_ms", None)
        return context(self, *args, **kwargs)

    monkeypatch.setattr(Memory, "context", unbudgeted)


def capture_demo_sessions(mem: Memory, **kwargs: Any) -> None:
    """Capture every demo session (``tortoise_sdk.demo``) into ``mem`` with its date; ``kwargs`` go to capture."""
    for s in load_demo_sessions():
        mem.capture(s["session_id"], s["turns"], session_date=s["date"], **kwargs)


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    """A SQLite ``Memory`` in tmp_path, namespace ``maya``, holding the demo sessions (no model: turns only)."""
    with Memory(str(tmp_path / "m.db"), namespace="maya") as m:
        capture_demo_sessions(m)
        yield m


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A fresh SQLite path for CLI tests (``--db``)."""
    return str(tmp_path / "cli.db")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``tortoise *argv`` in-process: (exit code, stdout, stderr)."""
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A throwaway PostgreSQL database for the module (skipped, or failed in CI, without a server)."""
    from pgtemp import require_postgres, temp_database

    require_postgres()
    with temp_database(f"tortoise_{request.module.__name__.removeprefix('test_')}") as url:
        yield url


@pytest.fixture(params=("sqlite", "postgres"))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store on each engine (PostgreSQL: the module's ``pg_url``); a module may define its own ``store``."""
    from tortoise_sdk.store import open_store

    url = str(tmp_path / "store.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = open_store(url)
    yield s
    s.close()
