"""``tortoise serve`` through FastAPI's test client: every route's success, auth failure, another
namespace's token, bad input and oversize input; escaping in the inspector; the bind check."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="the server extra is not installed (pip install -e '.[dev]' installs it)")

from fastapi.testclient import TestClient  # noqa: E402

from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.adapters.serve import ServeSettings, TokenGrant, build_app, check_bind, parse_tokens  # noqa: E402
from tortoise_sdk.cli import main as cli_main  # noqa: E402
from tortoise_sdk.errors import ConfigError  # noqa: E402

ADMIN = "admin-token-0123456789"  # every namespace
DEMO = "demo-token-0123456789"  # bound to namespace demo
BOB = "bob-token-01234567890"  # bound to namespace bob
TOKENS = [ADMIN, f"{DEMO}:demo", f"{BOB}:bob"]
NS = "/v1/ns/demo"


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo sessions, extracted from recorded replies (`tortoise demo`): turns and memories, one supersession."""
    path = tmp_path_factory.mktemp("serve") / "demo.db"
    assert cli_main(["--db", str(path), "demo"]) == 0
    return path


@pytest.fixture
def db(demo_db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "m.db"
    shutil.copy(demo_db, copy)
    return copy


def client(db: Path, tokens: list[str] | None = None, **settings: Any) -> TestClient:
    app = build_app(ServeSettings(db=str(db), namespaces=["demo"], tokens=parse_tokens(tokens or []), **settings))
    return TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)


@pytest.fixture
def api(db: Path) -> TestClient:
    with client(db, TOKENS) as c:
        yield c


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def first_memory(db: Path) -> str:
    with Memory(str(db), namespace="demo") as mem:
        return next(m.id for m in mem.memories() if m.status == "live")


#: One successful call per route: (method, path, keyword arguments of the request).
ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/capture", {"json": {"session_id": "s-new", "turns": [{"role": "user", "content": "I adopted a cat "
                                                                      "named Pixel", "id": "p1"}]}}),
    ("POST", "/search", {"json": {"query": "Northwind", "k": 3}}),
    ("POST", "/context", {"json": {"query": "where does Maya work now?"}}),
    ("GET", "/expand", {"params": {"pointer_id": "MEMORY"}}),
    ("GET", "/memories", {"params": {"include_superseded": "true"}}),
    ("GET", "/sessions", {}),
    ("GET", "/turns", {"params": {"session_id": "demo-1"}}),
    ("DELETE", "/sessions", {"params": {"session_id": "demo-2"}}),
    ("DELETE", "/memories", {"params": {"memory_id": "MEMORY"}}),
    ("GET", "/tombstones", {}),
    ("GET", "/subagents", {}),
    ("GET", "/subagents/health", {"params": {"since": "2020-01-01T00:00:00Z"}}),
    ("GET", "/stats", {}),
    ("POST", "/flush", {"json": {}}),
    ("GET", "/jobs", {"params": {"status": "failed", "session_id": "demo-1"}}),
    ("POST", "/jobs/retry-failed", {"json": {"session_id": "demo-1"}}),
]
IDS = [f"{m} {p}" for m, p, _ in ROUTES]


def call(c: TestClient, method: str, path: str, kwargs: dict[str, Any], db: Path, ns: str = NS,
         headers: dict[str, str] | None = None) -> Any:
    if "params" in kwargs and "MEMORY" in kwargs["params"].values():
        kwargs = {**kwargs, "params": {k: first_memory(db) if v == "MEMORY" else v
                                       for k, v in kwargs["params"].items()}}
    return c.request(method, ns + path, headers=headers, **kwargs)


@pytest.mark.parametrize(("method", "path", "kwargs"), ROUTES, ids=IDS)
def test_every_route_answers_with_its_model(api: TestClient, db: Path, method: str, path: str,
                                            kwargs: dict[str, Any]) -> None:
    for token in (ADMIN, DEMO):
        answer = call(api, method, path, kwargs, db, headers=auth(token))
        if path == "/flush":  # no model configured: a 400 that says how to give the server one
            assert answer.status_code == 400, answer.text
            assert answer.json() == {"error": "ConfigError", "field": "model", "message": (
                "no model configured on this server: start it with `tortoise serve --model MODEL` "
                "(e.g. --model openai/gpt-4o-mini) or set TORTOISE_MODEL")}
            continue
        assert answer.status_code == 200, answer.text
        doc = answer.json()
        if path == "/capture":
            assert doc["session_id"] == "s-new" and doc["turns_received"] == 1
        elif path == "/search":
            assert doc["hits"] and "Northwind" in doc["hits"][0]["content"]
        elif path == "/context":
            assert "Helix Health" in doc["block"] and len(doc["why"]) == len(doc["pointers"]) > 0
        elif path == "/stats":
            assert doc["namespace"] == "demo" and doc["sessions"] >= 1
            # what `tortoise stats` prints: the demo's extracted memories and people are counted
            assert doc["memories"] > 0 and doc["entities"] > 0 and isinstance(doc["jobs"], dict)
        elif path == "/subagents/health":
            assert doc["ok"] is True
        elif method == "DELETE" and token == ADMIN:
            assert doc["tombstone_id"] and doc["total"] > 0
        elif path in ("/tombstones", "/jobs", "/jobs/retry-failed"):
            assert isinstance(doc, list)


