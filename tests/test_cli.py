"""The tortoise CLI: same semantics as the API, JSON output, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import run_cli as run


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return str(path)


def test_capture_turns_file_then_search_json(capsys, db, tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [
        {"role": "user", "content": "My sister Ana lives in Lisbon", "id": "m1"},
        {"role": "assistant", "content": "Lisbon is lovely in spring", "id": "m2"},
    ])
    code, out, _ = run(capsys, "--db", db, "capture", f, "--session", "s1", "--date", "2024-04-01T10:00:00", "--json")
    assert code == 0
    receipt = json.loads(out)
    assert (receipt["session_id"], receipt["turns_stored"], receipt["replayed"]) == ("s1", 2, False)
    code, out, _ = run(capsys, "--db", db, "search", "where does Ana live", "--k", "1", "--json")
    result = json.loads(out)
    assert (result["terms"], result["reason"]) == (["ana", "live"], None)
    (hit,) = result["hits"]
    assert (hit["external_id"], hit["session_date"], hit["index"]) == ("m1", "2024-04-01T10:00:00", 0)
    code, out, _ = run(capsys, "--db", db, "capture", f, "--session", "s1", "--key", "k")
    assert code == 0 and "0 new turn(s) of 2" in out


def test_batch_import_and_sessions(capsys, db, tmp_path):
    batch = [{"session_id": f"s{i}", "date": "2024-01-0%dT09:00:00" % (i + 1),
              "turns": [{"role": "user", "content": f"session {i} talks about topic {i}"}]} for i in range(3)]
    f = tmp_path / "b.json"
    f.write_text(json.dumps(batch), encoding="utf-8")
    code, out, _ = run(capsys, "--db", db, "--namespace", "team", "capture", str(f))
    assert code == 0 and "captured 3 session(s): 3 new turn(s)" in out
    code, out, _ = run(capsys, "--db", db, "--namespace", "team", "sessions", "--json")
    assert [s["session_id"] for s in json.loads(out)] == ["s0", "s1", "s2"]
    code, out, _ = run(capsys, "--db", db, "sessions", "--json")
    assert json.loads(out) == []  # other namespace


def test_capture_from_stdin(monkeypatch, capsys, db):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO('{"role": "user", "content": "from a pipe"}\n'))
    code, out, _ = run(capsys, "--db", db, "capture", "-", "--session", "p")
    assert code == 0 and "1 new turn(s)" in out


@pytest.mark.parametrize(
    ("rows", "args", "message"),
    [
        ([{"role": "robot", "content": "x"}], ["--session", "s"], "turns[0].role"),
        ([{"role": "user", "content": "x"}], [], "--session"),
        ([{"role": "user", "content": "x"}], ["--session", "s", "--date", "yesterday"], "--date: 'yesterday'"),
    ],
)
def test_invalid_input_exits_2_with_one_line(capsys, db, tmp_path, rows, args, message):
    f = write_jsonl(tmp_path / "bad.jsonl", rows)
    code, out, err = run(capsys, "--db", db, "capture", f, *args)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_unreadable_and_malformed_files_exit_2(capsys, db, tmp_path):
    assert run(capsys, "--db", db, "capture", str(tmp_path / "missing.jsonl"), "--session", "s")[0] == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "ok"}\n{not json\n', encoding="utf-8")
    code, _, err = run(capsys, "--db", db, "capture", str(bad), "--session", "s")
    assert code == 2 and "line 2" in err


def test_conflict_exits_2(capsys, db, tmp_path):
    run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "a.jsonl", [{"role": "user", "content": "a"}]), "--session", "s")
    code, _, err = run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "b.jsonl", [{"role": "user", "content": "b"}]),
                       "--session", "s")
    assert code == 2 and "position 0" in err


def test_unexpected_failure_exits_1(capsys, db, tmp_path, monkeypatch):
    from tortoise_sdk import Memory, StoreError

    run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "t.jsonl", [{"role": "user", "content": "one"}]),
        "--session", "s")

    def fail(self, *args, **kwargs):
        raise StoreError("SQLite read failed: disk I/O error")

    monkeypatch.setattr(Memory, "sessions", fail)
    code, _, err = run(capsys, "--db", db, "sessions")
    assert code == 1 and err.startswith("tortoise: ")


def test_a_directory_as_the_database_is_refused_like_other_unusable_files(capsys, tmp_path):
    (tmp_path / "dir.db").mkdir()  # a directory where the database should be
    code, _, err = run(capsys, "--db", str(tmp_path / "dir.db"), "sessions")
    assert code == 2 and "is a directory, not a database file" in err


def test_a_file_of_more_turns_than_one_api_call_takes_is_captured_whole(capsys, db, tmp_path):
    # Memory's per-call limit (5,000) guards API callers; the command line had no way to raise it.
    from tortoise_sdk.memory import DEFAULT_MAX_TURNS_PER_CAPTURE

    n = DEFAULT_MAX_TURNS_PER_CAPTURE + 1
    path = write_jsonl(tmp_path / "long.jsonl", [{"role": "user", "content": f"turn {i}"} for i in range(n)])
    code, out, _ = run(capsys, "--db", db, "capture", path, "--session", "long")
    assert code == 0 and f"{n} new turn(s) of {n}" in out
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps({"session_id": "b", "turns": [{"role": "user", "content": f"t {i}"} for i in range(n)]}))
    code, out, _ = run(capsys, "--db", db, "capture", str(batch))
    assert code == 0 and f"{n} new turn(s) of {n}" in out


def test_export_graphml_and_json(capsys, db, tmp_path):
    run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "t.jsonl", [
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]), "--session", "s")
    assert run(capsys, "--db", db, "export", "--format", "graphml", str(tmp_path / "g.graphml"))[0] == 0
    root = ET.parse(tmp_path / "g.graphml").getroot()
    ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
    assert len(root.findall(".//g:node", ns)) == 3 and len(root.findall(".//g:edge", ns)) == 3
    assert run(capsys, "--db", db, "export", "--format", "json", str(tmp_path / "g.json"))[0] == 0
    data = json.loads((tmp_path / "g.json").read_text())
    assert {n["kind"] for n in data["nodes"]} == {"session", "turn"}
    # The format follows the file's name unless --format says otherwise (a reviewer got GraphML in out.json).
    code, _, err = run(capsys, "--db", db, "export", str(tmp_path / "named.json"))
    assert code == 0 and "(json)" in err and json.loads((tmp_path / "named.json").read_text())["nodes"]
    assert run(capsys, "--db", db, "export", str(tmp_path / "named.xml"))[0] == 0
    assert ET.parse(tmp_path / "named.xml").getroot().tag.endswith("graphml")
    code, _, err = run(capsys, "--db", db, "export", "--format", "graphml", str(tmp_path / "forced.json"))
    assert code == 0 and "writing graphml into" in err
    # An empty namespace writes nothing over the file and names where the data is.
    (tmp_path / "keep.json").write_text("{}")
    code, _, err = run(capsys, "--db", db, "--namespace", "nothere", "export", str(tmp_path / "keep.json"))
    assert code == 2 and "data is in: default" in err and "nothing written" in err
    assert (tmp_path / "keep.json").read_text() == "{}"
    # '-' is stdout, as `capture -` is stdin (reviewer: it wrote a file named '-').
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run([sys.executable, "-m", "tortoise_sdk.cli", "--db", db, "export", "-", "--format", "json"],
                          capture_output=True, text=True, cwd=cwd, check=True)
    assert json.loads(proc.stdout)["nodes"] == data["nodes"] and "to stdout (json)" in proc.stderr
    assert not list(cwd.iterdir())
    graphml = subprocess.run([sys.executable, "-m", "tortoise_sdk.cli", "--db", db, "export", "-"],
                             capture_output=True, text=True, check=True).stdout
    assert ET.fromstring(graphml).tag.endswith("graphml")


def test_graphml_export_of_terminal_text_is_well_formed_xml(capsys, db, tmp_path):
    # XML 1.0 holds no control character but tab, newline and carriage return; a coding agent's turns carry
    # terminal colours and bells (a reviewer's export would not parse). They are written as \\xNN escapes.
    run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "t.jsonl", [
        {"role": "user", "content": "\x1b[31mred\x1b[0m and a bell\x07\tend"}]), "--session", "tty\x01")
    assert run(capsys, "--db", db, "export", "--format", "graphml", str(tmp_path / "g.graphml"))[0] == 0
    root = ET.parse(tmp_path / "g.graphml").getroot()
    texts = {d.text for d in root.iter("{http://graphml.graphdrawing.org/xmlns}data")}
    assert "\\x1b[31mred\\x1b[0m and a bell\\x07\tend" in texts
    ids = {n.get("id") for n in root.iter("{http://graphml.graphdrawing.org/xmlns}node")}
    assert "session:tty\\x01" in ids
    # a session whose id is the escape's own text stays a node of its own (ids are escaped one to one)
    run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "u.jsonl", [{"role": "user", "content": "plain"}]),
        "--session", "tty\\x01")
    assert run(capsys, "--db", db, "export", "--format", "graphml", str(tmp_path / "h.graphml"))[0] == 0
    nodes = list(ET.parse(tmp_path / "h.graphml").getroot().iter("{http://graphml.graphdrawing.org/xmlns}node"))
    assert len(nodes) == 4 and {"session:tty\\x01", "session:tty\\\\x01"} <= {n.get("id") for n in nodes}
    # the JSON export keeps the text as it is
    assert run(capsys, "--db", db, "export", "--format", "json", str(tmp_path / "g.json"))[0] == 0
    assert "session:tty\x01" in {n["id"] for n in json.loads((tmp_path / "g.json").read_text())["nodes"]}


def test_demo_is_idempotent(capsys, db):
    code, out, _ = run(capsys, "--db", db, "demo")
    assert code == 0 and "7 turns stored" in out and "Helix Health" in out
    code, out, _ = run(capsys, "--db", db, "demo")
    assert code == 0 and "replayed" in out


def test_model_free_commands_do_not_import_litellm(db):
    code = (
        "import sys; from tortoise_sdk.cli import main; "
        f"main(['--db', {db!r}, 'sessions']); main(['--db', {db!r}, 'search', 'x']); "
        "assert 'litellm' not in sys.modules, 'litellm was imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_batch_import_is_validated_whole_before_writing(capsys, db, tmp_path):
    batch = [{"session_id": f"s{i}", "turns": [{"role": "user", "content": f"session {i}"}]} for i in range(150)]
    batch[120]["turns"][0]["role"] = "bot"
    f = write_jsonl(tmp_path / "batch.jsonl", batch)
    code, _, err = run(capsys, "--db", db, "capture", f)
    assert code == 2 and "sessions[120]: turns[0].role" in err
    assert not Path(db).exists()  # refused before the database was even created


def test_conflict_in_a_later_chunk_says_what_was_stored(capsys, db, tmp_path):
    run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "a.jsonl", [{"role": "user", "content": "a"}]),
        "--session", "s149")
    batch = [{"session_id": f"s{i}", "turns": [{"role": "user", "content": f"session {i}"}]} for i in range(150)]
    code, _, err = run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "batch.jsonl", batch))
    assert code == 2 and "100 session(s) before it were stored" in err
    code, out, _ = run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "fixed.jsonl", batch[:149]))
    assert code == 0 and "49 new turn(s) of 149" in out


def test_idempotency_conflict_and_bad_paths_exit_2(capsys, db, tmp_path):
    run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "a.jsonl", [{"role": "user", "content": "a"}]),
        "--session", "s", "--key", "k1")
    code, _, err = run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "b.jsonl", [{"role": "user", "content": "b"}]),
                       "--session", "s", "--key", "k1")
    assert code == 2 and "k1" in err
    code, _, err = run(capsys, "--db", db, "export", "--format", "json", str(tmp_path / "no" / "such" / "dir.json"))
    assert code == 2 and err.count("\n") == 1
    code, _, err = run(capsys, "--db", "postgresql+psycopg://x@127.0.0.1/y", "sessions")
    assert code == 2 and "unsupported database URL scheme" in err
    bad = tmp_path / "sur.jsonl"
    bad.write_text('{"role": "user", "content": "bad \\ud800 surrogate"}\n', encoding="utf-8")
    code, _, err = run(capsys, "--db", db, "capture", str(bad), "--session", "u")
    assert code == 2 and "turns[0].content" in err


def test_content_parts_are_captured_with_a_note(capsys, db, tmp_path):
    from tortoise_sdk import Memory

    rows = [{"role": "user", "content": [{"type": "text", "text": "My cat is called Milo"},
                                         {"type": "image_url", "image_url": {"url": "https://example.com/milo.png"}}]}]
    code, out, err = run(capsys, "--db", db, "capture", write_jsonl(tmp_path / "parts.jsonl", rows), "--session", "s")
    assert code == 0 and "1 new turn(s) of 1 received" in out
    assert "note s: 1 non-text content part(s) (image_url) of turns[0] kept in metadata['content_parts']" in err
    with Memory(db) as mem:  # a turns stream read by ingest takes parts too
        report = mem.ingest([json.dumps(rows[0])], format="turns", session_id="s2")
        assert (report.turns_stored, mem.turns("s2")[0].content) == (1, "My cat is called Milo")
        assert mem.search("Milo")[0].content == "My cat is called Milo"


def test_memories_show_their_category_and_filter_on_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tortoise_sdk import Memory

    db = str(tmp_path / "m.db")
    with Memory(db, categories=["health", "work"]) as mem:
        mem.remember("Maya is allergic to peanuts.", category="health")
        mem.remember("Maya started at Helix Health in June.", category="work")
        mem.remember("Maya likes long walks.")
    code, out, _ = run(capsys, "memories", "--db", db)
    assert code == 0 and "{health}" in out and "{work}" in out and len(out.splitlines()) == 3
    code, out, _ = run(capsys, "memories", "--db", db, "--category", "Health")
    assert code == 0 and out.splitlines() == [line for line in out.splitlines() if "peanuts" in line] and out
    # A category no memory is filed under (a typo, or nothing filed yet) is named as such, with those in use.
    code, out, err = run(capsys, "memories", "--db", db, "--category", "helth")
    assert code == 0 and out == "" and "no memory here is filed under 'helth'; categories in use: health, work" in err
    assert "capture with a model" not in err


def test_an_extraction_that_left_every_turn_waiting_exits_3_as_flush_does():
    """Reviewer: S2 failing left every turn waiting (status partial, nothing extracted), yet `tortoise capture` and
    `extract` exited 0 where `flush` and `worker` exit 3: a scheduled extract that extracted nothing looked fine."""
    from tortoise_sdk.cli._common import extraction_failed
    from tortoise_sdk.models import ExtractionReport

    assert extraction_failed(ExtractionReport(status="partial", window=(4, 9), waiting=(4, 9)))
    assert not extraction_failed(ExtractionReport(status="partial", window=(4, 9), waiting=(7, 9)))  # 4-6 extracted
    assert not extraction_failed(ExtractionReport(status="partial", window=(4, 9)))
    assert not extraction_failed(ExtractionReport(status="ok", window=(4, 9)))
    assert extraction_failed(ExtractionReport(status="failed", window=(4, 9), waiting=(4, 9)))


def _serve_once(monkeypatch, capsys, *argv):
    """``tortoise *argv`` (a ``serve``) with uvicorn replaced by one start-up and shutdown of the app."""
    import asyncio

    uvicorn = pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")
    ran = []

    def run_app(app, **kw):
        ran.append(kw)
        steps = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

        async def receive():
            return steps.pop(0)

        async def send(message):
            pass

        asyncio.run(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send))

    monkeypatch.setattr(uvicorn, "run", run_app)
    code, out, err = run(capsys, *argv)
    return code, out, err, ran


def test_serve_says_where_it_listens_and_that_a_db_file_is_new(monkeypatch, capsys, tmp_path):
    """Reviewer: `tortoise serve` printed nothing at start-up, and a mistyped --db went unseen."""
    new = tmp_path / "typo.db"
    code, out, err, ran = _serve_once(monkeypatch, capsys, "--db", str(new), "serve", "--port", "9124")
    assert (code, out) == (0, "")
    assert err.splitlines() == [
        f"tortoise: serving http://127.0.0.1:9124 (the inspector at /, the API at /docs) from {new}, namespace "
        "default; Ctrl-C stops it",
        f"tortoise: no database at {new} yet; created an empty one, which this server fills as clients capture: if "
        "your application's memory is in another database, stop the server and pass that one's path with --db (or "
        "TORTOISE_DB)"]
    # uvicorn's coloured log lines would reach a terminal as \u001b escapes
    assert ran == [{"host": "127.0.0.1", "port": 9124, "log_level": "warning", "use_colors": False}]
    code, _, err, ran = _serve_once(monkeypatch, capsys, "--db", str(new), "serve", "--port", "0")
    assert code == 0 and ran[0]["port"] > 0 and err == (
        f"tortoise: serving http://127.0.0.1:{ran[0]['port']} (the inspector at /, the API at /docs) from {new}, "
        "namespace default; Ctrl-C stops it\n")


def test_serve_refuses_a_db_that_is_no_database_before_it_starts(monkeypatch, capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("not a database\n" * 20)
    code, out, err, ran = _serve_once(monkeypatch, capsys, "--db", str(tmp_path / "notes.txt"), "serve")
    assert (code, out, ran) == (2, "", []) and "is not a SQLite database" in err and err.count("\n") == 1


@pytest.mark.block_network(allowed_hosts=["127.0.0.1"])
def test_a_flush_while_model_calls_are_paused_spends_no_attempt(capsys, tmp_path):
    """Reviewer: three `tortoise flush` within 10 s against an unreachable provider spent the job's three attempts
    (failed for good) while each said "calls resume after ... (in 60 s)": each process had a new circuit breaker."""
    import socket

    from tortoise_sdk import Memory

    db = str(tmp_path / "m.db")
    f = write_jsonl(tmp_path / "t.jsonl", [{"role": "user", "content": "I started at Helix Health as a nurse"},
                                            {"role": "assistant", "content": "Congratulations!"}])
    with socket.socket() as never_listens:
        never_listens.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{never_listens.getsockname()[1]}/v1"
        model = ["--model", "openai/stub-model", "--api-base", base, "--api-key", "k"]
        assert run(capsys, "--db", db, "capture", f, "--session", "s1", "--extract", "background", *model)[0] == 0
        code, out, err = run(capsys, "--db", db, "flush", *model)
        assert code == 3 and "pending (attempt 1)" in out and "calls resume after" in err
        for _ in range(2):
            code, out, err = run(capsys, "--db", db, "flush", *model)
            assert (code, out) == (3, "")
            assert "the provider failed with unreachable" in err and "calls resume after" in err
        code, out, err = run(capsys, "--db", db, "worker", "--once", *model)
        assert (code, out) == (3, "") and "calls resume after" in err
        code, out, _ = run(capsys, "--db", db, "flush", "--json", *model)
        assert (code, json.loads(out)) == (3, [])
        with Memory(db) as mem:
            assert [(j.status, j.attempts) for j in mem.jobs()] == [("pending", 1)]
        # Another key is another configuration: it is called at once, as the breaker of one process does.
        code, out, _ = run(capsys, "--db", db, "flush", *model[:-1], "k2")
        assert code == 3 and "pending (attempt 2)" in out
        # Once the pause is over, the job runs again.
        with Memory(db) as mem:
            kept = mem.cursor("tortoise:model-pause")
            mem.save_cursor(kept.name, {**kept.value, "closes_at": "2000-01-01T00:00:00+00:00"}, revision=kept.revision)
        code, out, _ = run(capsys, "--db", db, "flush", *model[:-1], "k2")
        assert code == 3 and "failed (attempt 3)" in out


@pytest.mark.block_network(allowed_hosts=["127.0.0.1"])
def test_flush_retry_failed_queues_again_without_a_model(capsys, tmp_path, monkeypatch):
    """Reviewer: `flush --retry-failed` asked for --model, though queueing again calls none (POST /jobs/retry-failed
    takes none)."""
    import socket

    from tortoise_sdk import Memory

    monkeypatch.delenv("TORTOISE_MODEL", raising=False)
    db = str(tmp_path / "m.db")
    with socket.socket() as never_listens:
        never_listens.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{never_listens.getsockname()[1]}/v1"
        with Memory(db, model="openai/stub-model", api_base=base, api_key="k", breaker_s=0) as mem:
            mem.capture("s1", [{"role": "user", "content": "I started at Helix Health"}], extract="background")
            for _ in range(3):
                mem.flush()
            assert [j.status for j in mem.jobs()] == ["failed"]
    code, out, err = run(capsys, "--db", db, "flush", "--retry-failed")
    assert code == 0 and "s1: pending (attempt 0)" in out, err
    assert "queued 1 job(s) that had failed for good again; no model is configured, so none ran" in out
    with Memory(db) as mem:
        assert [(j.status, j.attempts) for j in mem.jobs()] == [("pending", 0)]
    code, out, _ = run(capsys, "--db", db, "flush", "--retry-failed")
    assert code == 0 and "no job had failed for good" in out
