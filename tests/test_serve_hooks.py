"""Claude Code's HTTP hooks on ``tortoise serve --claude-code-hooks``, and ``tortoise hooks install --url``.

The same events as ``tests/test_claude_code_hooks.py``, posted as Claude Code's ``"type": "http"`` hooks
post them: the answer must be what ``tortoise hook`` prints for the same store and event, captures must
equal the command's, and the route must take nothing it should not (off by default, a token when the
server has them, JSON bodies only).
"""

from __future__ import annotations

import io
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="the server extra is not installed (pip install -e '.[dev]' installs it)")

from fastapi.testclient import TestClient  # noqa: E402

from tortoise_sdk import Memory  # noqa: E402
from tortoise_sdk.adapters.claude_code import (  # noqa: E402
    STORE_BOUND_S,
    hook_url,
    install_hooks,
    is_our_hook,
    uninstall_hooks,
)
from tortoise_sdk.adapters.serve import ServeSettings, build_app, parse_tokens  # noqa: E402
from tortoise_sdk.adapters.serve.hooks import OFF  # noqa: E402
from tortoise_sdk.cli import main  # noqa: E402
from tortoise_sdk.errors import ConfigError, InvalidInput  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
SHORT = DATA / "claude_code_short.jsonl"
SHORT_SESSION = "55604662-cf2a-4331-851a-ec234028f8ca"
ROUTE = "/v1/ns/default/hooks/claude-code"
TOKEN = "hooks-token-0123456789"


def event(name: str, session_id: str, transcript: Path | str, **extra: Any) -> dict[str, Any]:
    return {"session_id": session_id, "transcript_path": str(transcript), "cwd": "/home/marco/projects/spotter",
            "permission_mode": "default", "hook_event_name": name, **extra}


def served(db: Path, *, hooks: bool = True, tokens: list[str] | None = None) -> TestClient:
    """The server on ``db``, taking transcripts from the database's folder (where each test writes them)."""
    app = build_app(ServeSettings(db=str(db), tokens=parse_tokens(tokens or []), claude_code_hooks=hooks,
                                  transcripts=str(db.parent)))
    return TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)