@pytest.mark.parametrize(("method", "path", "kwargs"), ROUTES, ids=IDS)
def test_every_route_needs_a_token_and_refuses_another_namespaces(api: TestClient, db: Path, method: str,
                                                                   path: str, kwargs: dict[str, Any]) -> None:
    for headers in (None, auth("not-a-token-of-this-server"), {"Authorization": "Basic xyz"}):
        answer = call(api, method, path, kwargs, db, headers=headers)
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["error"] == "Denied"
    answer = call(api, method, path, kwargs, db, headers=auth(BOB))
    assert answer.status_code == 403
    assert answer.json()["message"] == "this token is bound to namespace 'bob', not 'demo'"
    # Nothing was done on the refused calls: demo still holds both sessions and every memory.
    with Memory(str(db), namespace="demo") as mem:
        assert {s.session_id for s in mem.sessions()} == {"demo-1", "demo-2"}
        assert mem.tombstones() == []


#: A bad request per route, and the one-line message it gets.
BAD: list[tuple[str, str, dict[str, Any], str]] = [
    ("POST", "/capture", {"json": {"session_id": "s", "turns": [{"role": "robot", "content": "x"}]}},
     "turns[0].role: Input should be 'user', 'assistant', 'system' or 'tool'"),
    ("POST", "/capture", {"json": {"session_id": " ", "turns": [{"role": "user", "content": "x"}]}},
     "session_id: "),
    ("POST", "/search", {"json": {"query": "x", "k": 101}}, "k: Input should be less than or equal to 100"),
    ("POST", "/search", {"json": {"query": "x", "k": "5"}}, "k: Input should be a valid integer"),
    ("POST", "/context", {"json": {"query": "x", "budget": 9}}, "budget: Input should be less than or equal to 8"),
    ("POST", "/context", {"json": {"query": "x", "max_tokens": 0}}, "max_tokens: Input should be greater than"),
    ("POST", "/context", {"content": b"{not json", "headers": {"content-type": "application/json"}},
     "the body is not valid JSON (JSON decode error): send one JSON object"),
    # curl -d sends a form: the message named no field and said nothing of the content type
    ("POST", "/context", {"content": b"query=hello", "headers": {"content-type": "application/x-www-form-urlencoded"}},
     "send the body as JSON with Content-Type: application/json"),
    ("GET", "/expand", {"params": {"pointer_id": "m_nope"}}, "m_nope"),
    ("GET", "/expand", {}, "pointer_id: Field required"),
    ("GET", "/memories", {"params": {"include_superseded": "perhaps"}}, "include_superseded: Input should be a "
                                                                        "valid boolean"),
    ("GET", "/turns", {}, "session_id: Field required"),
    ("DELETE", "/sessions", {"params": {"session_id": ""}}, "session_id: String should have at least 1 character"),
    ("DELETE", "/memories", {}, "memory_id: Field required"),
    ("GET", "/tombstones", {"params": {"session_id": "a", "memory_id": "b"}},
     "memory_id: pass session_id or memory_id, not both"),
    ("GET", "/subagents/health", {"params": {"since": "yesterday-ish"}}, "since: Input should be a valid datetime"),
    ("POST", "/flush", {"json": {"session_id": 5}}, "session_id: Input should be a valid string"),
    ("POST", "/flush", {"json": {"everything": True}}, "everything: Extra inputs are not permitted"),
    ("GET", "/jobs", {"params": {"status": "stuck"}}, "status='stuck': use 'pending', 'running', 'done' or 'failed'"),
    ("GET", "/jobs", {"params": {"session_id": ""}}, "session_id: String should have at least 1 character"),
    ("POST", "/jobs/retry-failed", {"json": {"session_id": 5}}, "session_id: Input should be a valid string"),
    ("POST", "/jobs/retry-failed", {"json": {"session_id": "y" * 600}}, "is 600 bytes long; an id is at most"),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "message"), BAD, ids=[f"{m} {p} {msg[:20]}" for m, p, _, msg
                                                                            in BAD])
def test_bad_input_is_a_4xx_with_one_line(api: TestClient, method: str, path: str, kwargs: dict[str, Any],
                                          message: str) -> None:
    kwargs = dict(kwargs)
    headers = {**auth(ADMIN), **kwargs.pop("headers", {})}
    answer = api.request(method, NS + path, headers=headers, **kwargs)
    assert 400 <= answer.status_code < 500, answer.text
    doc = answer.json()
    assert set(doc) == {"error", "message", "field"}
    assert message in doc["message"] and "\n" not in doc["message"] and "Traceback" not in answer.text
    if path == "/expand" and "m_nope" in message:
        assert answer.status_code == 404 and doc["error"] == "NotFoundError"


def test_capture_conflicts_are_409_with_the_sdks_message(api: TestClient) -> None:
    body = {"session_id": "s", "turns": [{"role": "user", "content": "one", "id": "x"}], "idempotency_key": "k1"}
    assert api.post(f"{NS}/capture", json=body, headers=auth(ADMIN)).status_code == 200
    changed = {**body, "turns": [{"role": "user", "content": "two", "id": "x2"}]}
    answer = api.post(f"{NS}/capture", json=changed, headers=auth(ADMIN))
    assert answer.status_code == 409
    assert answer.json()["message"].startswith("idempotency key 'k1' was already used for a different capture")


@pytest.mark.parametrize(("method", "path", "kwargs"), ROUTES, ids=IDS)
def test_oversize_input_is_refused(db: Path, method: str, path: str, kwargs: dict[str, Any]) -> None:
    with client(db, TOKENS, max_body_bytes=2048) as c:
        huge = "x" * 4096
        # A body over the limit: 413 before any route runs, whether its length is declared or not.
        answer = c.request(method, NS + path, headers=auth(ADMIN), json={"query": huge})
        assert answer.status_code == 413
        assert answer.json()["message"].startswith("the request body is over 2048 bytes")
        chunked = c.request(method, NS + path, headers=auth(ADMIN), content=iter([b'{"query": "', huge.encode(),
                                                                                 b'"}']))
        assert chunked.status_code == 413
        # An id longer than any the store keeps.
        ids = [k for k in kwargs.get("params", {}) if k.endswith("_id")]
        for name in ids:
            answer = c.request(method, NS + path, headers=auth(ADMIN), params={name: "y" * 600})
            assert answer.status_code == 400, answer.text
            assert answer.json()["message"] == f"{name}: String should have at most 512 characters"
        # A search term, a prompt or a turn over its size.
        if method == "POST" and path not in ("/flush", "/jobs/retry-failed"):
            limits = {"/capture": {"session_id": "y" * 600, "turns": []}, "/search": {"query": "y" * 10_001},
                      "/context": {"query": "y" * 10_001}}
            with client(db, TOKENS) as roomy:
                answer = roomy.post(NS + path, headers=auth(ADMIN), json=limits[path])
            assert answer.status_code == 400, answer.text


def test_a_capture_appends_and_context_finds_it(api: TestClient) -> None:
    h = auth(DEMO)
    first = {"session_id": "pets", "turns": [{"role": "user", "content": "My cat Pixel hates the vacuum", "id": "1"}]}
    assert api.post(f"{NS}/capture", json=first, headers=h).json()["turns_stored"] == 1
    more = {"session_id": "pets", "turns": [*first["turns"], {"role": "assistant", "content": "Poor Pixel!",
                                                              "id": "2"}]}
    again = api.post(f"{NS}/capture", json=more, headers=h).json()
    assert again["turns_stored"] == 1 and again["extraction"]["status"] == "skipped"
    # the reason is in the server's terms: its user starts it with --model, there is no Memory(model=...) to set
    assert again["extraction"]["reason"].startswith("no model configured on this server: start it with `tortoise serve")
    assert [t["content"] for t in api.get(f"{NS}/turns", params={"session_id": "pets"}, headers=h).json()] == [
        "My cat Pixel hates the vacuum", "Poor Pixel!"]
    block = api.post(f"{NS}/context", json={"query": "what does Pixel hate?", "budget": 2}, headers=h).json()
    assert "vacuum" in block["block"] and len(block["pointers"]) <= 2


def test_a_namespace_bound_token_reaches_only_its_own(api: TestClient) -> None:
    body = {"session_id": "b", "turns": [{"role": "user", "content": "Bob's secret: the safe code is 4711"}]}
    assert api.post("/v1/ns/bob/capture", json=body, headers=auth(BOB)).status_code == 200
    assert api.post("/v1/ns/demo/search", json={"query": "safe code"}, headers=auth(BOB)).status_code == 403
    assert api.post("/v1/ns/bob/search", json={"query": "safe code"}, headers=auth(DEMO)).status_code == 403
    hits = api.post("/v1/ns/bob/search", json={"query": "safe code"}, headers=auth(ADMIN)).json()["hits"]
    assert [h["session_id"] for h in hits] == ["b"]
    assert api.post("/v1/ns/demo/search", json={"query": "safe code"}, headers=auth(ADMIN)).json()["hits"] == []
    # The inspector lists only the token's namespace.
    page = api.get("/", headers=auth(BOB)).text
    assert "/ns/bob" in page and "/ns/demo" not in page


def test_health_and_openapi_need_no_token_and_the_schemas_are_the_sdks_models(api: TestClient) -> None:
    assert api.get("/health").json()["status"] == "ok"
    schema = api.get("/openapi.json").json()
    assert {"/v1/ns/{namespace}/capture", "/v1/ns/{namespace}/context", "/v1/ns/{namespace}/search",
            "/v1/ns/{namespace}/expand", "/v1/ns/{namespace}/memories", "/v1/ns/{namespace}/sessions",
            "/v1/ns/{namespace}/subagents/health", "/v1/ns/{namespace}/stats", "/v1/ns/{namespace}/flush",
            "/v1/ns/{namespace}/tombstones", "/v1/ns/{namespace}/turns", "/v1/ns/{namespace}/jobs",
            "/v1/ns/{namespace}/jobs/retry-failed", "/health"} <= set(schema["paths"])
    models = set(schema["components"]["schemas"])
    assert {"MemoryBlock", "CaptureReceipt", "ForgetReport", "Turn", "ErrorBody"} <= models
    assert schema["components"]["schemas"]["Turn"]["properties"]["role"]["enum"] == ["user", "assistant", "system",
                                                                                    "tool"]