def run_hook(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: Path,
             doc: dict[str, Any]) -> dict[str, Any]:
    """``tortoise hook`` in this process; what it prints, ``{}`` for nothing (the served route's empty answer)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(doc)))
    assert main(["--db", str(db), "hook"]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if out.strip() else {}


def turns_of(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with Memory(str(db)) as mem:
        return {s.session_id: [(t.external_id, t.role, t.content) for t in mem.turns(s.session_id)]
                for s in mem.sessions()}


@pytest.fixture
def earlier(tmp_path: Path) -> Path:
    path = tmp_path / "earlier.jsonl"
    path.write_bytes(SHORT.read_bytes())
    return path


def test_the_served_hook_answers_what_the_command_prints(monkeypatch, capsys, tmp_path, earlier) -> None:
    """Two stores fed the same events, one by the command and one by the server, give the same answers."""
    by_command, by_server = tmp_path / "command.db", tmp_path / "server.db"
    today = tmp_path / "today.jsonl"
    today.write_bytes(b"")
    events = [event("SessionEnd", SHORT_SESSION, earlier),
              event("UserPromptSubmit", "today", today, prompt="mix phx.server doesnt start again"),
              event("UserPromptSubmit", "today", today, prompt="mix phx.server doesnt start again"),
              event("UserPromptSubmit", "today", today, prompt="remind me what we found about mix phx.server?"),
              event("UserPromptSubmit", "today", today, prompt="thanks!"),
              event("UserPromptSubmit", "today", today, prompt="/init")]
    with served(by_server) as c:
        answers = [c.post(ROUTE, json=e) for e in events]
    assert [a.status_code for a in answers] == [200] * len(events)
    printed = [run_hook(monkeypatch, capsys, by_command, e) for e in events]
    # The block's last line names the database to expand a pointer from: each store's own.
    assert (json.dumps([a.json() for a in answers]).replace(str(by_server), "DB")
            == json.dumps(printed).replace(str(by_command), "DB"))
    assert str(by_server) in answers[1].json()["hookSpecificOutput"]["additionalContext"]
    block = printed[1]["hookSpecificOutput"]["additionalContext"]
    assert block.startswith("[tortoise memory]") and "mix phx.server doesnt seem to start" in block
    assert printed[2] != printed[1] and printed[4] == printed[5] == {}  # shown once; nothing to say
    assert turns_of(by_server) == turns_of(by_command) and SHORT_SESSION in turns_of(by_server)


def test_what_a_session_wrote_while_the_server_was_down_is_captured_by_its_next_event(tmp_path, earlier) -> None:
    """Claude Code goes on when an HTTP hook fails: the session's next event reads on from the offset the store
    kept."""
    db, live = tmp_path / "m.db", tmp_path / "live.jsonl"
    lines = SHORT.read_bytes().splitlines(keepends=True)
    live.write_bytes(b"".join(lines[:3]))
    with served(db) as c:
        assert c.post(ROUTE, json=event("Stop", SHORT_SESSION, live)).json() == {}
    live.write_bytes(b"".join(lines))  # written while the server was down: its events were lost
    with served(db) as c:  # up again
        assert c.post(ROUTE, json=event("Stop", SHORT_SESSION, live)).json() == {}
    whole = tmp_path / "whole.db"
    with served(whole) as c:
        assert c.post(ROUTE, json=event("SessionEnd", SHORT_SESSION, earlier)).status_code == 200
    assert turns_of(db) == turns_of(whole) and len(turns_of(db)[SHORT_SESSION]) > 3


def test_the_route_is_off_unless_the_server_was_started_with_it(tmp_path, earlier) -> None:
    db = tmp_path / "m.db"
    with served(db, hooks=False) as c:
        answer = c.post(ROUTE, json=event("SessionEnd", SHORT_SESSION, earlier))
    assert answer.status_code == 404 and answer.json() == {"error": "NotFoundError", "message": OFF, "field": None}
    assert turns_of(db) == {}  # nothing read


def test_the_route_needs_the_servers_token_for_its_namespace(tmp_path, earlier) -> None:
    db = tmp_path / "m.db"
    with served(db, tokens=[f"{TOKEN}:default", "other-token-0123456789:other"]) as c:
        doc = event("SessionEnd", SHORT_SESSION, earlier)
        assert c.post(ROUTE, json=doc).status_code == 401
        assert c.post(ROUTE, json=doc, headers={"Authorization": "Bearer other-token-0123456789"}).status_code == 403
        assert turns_of(db) == {}
        assert c.post(ROUTE, json=doc, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert SHORT_SESSION in turns_of(db)


@pytest.mark.parametrize("headers", [
    {"Content-Type": "text/plain"},  # a form or a no-cors fetch of another site: no question asked first
    {"Content-Type": ""},  # a Blob body with no type (FastAPI before 0.132 parsed it as JSON)
    {"Content-Type": "application/json", "Origin": "https://evil.example"},
    {"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
], ids=["text/plain", "no type", "origin", "sec-fetch-site"])
def test_a_request_a_browser_can_send_is_refused_and_reads_nothing(tmp_path, earlier, headers) -> None:
    """A page of another site can post to a loopback server without the browser asking it first; such a request
    must not make the server read a file into memory (Claude Code sends JSON with no Origin)."""
    db = tmp_path / "m.db"
    with served(db) as c:
        answer = c.post(ROUTE, content=json.dumps(event("SessionEnd", SHORT_SESSION, earlier)), headers=headers)
    assert answer.status_code == 400 and answer.json()["error"] == "InvalidInput", answer.text
    assert turns_of(db) == {}


@pytest.mark.parametrize(("doc", "field"), [
    ({"prompt": "hello"}, "hook_event_name"),  # not an event
    ({"hook_event_name": "Stop", "transcript_path": "{tmp}/earlier.jsonl"}, "session_id"),
    (event("Stop", "s", "{tmp}/missing.jsonl"), "transcript_path"),
    (event("Stop", "s", "{tmp}/d.jsonl"), "transcript_path"),  # a directory
    (event("Stop", "s", "earlier.jsonl"), "transcript_path"),  # relative: to what?
    (event("Stop", "s", "{tmp}/earlier.txt"), "transcript_path"),
    (event("Stop", "s", "/etc/passwd"), "transcript_path"),
    (event("Stop", "s", "{tmp}/../elsewhere.jsonl"), "transcript_path"),
    (event("UserPromptSubmit", "s", "/tmp/x.jsonl", prompt="hi"), "transcript_path"),
    (event("SubagentStop", "s", "{tmp}/earlier.jsonl", agent_transcript_path="/var/x.jsonl"), "transcript_path"),
])
def test_a_bad_event_or_a_transcript_outside_claude_codes_folder_is_a_400_in_one_line(tmp_path, earlier, doc,
                                                                                      field) -> None:
    (tmp_path / "d.jsonl").mkdir()
    (tmp_path / "earlier.txt").write_bytes(earlier.read_bytes())
    doc = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in doc.items()}
    with served(tmp_path / "m.db") as c:
        answer = c.post(ROUTE, json=doc)
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["error"] == "InvalidInput" and body["field"] == field and "\n" not in body["message"]
    assert str(tmp_path / "missing") not in body["message"]  # nothing said of what exists where
    assert turns_of(tmp_path / "m.db") == {}


@pytest.mark.parametrize("how", ["dot-dot", "symlinked file", "symlinked folder", "nul byte"])
def test_a_transcript_that_exists_outside_the_folder_is_not_read(tmp_path, how) -> None:
    """The folder is checked on the resolved path: ``..`` and symlinks lead out of it, to a real transcript."""
    root = tmp_path / "projects"
    (root / "p").mkdir(parents=True)
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(SHORT.read_bytes())
    (root / "p" / "link.jsonl").symlink_to(outside)
    (root / "out").symlink_to(tmp_path)
    path = {"dot-dot": f"{root}/p/../../outside.jsonl", "symlinked file": f"{root}/p/link.jsonl",
            "symlinked folder": f"{root}/out/outside.jsonl", "nul byte": f"{root}/p/a\x00.jsonl"}[how]
    with served(root / "m.db") as c:
        answer = c.post(ROUTE, json=event("SessionEnd", SHORT_SESSION, path))
    assert answer.status_code == 400 and answer.json()["field"] == "transcript_path", answer.text
    assert turns_of(root / "m.db") == {}
    with served(root / "m.db") as c:  # the same file inside the folder is read: the refusal was the folder's
        (root / "p" / "inside.jsonl").write_bytes(outside.read_bytes())
        assert c.post(ROUTE, json=event("SessionEnd", SHORT_SESSION, root / "p" / "inside.jsonl")).status_code == 200
    assert SHORT_SESSION in turns_of(root / "m.db")


@pytest.mark.parametrize("key, value", [("transcript_path", 123), ("agent_transcript_path", ["x"]),
                                        ("session_id", {"a": 1})])
def test_a_field_of_the_wrong_type_is_a_400(tmp_path, key, value) -> None:
    with served(tmp_path / "m.db") as c:
        answer = c.post(ROUTE, json={**event("UserPromptSubmit", "s", "", prompt="hi"), key: value})
    assert answer.status_code == 400 and answer.json()["field"] == key, answer.text


@pytest.mark.parametrize("headers", [{}, {"content-type": "text/plain"}, {"content-type": "application/jsonx"},
                                     {"content-type": "application/json", "origin": "null"},
                                     {"content-type": "application/json", "sec-fetch-site": "same-site"}])
def test_the_check_itself_refuses_what_a_browser_can_send(headers) -> None:
    """The check, apart from FastAPI (whose versions differ on bodies without a JSON type)."""
    from starlette.requests import Request

    from tortoise_sdk.adapters.serve.hooks import _from_claude_code

    request = Request({"type": "http", "method": "POST", "path": ROUTE,
                       "headers": [(k.encode(), v.encode()) for k, v in headers.items()]})
    with pytest.raises(InvalidInput):
        _from_claude_code(request)
    _from_claude_code(Request({"type": "http", "method": "POST", "path": ROUTE,
                               "headers": [(b"content-type", b"application/json; charset=utf-8")]}))


def test_the_default_folder_is_claude_codes_own(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    assert ServeSettings().transcripts_folder() == Path.home() / ".claude" / "projects"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    assert ServeSettings().transcripts_folder() == tmp_path / "projects"
    assert ServeSettings(transcripts=str(tmp_path / "t")).transcripts_folder() == tmp_path / "t"


def test_the_hooks_are_refused_on_an_address_other_machines_reach(tmp_path, capsys) -> None:
    with pytest.raises(ConfigError, match="--claude-code-hooks reads the transcript files"):
        build_app(ServeSettings(db=str(tmp_path / "m.db"), host="0.0.0.0", tokens=parse_tokens([TOKEN]),
                                claude_code_hooks=True))
    assert main(["--db", str(tmp_path / "m.db"), "serve", "--host", "0.0.0.0", "--token", TOKEN,
                 "--claude-code-hooks"]) == 2
    assert "bind --host 127.0.0.1" in capsys.readouterr().err


def test_serve_says_where_the_hooks_are_and_how_to_install_them(tmp_path, monkeypatch, capsys) -> None:
    import uvicorn

    ran: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.append(kw))
    assert main(["--db", str(tmp_path / "m.db"), "serve", "--port", "9123", "--claude-code-hooks",
                 "--transcripts", str(tmp_path)]) == 0
    assert ran == [{"host": "127.0.0.1", "port": 9123, "log_level": "warning", "use_colors": False}]
    assert capsys.readouterr().err == (
        f"tortoise: Claude Code hooks at http://127.0.0.1:9123/v1/ns/NAMESPACE/hooks/claude-code, transcripts from "
        f"{tmp_path}; `tortoise hooks install --url http://127.0.0.1:9123` writes them\n")



def test_serve_on_port_0_names_the_port_it_took_in_the_install_command(tmp_path, monkeypatch, capsys) -> None:
    """A user's: `serve --claude-code-hooks --port 0` said `tortoise hooks install --url http://127.0.0.1:0`, and hooks
    installed from it posted to port 0, where nothing listens (every prompt went without its block)."""
    import uvicorn

    ran: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.append(kw))
    assert main(["--db", str(tmp_path / "m.db"), "serve", "--port", "0", "--claude-code-hooks",
                 "--transcripts", str(tmp_path)]) == 0
    port = ran[0]["port"]
    assert port > 0 and capsys.readouterr().err == (
        f"tortoise: Claude Code hooks at http://127.0.0.1:{port}/v1/ns/NAMESPACE/hooks/claude-code, transcripts from "
        f"{tmp_path}; `tortoise hooks install --url http://127.0.0.1:{port}` writes them\n")

def test_a_locked_database_costs_a_prompt_the_store_bound_and_the_block_still_comes(tmp_path, earlier) -> None:
    """As the command's: the server's own store bound (30 s) would hold the prompt past Claude Code's timeout."""
    db = tmp_path / "m.db"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "user", "sessionId": "s2", "uuid": "u-1", "timestamp":
                                      "2026-12-01T10:00:00Z", "message": {"role": "user", "content": "hello"}}) + "\n")
    with served(db) as c:
        assert c.post(ROUTE, json=event("Stop", SHORT_SESSION, earlier)).status_code == 200
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the database: every write waits, reads go on
        try:
            started = time.monotonic()
            answer = c.post(ROUTE, json=event("UserPromptSubmit", "s2", transcript,
                                              prompt="why does mix phx.server not start?"))
            elapsed = time.monotonic() - started
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert answer.status_code == 200 and elapsed < 2 * STORE_BOUND_S + 2, (answer.text, elapsed)
        assert "mix phx.server doesnt seem to start" in answer.json()["hookSpecificOutput"]["additionalContext"]
        assert turns_of(db).get("s2", []) == []  # the capture that gave up left nothing...
        assert c.post(ROUTE, json=event("Stop", "s2", transcript)).status_code == 200
    assert turns_of(db)["s2"] == [("u-1", "user", "hello")]  # ... and the next event took it


def test_an_empty_bearer_says_the_hooks_variable_is_not_set_and_the_server_logs_it(tmp_path, earlier,
                                                                                  caplog) -> None:
    """Claude Code shows no answer of an HTTP hook: a refused one is said on the server's stderr too."""
    with served(tmp_path / "m.db", tokens=[TOKEN]) as c, caplog.at_level("WARNING", logger="tortoise.serve"):
        answer = c.post(ROUTE, json=event("Stop", SHORT_SESSION, earlier), headers={"Authorization": "Bearer "})
    assert answer.status_code == 401 and "allowedEnvVars" in answer.json()["message"]
    assert any("401 Denied" in r.getMessage() and "allowedEnvVars" in r.getMessage() for r in caplog.records)


# -- hooks install --url -----------------------------------------------------------------------------


OTHERS = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]},
                             {"hooks": [{"type": "http", "url": "http://127.0.0.1:9000/audit"}]}]},
          "model": "opus"}


def test_install_url_writes_http_hooks_and_uninstall_removes_only_them(tmp_path, capsys) -> None:
    project = tmp_path / "spotter"
    settings_file = project / ".claude" / "settings.local.json"
    settings_file.parent.mkdir(parents=True)
    settings_file.write_text(json.dumps(OTHERS))
    args = ["--db", str(tmp_path / "m.db"), "hooks", "install", "--project", str(project),
            "--url", "http://127.0.0.1:8765/", "--token-env", "$TORTOISE_TOKEN"]
    assert main(args) == 0
    said = capsys.readouterr().err
    assert f"keep `tortoise --db {tmp_path / 'm.db'} serve --claude-code-hooks` running there" in said
    assert "--token SECRET:spotter with SECRET the value of $TORTOISE_TOKEN" in said
    written = json.loads(settings_file.read_text())
    ours = {"type": "http", "url": "http://127.0.0.1:8765/v1/ns/spotter/hooks/claude-code", "timeout": 8,
            "headers": {"Authorization": "Bearer $TORTOISE_TOKEN"}, "allowedEnvVars": ["TORTOISE_TOKEN"]}
    for name in ("UserPromptSubmit", "Stop", "SubagentStop", "PreCompact", "SessionEnd"):
        assert written["hooks"][name][-1] == {"hooks": [ours]}
    assert written["hooks"]["Stop"][:2] == OTHERS["hooks"]["Stop"] and written["model"] == "opus"
    # A command install replaces the HTTP one (never both: each prompt would get two blocks), and back.
    assert main(args[:-4]) == 0
    assert not any(h.get("type") == "http" and "claude-code" in h["url"]
                   for g in json.loads(settings_file.read_text())["hooks"]["Stop"] for h in g["hooks"])
    assert main(args) == 0 and json.loads(settings_file.read_text()) == written
    assert main(["hooks", "uninstall", "--project", str(project)]) == 0
    assert json.loads(settings_file.read_text()) == OTHERS