def test_loopback_without_tokens_needs_none_but_checks_the_host_header(db: Path) -> None:
    with client(db) as c:
        assert c.post(f"{NS}/search", json={"query": "Northwind"}).status_code == 200
        # DNS rebinding: a page of evil.example resolving to 127.0.0.1 sends its own Host.
        refused = c.get(f"{NS}/sessions", headers={"Host": "evil.example"})
        assert refused.status_code == 400
        # Reviewer: the answer was Starlette's plain text "Invalid host header", not the API's JSON error.
        body = refused.json()
        assert (body["error"], body["field"]) == ("InvalidInput", "Host") and "DNS rebinding" in body["message"]
        for host in ("127.0.0.1:8765", "localhost", "[::1]:8765", "LOCALHOST:1"):
            assert c.get(f"{NS}/sessions", headers={"Host": host}).status_code == 200, host


def test_the_cookie_counts_only_for_pages_and_the_inspectors_own_calls(api: TestClient) -> None:
    login = api.post("/login", content=f"token={DEMO}&next=/ns/demo",
                     headers={"content-type": "application/x-www-form-urlencoded"}, follow_redirects=False)
    assert login.status_code == 303 and login.headers["location"] == "/ns/demo"
    cookie = login.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert api.get("/ns/demo").status_code == 200  # the cookie, on a page
    assert api.get(f"{NS}/sessions").status_code == 401  # the cookie alone, on the API: a cross-site request
    assert api.get(f"{NS}/sessions", headers={"X-Tortoise-Inspector": "1"}).status_code == 200
    api.cookies.clear()
    assert api.get("/ns/demo", follow_redirects=False).status_code == 303  # to the login form
    bad = api.post("/login", content="token=wrong&next=//evil.example/",
                   headers={"content-type": "application/x-www-form-urlencoded"}, follow_redirects=False)
    assert bad.status_code == 401


def test_stored_text_is_escaped_on_every_page(api: TestClient) -> None:
    hostile = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    body = {"session_id": '"><script>alert(2)</script>',
            "turns": [{"role": "user", "content": hostile, "name": hostile}]}
    assert api.post(f"{NS}/capture", json=body, headers=auth(ADMIN)).status_code == 200
    pages = [api.get("/ns/demo", params={"q": "script alert"}, headers=auth(ADMIN)),
             api.get("/ns/demo/session", params={"id": body["session_id"]}, headers=auth(ADMIN)),
             api.get("/ns/demo/try", params={"prompt": "alert script img"}, headers=auth(ADMIN)),
             api.get("/ns/demo", headers=auth(ADMIN))]
    for page in pages:
        assert page.status_code == 200
        assert "<script>alert" not in page.text and "<img src=x" not in page.text
        assert '"><script>' not in page.text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in pages[1].text


def test_inspector_pages_render(api: TestClient, db: Path) -> None:
    h = auth(ADMIN)
    assert "demo-1" in api.get("/ns/demo", headers=h).text
    session = api.get("/ns/demo/session", params={"id": "demo-1"}, headers=h).text
    assert "Northwind Labs" in session and 'data-forget="session"' in session and "source turn" in session
    memories = api.get("/ns/demo/memories", headers=h).text
    assert "superseded" in memories and "replaced by" in memories
    tried = api.get("/ns/demo/try", params={"prompt": "where does Maya work now?"}, headers=h).text
    assert "why:" in tried and "Helix Health" in tried
    assert "Health: ok" in api.get("/ns/demo/subagents", headers=h).text
    entity = api.get("/ns/demo/entity", params={"name": "biscuit"}, headers=h).text  # the graph neighbourhood
    assert "Biscuit howls when Maya leaves for work at 7." in entity and "entity?name=Maya" in entity
    assert api.get("/ns/demo/entity", params={"name": "Nobody"}, headers=h).status_code == 404
    assert api.get("/ns/demo/expand", params={"id": first_memory(db)}, headers=h).status_code == 200
    assert api.get("/ns/demo/session", params={"id": "nope"}, headers=h).status_code == 404
    assert api.get("/ns/bob/session", params={"id": "x"}, headers=auth(DEMO)).status_code == 403


def fail_a_job(db: Path, session_id: str = "q") -> str:
    """A background capture whose job fails for good (one attempt allowed), with markup in its error."""
    from tortoise_sdk.store.plan import Fence

    with Memory(str(db), namespace="demo", model="openai/stub-model") as mem:
        mem.capture(session_id, [{"role": "user", "content": "I adopted a cat named Pixel"},
                                 {"role": "assistant", "content": "Congratulations!"}], extract="background")
        job = mem.store.lease_job("demo", lease_s=30, max_attempts=1, session_id=session_id, due_only=False)
        mem.store.fail_job(Fence(job.job_id, job.revision), "s1: <b>AuthenticationError</b>: bad key",
                           max_attempts=1)
        return job.job_id