@pytest.mark.parametrize(("extra", "says"), [
    (["--url", "127.0.0.1:8765"], "give the address `tortoise serve` listens on"),
    (["--url", "http://127.0.0.1:8765/?x=1"], "give the address"),
    (["--url", "http://127.0.0.1:8765/v1/ns/x/hooks/claude-code"], "the path to the namespace is added"),
    (["--url", "http://127.0.0.1:8765", "--namespace", "team/a"], "a URL path cannot carry"),
    (["--url", "http://127.0.0.1:99999"], "give the address"),
    (["--url", "https://127.0.0.1:8765"], "give the address"),
    (["--url", "http://mem.example:8765"], "listens on this machine only"),
    (["--url", "http://127.0.0.1:8765", "--token-env", "A B"], "is not the name of an environment variable"),
    (["--url", "http://127.0.0.1:8765", "--token-env", ""], "is not the name of an environment variable"),
    (["--token-env", "T"], "give --url too"),
    (["--url", "http://127.0.0.1:8765", "--model", "openai/gpt-4o-mini"], "drop --model here"),
])
def test_install_url_refuses_what_cannot_work_and_writes_nothing(tmp_path, capsys, extra, says) -> None:
    assert main(["hooks", "install", "--project", str(tmp_path), *extra]) == 2
    assert says in capsys.readouterr().err and not (tmp_path / ".claude").exists()


def test_hook_url_quotes_the_namespace() -> None:
    assert hook_url("http://127.0.0.1:8765/base/", "a b") == "http://127.0.0.1:8765/base/v1/ns/a%20b/hooks/claude-code"
    for server, namespace in (("ftp://127.0.0.1", "x"), ("http://127.0.0.1", "a/b")):
        with pytest.raises(InvalidInput):
            hook_url(server, namespace)


_entries = st.one_of(
    st.builds(lambda c: {"type": "command", "command": c}, st.sampled_from(["notify-send", "make lint", "tortoise"])),
    st.builds(lambda u: {"type": "http", "url": u},
              st.sampled_from(["http://127.0.0.1:9000/audit", "http://x/v1/ns/a/hooks/other", "http://x/claude-code"])),
)
_settings = st.fixed_dictionaries({"hooks": st.dictionaries(
    st.sampled_from(["Stop", "UserPromptSubmit", "PreToolUse", "SessionEnd"]),
    st.lists(st.builds(lambda hs: {"hooks": hs}, st.lists(_entries, min_size=1, max_size=3)), min_size=1, max_size=3),
    min_size=1)})


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(others=_settings, first=st.booleans(), repeat=st.integers(1, 3))
def test_any_install_sequence_then_uninstall_gives_back_the_other_hooks(others, first, repeat) -> None:
    """Installs of either kind, in any order and any number of times, then one uninstall: the other hooks as they
    were, and between installs exactly one of ours per event."""
    url = hook_url("http://127.0.0.1:8765", "spotter")
    current: dict[str, Any] = others
    for i in range(repeat):
        by_url = (i % 2 == 0) == first
        current = (install_hooks(current, url=url, timeout=8) if by_url
                   else install_hooks(current, "/usr/bin/tortoise hook", timeout=30))
        mine = {name: [h for g in groups for h in g["hooks"] if is_our_hook(h)]
                for name, groups in current["hooks"].items()}
        assert all(len(mine[name]) == 1 for name in ("UserPromptSubmit", "Stop", "SubagentStop", "PreCompact",
                                                     "SessionEnd"))
    assert uninstall_hooks(current) == others