def test_a_failed_job_is_listed_and_queued_again_without_a_model(api: TestClient, db: Path) -> None:
    job_id = fail_a_job(db)
    h = auth(DEMO)
    failed = api.get(f"{NS}/jobs", params={"status": "failed"}, headers=h).json()
    assert [(j["job_id"], j["session_id"], j["attempts"], j["turns"], j["last_error"]) for j in failed] == [
        (job_id, "q", 1, [0, 1], "attempt 1: s1: <b>AuthenticationError</b>: bad key")]
    assert api.get(f"{NS}/jobs", params={"session_id": "demo-1"}, headers=h).json() == []
    assert api.get("/v1/ns/bob/jobs", headers=h).status_code == 403
    assert api.post("/v1/ns/bob/jobs/retry-failed", json={}, headers=h).status_code == 403
    # Another session's retry queues nothing; the server has no model, and queueing needs none.
    assert api.post(f"{NS}/jobs/retry-failed", json={"session_id": "demo-1"}, headers=h).json() == []
    queued = api.post(f"{NS}/jobs/retry-failed", json={"session_id": "q"}, headers=h).json()
    assert [(j["job_id"], j["status"], j["attempts"], j["turns"], j["due_at"]) for j in queued] == [
        (job_id, "pending", 0, [0, 1], None)]
    assert api.get(f"{NS}/jobs", params={"status": "failed"}, headers=h).json() == []
    assert [j["job_id"] for j in api.get(f"{NS}/jobs", params={"status": "pending"}, headers=h).json()] == [job_id]


def test_the_jobs_page_shows_failures_with_a_retry_button(api: TestClient, db: Path) -> None:
    h = auth(ADMIN)
    assert "No job." in api.get("/ns/demo/jobs", headers=h).text
    fail_a_job(db)
    page = api.get("/ns/demo/jobs", headers=h).text
    assert "data-retry=\"session\" data-id='\"q\"'" in page and "&lt;b&gt;AuthenticationError&lt;/b&gt;" in page and "<b>Auth" not in page
    assert "0–1" in page  # the turns the job covers
    assert 'href="/ns/demo/jobs"' in api.get("/ns/demo", headers=h).text  # in the navigation
    assert "data-retry" not in api.get("/ns/demo/jobs", params={"status": "done"}, headers=h).text
    assert api.get("/ns/demo/jobs", params={"status": "stuck"}, headers=h).status_code == 400
    assert api.get("/ns/demo/jobs", headers=auth(BOB)).status_code == 403
    api.post(f"{NS}/jobs/retry-failed", json={}, headers=h)
    assert "data-retry" not in api.get("/ns/demo/jobs", headers=h).text


def test_an_unexpected_failure_is_a_500_without_a_traceback(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Memory, "sessions", lambda self: 1 / 0)
    with client(db) as c:
        answer = c.get(f"{NS}/sessions")
    assert answer.status_code == 500
    assert answer.json() == {"error": "InternalError", "field": None,
                             "message": "the server failed on this request; its log has the details"}


def test_requests_share_one_memory_per_namespace_on_one_store(db: Path) -> None:
    opened: list[dict[str, Any]] = []

    def factory(**kwargs: Any) -> Memory:
        opened.append(kwargs)
        return Memory(**kwargs)

    app = build_app(ServeSettings(db=str(db)), memory_factory=factory)
    with TestClient(app, base_url="http://127.0.0.1:8765") as c:
        for _ in range(3):
            assert c.get(f"{NS}/sessions").status_code == 200
            assert c.get("/v1/ns/other/sessions").status_code == 200
    assert [k["namespace"] for k in opened] == ["demo", "other"]
    assert "db" in opened[0] and "store" in opened[1]  # the second namespace reuses the first's store