def test_concurrent_events_of_one_transcript_capture_each_turn_once(tmp_path, earlier) -> None:
    """Claude Code fires Stop, SubagentStop and the next prompt close together, and the server runs them on
    its threads at once: whatever the interleaving, the store ends with each turn once, as a whole capture."""
    from concurrent.futures import ThreadPoolExecutor

    db, live = tmp_path / "m.db", tmp_path / "live.jsonl"
    lines = SHORT.read_bytes().splitlines(keepends=True)
    live.write_bytes(b"")
    names = ["Stop", "SubagentStop", "PreCompact", "UserPromptSubmit"]
    with served(db) as c, ThreadPoolExecutor(4) as pool:
        for start in range(0, len(lines), 3):
            with live.open("ab") as f:
                f.write(b"".join(lines[start:start + 3]))
            docs = [event(n, SHORT_SESSION, live, **({"prompt": "mix phx.server"} if n == "UserPromptSubmit" else {}))
                    for n in names]
            assert [a.status_code for a in pool.map(lambda d: c.post(ROUTE, json=d), docs)] == [200] * 4
    whole = tmp_path / "whole.db"
    with served(whole) as c:
        assert c.post(ROUTE, json=event("SessionEnd", SHORT_SESSION, earlier)).status_code == 200
    assert turns_of(db) == turns_of(whole)