def test_serve_refuses_a_public_bind_without_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["serve", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tortoise: --host 0.0.0.0 is reachable from other machines")
    assert cli_main(["serve", "--host", "0.0.0.0", "--token", "short"]) == 2
    assert "at least 16 characters" in capsys.readouterr().err
    with pytest.raises(ConfigError):
        check_bind("192.168.1.5", [])
    for host in ("127.0.0.1", "localhost", "::1", "127.8.0.1"):
        check_bind(host, [])
    check_bind("0.0.0.0", parse_tokens([ADMIN]))
    assert parse_tokens([f"{DEMO}:demo"])[0].namespace == "demo"


def test_serve_on_a_busy_port_says_so_in_one_line_with_exit_2(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    """Reviewer: a port in use gave uvicorn's log line and exit 3, which the CLI keeps for "turns stored, extraction
    failed"; the message did not name --port."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli_main(["--db", str(tmp_path / "m.db"), "serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in err and "with --port" in err


def test_serve_without_uvicorn_names_the_extra(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """FastAPI alone is not enough to serve: the missing uvicorn is named with the install command, as fastapi is."""
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    assert cli_main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install" in err and "[server]" in err and "uvicorn" in err


def test_concurrent_requests_share_the_namespaces_memory(db: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def work(i: int) -> list[int]:
        turns = [{"role": "user", "content": f"thread {i} says the parrot Kiwi{i} likes grapes", "id": f"{i}-{n}"}
                 for n in range(3)]
        return [c.post(f"{NS}/capture", json={"session_id": f"c{i}", "turns": turns}).status_code,
                c.post(f"{NS}/context", json={"query": f"what does Kiwi{i} like?"}).status_code,
                c.post(f"{NS}/search", json={"query": "parrot grapes", "k": 5}).status_code]

    with client(db) as c, ThreadPoolExecutor(8) as pool:
        statuses = [s for r in pool.map(work, range(16)) for s in r]
    assert statuses == [200] * 48
    with Memory(str(db), namespace="demo") as mem:
        counts = {s.session_id: s.turn_count for s in mem.sessions()}
    assert {f"c{i}": 3 for i in range(16)}.items() <= counts.items()


@pytest.mark.block_network(allowed_hosts=["127.0.0.1"])
def test_tortoise_serve_runs_with_tokens_from_the_environment(db: Path) -> None:
    import os
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "TORTOISE_SERVE_TOKENS": f"{DEMO}:demo, {ADMIN}"}
    proc = subprocess.Popen([sys.executable, "-m", "tortoise_sdk.cli", "serve", "--db", str(db), "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"{url}/health", timeout=2).json()["status"] == "ok"
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
                time.sleep(0.2)
        assert httpx.get(f"{url}{NS}/sessions").status_code == 401
        found = httpx.get(f"{url}{NS}/sessions", headers=auth(DEMO)).json()
        assert {s["session_id"] for s in found} == {"demo-1", "demo-2"}
        assert httpx.get(f"{url}/v1/ns/other/sessions", headers=auth(DEMO)).status_code == 403
        assert httpx.get(f"{url}/v1/ns/other/sessions", headers=auth(ADMIN)).json() == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)


PRINTABLE = ("Cs", "Zs", "Zl", "Zp", "Cc")  # no surrogates, spaces or controls: a spec is stripped


@given(secret=st.text(st.characters(blacklist_characters=":,", blacklist_categories=PRINTABLE), min_size=16,
                      max_size=40),
       namespace=st.one_of(st.none(), st.text(st.characters(blacklist_characters=",", blacklist_categories=PRINTABLE),
                                              min_size=1)))
def test_a_token_spec_parses_to_its_secret_and_namespace(secret: str, namespace: str | None) -> None:
    spec = secret if namespace is None else f"{secret}:{namespace}"
    assert parse_tokens([spec]) == [TokenGrant(secret, namespace)]
    with pytest.raises(ConfigError):
        parse_tokens([secret[:15]])
    with pytest.raises(ConfigError):
        parse_tokens([f"{secret}:"])


def test_errors_speak_the_apis_terms_not_pythons(db: Path) -> None:
    """Reviewer: `"extract": true` was told `extract.literal['background']: Input should be 'background'`; an empty
    body `Field required` with no field; a path namespace `e.g. Memory(namespace='alice')`; a bad pointer id
    `MemoryBlock.pointers, search() or memories()`; 5,001 turns `raise max_turns_per_capture`."""
    with client(db) as c:
        said = {}
        said["extract"] = c.post(f"{NS}/capture", json={"session_id": "s", "turns": [{"role": "user", "content": "x"}],
                                                        "extract": True}).json()
        said["empty"] = c.post(f"{NS}/capture", content=b"", headers={"content-type": "application/json"}).json()
        said["array"] = c.post(f"{NS}/capture", json=[]).json()
        said["namespace"] = c.get("/v1/ns/%20/stats").json()
        said["pointer"] = c.get(f"{NS}/expand", params={"pointer_id": "nope"}).json()
        said["many"] = c.post(f"{NS}/capture", json={"session_id": "big", "turns": [
            {"role": "user", "content": "x"}] * 5001}).json()
    assert said["extract"] == {"error": "InvalidInput", "field": "extract",
                               "message": "extract: Input should be 'background' or false"}
    assert said["empty"]["field"] == said["array"]["field"] == "body"
    assert said["empty"]["message"].startswith(f"the body must be one JSON object, with the fields {NS}/capture takes")
    assert "/v1/ns/alice/" in said["namespace"]["message"]
    assert "POST .../context" in said["pointer"]["message"]
    assert said["many"]["message"].endswith("split the capture into several requests")
    for body in said.values():
        assert not re.search(r"Memory\(|MemoryBlock|max_turns_per_capture|literal\[|\(\)", body["message"]), body


def test_the_index_lists_configured_namespaces_and_those_with_data_not_visited_names(api: TestClient) -> None:
    """Reviewer: every name typed into a URL was listed (the namespaces opened since start), not those holding data."""
    h = auth(ADMIN)
    body = {"session_id": "b", "turns": [{"role": "user", "content": "hello"}]}
    assert api.post("/v1/ns/bob/capture", json=body, headers=h).status_code == 200
    assert api.get("/ns/typo-visited", headers=h).status_code == 200
    assert api.get("/v1/ns/typo-api/sessions", headers=h).status_code == 200
    listed = re.findall(r'<li><a href="/ns/([^"]+)">', api.get("/", headers=h).text)
    assert listed == ["demo", "bob"]  # configured first, then the namespaces holding data
    assert re.findall(r'<li><a href="/ns/([^"]+)">', api.get("/", headers=auth(BOB)).text) == ["bob"]


def test_the_login_keeps_the_query_string_and_redirects_only_to_local_paths(api: TestClient) -> None:
    """Reviewer: the login redirect kept only the path, so /ns/demo/session?id=demo-1 lost its id."""
    from urllib.parse import parse_qs, urlsplit

    away = api.get("/ns/demo/session", params={"id": "demo-1&x", "more": "a b"}, follow_redirects=False)
    assert away.status_code == 303
    target = parse_qs(urlsplit(away.headers["location"]).query)["next"]
    assert target == ["/ns/demo/session?id=demo-1%26x&more=a+b"]
    form = api.get("/login", params={"next": target[0]}).text
    assert 'value="/ns/demo/session?id=demo-1%26x&amp;more=a+b"' in form
    login = api.post("/login", data={"token": DEMO, "next": target[0]}, follow_redirects=False)
    assert login.status_code == 303 and login.headers["location"] == target[0]
    page = api.get(login.headers["location"])  # the page asked for, with its parameters
    assert page.status_code == 404 and "no session &#39;demo-1&amp;x&#39;" in page.text
    for elsewhere in ("//evil.example/", "/\\evil.example/", "/\t/evil.example/", "https://evil.example/",
                      "evil.example"):
        answer = api.post("/login", data={"token": DEMO, "next": elsewhere}, follow_redirects=False)
        assert answer.headers["location"] == "/", elsewhere
        assert 'name="next" value="/"' in api.get("/login", params={"next": elsewhere}).text


def test_inspector_pages_answer_bad_parameters_with_the_html_error_page(api: TestClient) -> None:
    """Reviewer: a missing or invalid query parameter of a page got the JSON API's error body."""
    h = auth(ADMIN)
    for path, params, status, said in (("/ns/demo/session", {}, 400, "id: Field required"),
                                       ("/ns/demo/try", {"prompt": "x", "budget": "many"}, 400,
                                        "budget: Input should be a valid integer"),
                                       ("/ns/demo/memories", {"superseded": "perhaps"}, 400, "superseded: "),
                                       ("/ns/demo", {"page": "last"}, 400, "page: Input should be a valid integer"),
                                       ("/ns/demo/session", {"id": "nope"}, 404, "no session &#39;nope&#39;")):
        answer = api.get(path, params=params, headers=h)
        assert answer.status_code == status, path
        assert answer.headers["content-type"].startswith("text/html") and "<!doctype html>" in answer.text.lower()
        assert said in answer.text and "Back to the namespaces" in answer.text
    # The JSON API still answers JSON.
    assert api.get(f"{NS}/turns", headers=h).json()["message"] == "session_id: Field required"


def test_the_namespace_page_pages_through_the_sessions(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reviewer: the page showed the 200 most recent sessions and no way to the others."""
    from tortoise_sdk.adapters.serve import inspector

    monkeypatch.setattr(inspector, "SESSIONS_PER_PAGE", 1)
    h = auth(ADMIN)
    shown = []
    for page in (1, 2):
        text = api.get("/ns/demo", params={"page": page}, headers=h).text
        table = text[text.index('<table id="sessions">'):]
        shown += re.findall(r'session\?id=([\w-]+)"', table)
        assert "2 session(s)" in text and f"page {page} of 2" in text
        assert ('href="/ns/demo?page=2"' in text) is (page == 1)  # next
        assert ('href="/ns/demo?page=1"' in text) is (page == 2)  # previous
    assert sorted(shown) == ["demo-1", "demo-2"]
    assert "No session on this page" in api.get("/ns/demo", params={"page": 3}, headers=h).text
    assert api.get("/ns/demo", params={"page": 0}, headers=h).status_code == 400
    searched = api.get("/ns/demo", params={"q": "Northwind"}, headers=h).text
    assert 'href="/ns/demo?q=Northwind&amp;page=2"' in searched  # the search is kept


def test_openapi_documents_the_statuses_the_server_answers(api: TestClient) -> None:
    """Reviewer: the schema listed 422 for bad input, which the server answers with 400, and no 409 on capture."""
    schema = api.get("/openapi.json").json()
    error = {"$ref": "#/components/schemas/ErrorBody"}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert "422" not in operation["responses"], (method, path)
            if path.startswith("/v1/"):
                assert operation["responses"]["400"]["content"]["application/json"]["schema"] == error, path
    capture = schema["paths"]["/v1/ns/{namespace}/capture"]["post"]["responses"]
    assert capture["409"]["content"]["application/json"]["schema"] == error
    assert "idempotency key" in capture["409"]["description"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    assert api.post(f"{NS}/search", json={"k": 0}, headers=auth(ADMIN)).status_code == 400
    # every route that writes documents the 409 of a read-only store (the Claude Code hook's did not)
    writes = [(p, m) for p, ops in schema["paths"].items() for m in ops if m == "delete" or p.endswith(
        ("/capture", "/retry-failed", "/flush", "/hooks/claude-code"))]
    assert len(writes) == 6 and all("409" in schema["paths"][p][m]["responses"] for p, m in writes), writes


def test_a_namespace_with_a_slash_is_reachable_over_http(api: TestClient, db: Path) -> None:
    """Reviewer: /v1/ns/a%2Fb/... was decoded to a path no route matched (404)."""
    h = auth(ADMIN)
    body = {"session_id": "s1", "turns": [{"role": "user", "content": "the team's wiki is on Confluence"}]}
    assert api.post("/v1/ns/team%2Falice/capture", json=body, headers=h).status_code == 200
    assert [s["session_id"] for s in api.get("/v1/ns/team%2Falice/sessions", headers=h).json()] == ["s1"]
    assert api.get("/v1/ns/team%2Falice/subagents/health", headers=h).json()["ok"] is True
    assert api.get("/v1/ns/team%2Falice/stats", headers=h).json()["namespace"] == "team/alice"
    assert api.get("/v1/ns/team/sessions", headers=h).json() == []  # another namespace
    with Memory(str(db), namespace="team/alice") as mem:
        assert [s.session_id for s in mem.sessions()] == ["s1"]
    assert api.get("/v1/ns/team%2Falice/sessions", headers=auth(DEMO)).status_code == 403
    # The inspector: linked from the index, its namespace page and a session's.
    assert 'href="/ns/team%2Falice"' in api.get("/", headers=h).text
    assert "s1" in api.get("/ns/team%2Falice", headers=h).text
    assert "Confluence" in api.get("/ns/team%2Falice/session", params={"id": "s1"}, headers=h).text
    # No route's suffix ends another's, so the namespace a path names is never ambiguous.
    suffixes = {r.path.split("}", 1)[1] for r in api.app.routes if getattr(r, "path", "").startswith("/v1/ns/")}
    assert not [(a, b) for a in suffixes for b in suffixes if a != b and a.endswith(b)]


def test_a_memory_the_host_remembered_links_to_no_session(api: TestClient, db: Path) -> None:
    # a remembered memory belongs to no captured session: its page says the host added it (it linked to the
    # session page of 'tortoise:host', a 404)
    with Memory(str(db), namespace="demo") as mem:
        rec = mem.remember("Maya's badge number is 4471", about=["Maya"])
    page = api.get("/ns/demo/expand", params={"id": rec.id}, headers=auth(ADMIN))
    assert page.status_code == 200 and "4471" in page.text
    assert "tortoise%3Ahost" not in page.text and "added by the host" in page.text


def test_an_inspector_page_answers_a_store_failure_as_the_api_does(api: TestClient, monkeypatch) -> None:
    # the API answers 503 for a store that does not answer; the page said 400 "Cannot show this page",
    # with advice (Memory(store_timeout_s=...)) an HTTP user cannot follow
    from tortoise_sdk.store.deadline import timeout_error

    def frozen(self: Memory, *args: object, **kwargs: object) -> None:
        raise timeout_error("a PostgreSQL read", 5.0)

    monkeypatch.setattr(Memory, "sessions", frozen)
    page = api.get("/ns/demo", headers=auth(ADMIN))
    answer = api.get("/v1/ns/demo/sessions", headers=auth(ADMIN))
    assert (page.status_code, answer.status_code) == (503, 503)
    assert page.headers["content-type"].startswith("text/html") and "The store did not answer" in page.text
    assert "Memory(store_timeout_s" not in page.text and "retry the request" in page.text
    assert "Memory(store_timeout_s" not in answer.json()["message"]


def test_a_path_with_a_line_break_reaches_no_namespace(api: TestClient, db: Path) -> None:
    # '/ns/nl%0A' was read as namespace 'nl' (a route's pattern ends before a final line break): another
    # namespace's data and Forget buttons; a line break is refused instead
    with Memory(str(db), namespace="nl") as mem:
        mem.capture("only-in-nl", [{"role": "user", "content": "nl's own turn"}])
    h = auth(ADMIN)
    for path in ("/ns/nl%0A", "/ns/nl%0A/memories", "/v1/ns/nl%0A/sessions", "/v1/ns/nl%0D%0A/sessions"):
        answer = api.get(path, headers=h)
        # refused, or (a line break inside the path) matching no route at all
        assert answer.status_code in (400, 404) and "only-in-nl" not in answer.text, path
        assert answer.status_code == 404 or "line break" in answer.text
    assert "only-in-nl" in api.get("/ns/nl", headers=h).text


def test_signing_in_comes_back_to_a_namespace_whose_name_holds_a_percent_sign(api: TestClient) -> None:
    # the namespace literally "p%2Fq" is /ns/p%252Fq; the login sent the browser to /ns/p%2Fq, namespace "p/q"
    from urllib.parse import parse_qs, urlsplit

    answer = api.get("/ns/p%252Fq/jobs?status=failed", follow_redirects=False)
    assert answer.status_code == 303
    assert parse_qs(urlsplit(answer.headers["location"]).query)["next"] == ["/ns/p%252Fq/jobs?status=failed"]
