"""Bad input at the command line: exit 2, one line on stderr naming what to fix, nothing written, no traceback.

One table: each row is the arguments (``{f:NAME}`` an input file, ``{missing}`` a path under a missing
directory, ``{tmp}`` a directory; ``--db`` is added unless given),
the exit code and a piece of the one line the user reads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_cli as run
from tortoise_sdk import Memory
from tortoise_sdk.cli import build_parser

TURNS = [{"role": "user", "content": "I just started at Helix Health", "id": "m1"},
         {"role": "assistant", "content": "Congratulations on the new job!", "id": "m2"}]

#: Input files of the table, by name: text (str) or raw bytes.
FILES: dict[str, str | bytes] = {
    "ok.jsonl": "\n".join(json.dumps(t) for t in TURNS) + "\n",
    "no-content.jsonl": '{"role": "user", "content": "hello"}\n{"role": "assistant"}\n',
    "null-content.jsonl": '{"role": "user", "content": "hello"}\n\n{"role": "user", "content": null}\n',
    "no-role.jsonl": '{"role": "user", "content": "hi"}\n{"rol": "user", "content": "x"}\n',
    "bad-role.jsonl": '{"role": "user", "content": "a"}\n{"role": "robot", "content": "b"}\n',
    "bad-part.jsonl": '{"role": "user", "content": [{"type": "text"}]}\n',
    "bad-batch.json": json.dumps([{"session_id": "a", "turns": [{"role": "user", "content": "x"}]},
                                  {"session_id": "b", "turns": [{"role": "user"}]}]),
    "batch-without-turns.json": json.dumps([{"session_id": "a", "turns": [{"role": "user", "content": "x"}]},
                                            {"session_id": "b"}]),
    "batch-without-turns.jsonl": '{"session_id": "a", "turns": [{"role": "user", "content": "x"}]}\n'
                                 '{"session_id": "b"}\n',
    "messages-not-turns.jsonl": '{"session_id": "x", "messages": [{"role": "user", "content": "hello there"}]}\n',
    "messages-and-garbage.jsonl": '{"session_id": "x", "messages": [{"role": "user", "content": "hi"}]}\nnot json\n',
    "messages-array.json": '[{"session_id": "x", "messages": [{"role": "user", "content": "hello there"}]}]',
    "binary.bin": b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)),
    "latin1.jsonl": '{"role": "user", "content": "caf\u00e9"}\n'.encode("latin-1"),
    "not-a-db.db": "this is a text file, not a database\n" * 20,
    "empty.json": "[]\n",
    "foo.json": '{"foo": 1}\n',
    "foo-array.json": '[{"foo": 1}]\n',
    "batch.json": json.dumps([{"session_id": "a", "turns": [{"role": "user", "content": "x"}]}]),
    "window.jsonl": '{"role": "user", "content": "where do I work?"}\n',
    "window.txt": "where do I work?\n",
    "transcript.jsonl": json.dumps({"type": "file-history-snapshot", "messageId": "u1", "snapshot": {}}) + "\n"
                        + json.dumps({"type": "user", "sessionId": "s9", "uuid": "u1", "message": {
                            "role": "user", "content": "where do I work?"}}) + "\n",
}

BAD = [
    # capture: the turns file names the line and the field; nothing is captured
    ("missing content", "capture {f:no-content.jsonl} --session s", 2, "line 2: turns[1].content: Field required"),
    ("null content", "capture {f:null-content.jsonl} --session s", 2, "line 3: turns[1].content"),
    # Reviewer: "unknown role None" for a turn without one.
    ("missing role", "capture {f:no-role.jsonl} --session s", 2, "line 2: turns[1].role: Field required: give each"),
    ("unknown role", "capture {f:bad-role.jsonl} --session s", 2, "line 2: turns[1].role: unknown role 'robot'"),
    ("content part without text", "capture {f:bad-part.jsonl} --session s", 2, "line 1: turns[0].content[0].text"),
    ("bad session of a batch", "capture {f:bad-batch.json}", 2, "item 2: sessions[1]: turns[0].content"),
    ("session of a batch without turns", "capture {f:batch-without-turns.json}", 2,
     'item 2: sessions[1]: this session has no "turns"'),
    # Reviewer: the same as JSON lines was read as a transcript: "no line holds a turn (2 unknown line type)".
    ("a JSONL session without turns", "capture {f:batch-without-turns.jsonl}", 2,
     'line 2: sessions[1]: this session has no "turns"'),
    ("blank --session", "capture {f:ok.jsonl} --session ' '", 2, "--session: must be a non-empty string"),
    ("bad --date", "capture {f:ok.jsonl} --session s --date yesterday", 2, "--date: 'yesterday' is not an ISO 8601"),
    ("sessions with messages, not turns", "capture {f:messages-not-turns.jsonl}", 2,
     'no line holds a turn (1 unknown line type); nothing was captured: a session is {"session_id": "s1", "turns": '),
    ("the same beside a line that is not JSON", "capture {f:messages-and-garbage.jsonl}", 2,
     "no line holds a turn (1 invalid json, 1 unknown line type); nothing was captured"),
    ("an array of sessions with messages", "capture {f:messages-array.json}", 2,
     'item 1: sessions[0]: this session has no "turns"'),
    # unreadable files: one line, whatever is wrong with them
    ("binary file", "capture {f:binary.bin} --session s", 2, "binary.bin: a binary file (NUL byte at offset 7)"),
    ("not UTF-8", "capture {f:latin1.jsonl} --session s", 2, "latin1.jsonl: not UTF-8 text (byte 0xe9 at offset 32)"),
    ("missing file", "capture {missing}/turns.jsonl --session s", 2, "cannot read file: No such file or directory"),
    ("a directory", "capture {tmp} --session s", 2, "cannot read file: Is a directory"),
    ("binary window", "context --window {f:binary.bin}", 2, "a binary file"),
    # files that never end or never open (issue 24: they ran until killed)
    ("/dev/zero", "capture /dev/zero --session s", 2, "/dev/zero: not a regular file (a device, a FIFO"),
    ("a FIFO", "capture {fifo} --session s", 2, "fifo: not a regular file"),
    ("a FIFO window", "context --window {fifo}", 2, "fifo: not a regular file"),
    ("a plain-text window", "context --window {f:window.txt}", 2,
     'line 1 is not valid JSON: Expecting value; the window is JSON or JSONL turns such as {"role": "user", '),
    # A user's: a Claude Code transcript as the window was answered "nothing relevant to the window" (exit 0): no
    # line of it is a turn, so it asked nothing.
    ("a transcript as the window", "context --window {f:transcript.jsonl}", 2,
     'no line of the window is a turn (2 lines of other objects, such as {"type": ...}); give JSON or JSONL turns '
     'such as {"role": "user", "content": "..."}: a Claude Code transcript is captured with `tortoise capture FILE`'),
    ("objects as the window", "context --window {f:foo-array.json}", 2, "no line of the window is a turn"),
    ("eval on a binary file", "eval locomo {f:binary.bin} --answer-from-block --judge exact", 2,
     "binary.bin: not UTF-8 JSON (byte 0x80 at offset 138)"),
    # Reviewer: a missing or binary file was answered "no answer model" when no model was given.
    ("eval on a binary file, no model", "eval locomo {f:binary.bin}", 2, "binary.bin: not UTF-8 JSON"),
    ("eval on a missing file, no model", "eval locomo {missing}", 2, "No such file or directory"),
    ("export to /proc/version", "export /proc/version", 2, "tortoise: /proc/version: "),
    # the database: not one, or not there (read commands create nothing)
    ("--db not a database", "--db {f:not-a-db.db} search helix", 2, "is not a SQLite database, or is damaged"),
    ("--db a directory", "--db {tmp} search helix", 2, "is a directory, not a database file; give a file path"),
    ("--db not a database, capture", "capture {f:ok.jsonl} --session s --db {f:not-a-db.db}", 2,
     "is not a SQLite database"),
    # a store that cannot be reached is no bad input: exit 1 (docs/cli.md), with what to check
    ("--db a closed port", "--db postgresql://postgres@127.0.0.1:1/x search helix", 1,
     "cannot connect to PostgreSQL at postgresql://postgres@127.0.0.1:1/x"),
    # numbers and names
    ("--k 0", "search helix --k 0", 2, "argument --k: must be an integer from 1 to 10,000, got '0'"),
    ("--k -5", "search helix --k -5", 2, "argument --k: must be an integer from 1 to 10,000"),
    ("--k huge", "search helix --k 99999999999999999999999", 2, "argument --k: must be an integer from 1 to 10,000"),
    ("--k not a number", "search helix --k ten", 2, "argument --k: must be an integer"),
    ("--budget 0", "context --window {f:window.jsonl} --budget 0", 2, "argument --budget: must be an integer from 1 to 8"),
    ("blank --namespace", "--namespace '  ' search helix", 2, "--namespace must be a non-blank name"),
    ("blank --namespace after", "sessions --namespace ''", 2, "--namespace must be a non-blank name"),
    ("unknown option", "search helix --top 3", 2, "tortoise search: unknown option --top"),
    # extraction: the session first, then the model, in the command line's terms
    ("extract unknown session", "extract no-such-session", 2, "no such session 'no-such-session'"),
    ("extract without a model", "extract s1", 2, "no model configured: pass --model (e.g. --model openai/gpt-4o-mini) "
                                                 "or set TORTOISE_MODEL"),
    ("worker without a model", "worker --once", 2, "pass --model"),
    # Reviewer: "unknown option --db; did you mean --db?" for an option written after '--'.
    ("an option after --", "search -- -Pixel --k 3", 2, "unknown option --k; options go before '--'"),
    # Reviewer: a PostgreSQL URL missing its '//' was a relative SQLite path, created with its directories.
    ("a database URL without //", "capture {f:ok.jsonl} --session s --db postgresql:/127.0.0.1/x", 2,
     "'postgresql:/127.0.0.1/x' looks like a database URL without its '//' after the scheme"),
    # Reviewer: --poll 0 (or -1, nan) polled in a busy loop at 100 % CPU, saying nothing; inf raised a traceback.
    *[(f"worker --poll {v}", f"worker --model openai/x --api-key k --poll {v}", 2,
       f"--poll: must be a number from 0.01 to 86,400, got '{v}'") for v in ("0", "-1", "nan", "inf", "1e300")],
]

READ_COMMANDS = ["search helix", "sessions", "memories", "context --window {f:window.jsonl}", "expand t_0",
                 "export {missing}.graphml", "subagents", "stats", "extract s1", "flush",
                 "flush --session s1 --model openai/gpt-4o-mini"]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name, body in FILES.items():
        made[name] = tmp_path / name
        if isinstance(body, bytes):
            made[name].write_bytes(body)
        else:
            made[name].write_text(body, encoding="utf-8")
    return made


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A database holding session s1 (no model)."""
    path = str(tmp_path / "cli.db")
    with Memory(path) as mem:
        mem.capture("s1", TURNS)
    return path


def argv(template: str, files: dict[str, Path], tmp_path: Path, db: str | None) -> list[str]:
    import shlex

    words = []
    for word in shlex.split(template):
        for name, path in files.items():
            word = word.replace(f"{{f:{name}}}", str(path))
        if "{fifo}" in word and not (tmp_path / "fifo").exists():
            os.mkfifo(tmp_path / "fifo")
        words.append(word.replace("{missing}", str(tmp_path / "nowhere" / "x")).replace("{tmp}", str(tmp_path))
                     .replace("{fifo}", str(tmp_path / "fifo")))
    return words if db is None or "--db" in words else ["--db", db, *words]


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err.rstrip("\n")


@pytest.mark.parametrize(("case", "command", "code", "message"), BAD, ids=[row[0] for row in BAD])
def test_bad_input_exits_with_one_line(capsys, tmp_path, files, db, case, command, code, message) -> None:
    before = {p: p.read_bytes() for p in files.values()}
    got, out, err = run(capsys, *argv(command, files, tmp_path, db))
    assert (got, out) == (code, ""), err
    if "unknown option" in message:  # the one line, then the command's usage (issue 26)
        err = err.split("\n", 1)[0] + "\n" if "\nusage: tortoise search" in err else err
    assert message in one_line(err)
    assert {p: p.read_bytes() for p in files.values()} == before  # inputs (and a non-database --db) untouched
    with Memory(db) as mem:  # nothing was captured
        assert [(s.session_id, s.turn_count) for s in mem.sessions()] == [("s1", 2)]


#: Captures refused for their input (the rows of BAD above, and two more), aimed at a --db not created yet.
#: Read as a transcript (the store is open by then), no line of which is of a kind the SDK knows: refused after all.
UNREAD = ("sessions with messages, not turns", "the same beside a line that is not JSON")

REFUSED_CAPTURES = [row for row in BAD
                    if row[1].startswith("capture") and "--db" not in row[1] and row[0] not in UNREAD] + [
    ("no --session", "capture {f:ok.jsonl}", 2, "a file of turns needs --session ID"),
    ("--session with a batch", "capture {f:bad-batch.json} --session s", 2,
     "--session: a batch of sessions takes no --session (it applies to a file of one session's turns"),
    # Reviewer: `[]` was taken for an empty batch: exit 0, nothing printed, the database created.
    ("an empty JSON array", "capture {f:empty.json}", 2, "empty.json: the file holds no turn (an empty JSON array)"),
    ("an empty JSON array with --session", "capture {f:empty.json} --session s", 2, "the file holds no turn"),
    # Reviewer: an object of no known format asked for `format=`, a Python argument, after creating the database.
    ("an object of no known format", "capture {f:foo.json}", 2,
     "foo.json: no line holds a turn, a session or a line of a transcript format tortoise reads"),
    # Reviewer: items without "role" were told only to add --session.
    ("items without role, no --session", "capture {f:foo-array.json}", 2,
     "item 1: turns[0].role: Field required: give each turn a role, one of user, assistant, system, tool; the file "
     "also needs --session ID; nothing was captured"),
    # Reviewer: --key alone was reported as a --session error.
    ("--key with a batch", "capture {f:batch.json} --key k", 2,
     "--key: a batch of sessions takes no --key (it applies to a file of one session's turns"),
    ("--session and --key with a batch", "capture {f:batch.json} --key k --session s", 2,
     "--session: a batch of sessions takes no --session or --key (they apply"),
]


@pytest.mark.parametrize(("case", "command", "code", "message"), REFUSED_CAPTURES,
                         ids=[row[0] for row in REFUSED_CAPTURES])
def test_a_refused_capture_creates_no_database(capsys, tmp_path, files, case, command, code, message) -> None:
    new = tmp_path / "new.db"
    got, out, err = run(capsys, *argv(command, files, tmp_path, str(new)))
    assert (got, out) == (code, "") and message in one_line(err)
    assert not new.exists(), "the database was created for a capture that was refused"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("new.db")) == []


@pytest.mark.parametrize("command", READ_COMMANDS)
def test_read_commands_on_a_missing_database_say_so_and_create_nothing(capsys, tmp_path, files, command) -> None:
    where = tmp_path / "nope" / "x.db"
    got, out, err = run(capsys, "--db", str(where), *argv(command, files, tmp_path, None))
    assert (got, out) == (2, "")
    assert one_line(err) == (f"tortoise: no database at {where} (nothing was created): check --db or TORTOISE_DB "
                             "(a capture creates the database)")
    assert not where.parent.exists()


def test_db_and_namespace_go_before_or_after_the_command(capsys, tmp_path, files) -> None:
    db = str(tmp_path / "m.db")
    assert run(capsys, "capture", str(files["ok.jsonl"]), "--session", "s", "--db", db, "--namespace", "ana")[0] == 0
    for args in (["--db", db, "--namespace", "ana", "sessions", "--json"],
                 ["sessions", "--json", "--db", db, "--namespace", "ana"],
                 ["--db", db, "--namespace", "bob", "sessions", "--namespace", "ana", "--json"]):  # after wins
        code, out, _ = run(capsys, *args)
        assert code == 0 and [s["session_id"] for s in json.loads(out)] == ["s"], args
    code, out, _ = run(capsys, "--db", db, "sessions", "--json")
    assert (code, json.loads(out)) == (0, [])  # the default namespace is another one


def every_subcommand(parser=None, prefix=()):
    import argparse

    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*prefix, name), child
                yield from every_subcommand(child, (*prefix, name))


def test_every_subcommand_lists_db_and_namespace_in_its_help_where_they_apply() -> None:
    from tortoise_sdk.cli import NOT_APPLICABLE

    commands = list(every_subcommand())
    assert {("search",), ("capture",), ("mcp",), ("hooks",), ("eval", "locomo")} <= {c for c, _ in commands}
    for command, parser in commands:
        text = parser.format_help()
        hidden = NOT_APPLICABLE.get(command[-1], ())
        assert ("--db PATH|URL" in text) == ("--db" not in hidden), command
        assert ("--namespace NS" in text) == ("--namespace" not in hidden), command
        assert {"--db", "--namespace"} <= set(parser._option_string_actions), command  # still accepted
        if "--namespace" not in hidden:  # reviewer: demo's help said "default: default"; it writes to "demo"
            assert f"(default: {'demo' if command == ('demo',) else 'default'})" in " ".join(text.split()), command


def test_a_replayed_capture_says_nothing_new(capsys, tmp_path, files) -> None:
    db = str(tmp_path / "m.db")
    args = ("--db", db, "capture", str(files["ok.jsonl"]), "--session", "s", "--key", "k1")
    code, out, _ = run(capsys, *args)
    assert (code, out.splitlines()[0]) == (0, "captured 1 session(s): 2 new turn(s) of 2 received")
    code, out, _ = run(capsys, *args)
    assert (code, out) == (0, "1 session(s) replayed, nothing new: already captured under idempotency key k1\n")


# -- what stored text may do to the terminal (issue 24) ----------------------------------------------

TORTOISE = str(Path(__import__("sys").executable).with_name("tortoise"))


def _stored_override(tmp_path: Path) -> str:
    db = str(tmp_path / "bidi.db")
    with Memory(db) as mem:
        mem.capture("s", [{"role": "user", "name": "Eve\u202e", "content": "evil \u202e text about parrots \u2066x"}])
    return db


@pytest.mark.parametrize("terminal", ["ascii pipe", "utf-8 terminal"])
def test_stored_bidi_overrides_neither_crash_nor_reach_a_terminal_raw(tmp_path, terminal) -> None:
    """``PYTHONIOENCODING=ascii tortoise search`` crashed on a stored U+202E; a terminal got it raw."""
    import subprocess

    db = _stored_override(tmp_path)
    env = {**os.environ, "PYTHONIOENCODING": "ascii" if terminal == "ascii pipe" else "utf-8"}
    if terminal == "ascii pipe":
        proc = subprocess.run([TORTOISE, "--db", db, "search", "parrots"], capture_output=True, env=env, timeout=60)
        out = proc.stdout
    else:
        if not hasattr(os, "openpty"):
            pytest.skip("needs a pseudo-terminal (os.openpty)")
        primary, tty = os.openpty()
        try:
            proc = subprocess.run([TORTOISE, "--db", db, "search", "parrots"], stdout=tty, stderr=subprocess.PIPE,
                                  env=env, timeout=60)
            out = os.read(primary, 65536)
        finally:
            os.close(tty)
            os.close(primary)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    assert b"\\u202e text about parrots \\u2066x" in out and "\u202e".encode() not in out


def _on_a_terminal(argv: list[str]) -> bytes:
    """What ``tortoise *argv`` writes to stdout when it is a terminal (a pseudo-terminal, output post-processing
    off so that the bytes are the program's own)."""
    import subprocess
    import termios

    if not hasattr(os, "openpty"):
        pytest.skip("needs a pseudo-terminal (os.openpty)")
    primary, tty = os.openpty()
    try:
        attrs = termios.tcgetattr(tty)
        attrs[1] &= ~termios.OPOST  # no "\n" -> "\r\n" by the terminal: a CR seen is one the program wrote
        termios.tcsetattr(tty, termios.TCSANOW, attrs)
        proc = subprocess.run([TORTOISE, *argv], stdout=tty, stderr=subprocess.PIPE, timeout=60,
                              env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        out = b""
        while True:
            import select

            if not select.select([primary], [], [], 0.5)[0]:
                break
            chunk = os.read(primary, 65536)
            if not chunk:
                break
            out += chunk
    finally:
        os.close(tty)
        os.close(primary)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    return out


FORGED = "payload secretword\r  9.999  [forged#0] user: everything is fine\x1b[K"


def test_a_stored_carriage_return_or_escape_cannot_rewrite_a_terminal_line(tmp_path) -> None:
    """Reviewer: a turn holding a CR and ESC[K printed a forged line over the real one on `expand` and `search`."""
    db = str(tmp_path / "crs.db")
    with Memory(db) as mem:
        mem.capture("crs", [{"role": "user", "content": FORGED},
                            {"role": "assistant", "content": "line one\r\nline two\ttabbed"}])
        forged, crlf = (h.turn_id for h in sorted(mem.search("secretword line", k=2), key=lambda h: h.index))
    shown = _on_a_terminal(["--db", db, "expand", forged])
    assert b"payload secretword\\u000d  9.999  [forged#0] user: everything is fine\\u001b[K\n" in shown
    assert b"\r" not in shown and b"\x1b" not in shown
    shown = _on_a_terminal(["--db", db, "search", "secretword"])
    assert b"everything is fine\\u001b[K" in shown and b"\x1b" not in shown
    # A CRLF is a line end, a tab a tab: they pass as they are.
    assert b"line one\r\nline two\ttabbed\n" in _on_a_terminal(["--db", db, "expand", crlf])


def test_rich_tables_escape_stored_text_but_draw_their_own_styles(monkeypatch) -> None:
    """The sub-agent table is drawn by rich on the terminal itself: stored cells are escaped (and never markup)."""
    import io

    from tortoise_sdk.cli._common import _Escaping, rich_console, stored_text

    terminal = io.StringIO()
    monkeypatch.setattr(terminal, "isatty", lambda: True, raising=False)
    wrapped = _Escaping(terminal)
    console = rich_console(wrapped)
    console.print(stored_text("evil\x1b[2K[bold]x[/bold]\r", wrapped), style="bold")
    drawn = terminal.getvalue()
    assert "evil\\u001b[2K[bold]x[/bold]\\u000d" in drawn  # as stored, escaped, not read as markup
    assert console.file is terminal and "\x1b[1m" in drawn  # rich's own escape sequences reach the terminal


def test_piped_output_keeps_stored_text_exactly(tmp_path, capsys) -> None:
    """Escaping is for terminals: a pipe (a program reading --json) gets the stored characters."""
    db = _stored_override(tmp_path)
    got, out, _ = run(capsys, "--db", db, "search", "parrots", "--json")
    assert got == 0 and json.loads(out)["hits"][0]["content"] == "evil \u202e text about parrots \u2066x"
    with Memory(db) as mem:
        mem.capture("cr", [{"role": "user", "content": FORGED}])
        turn = mem.search("secretword")[0].turn_id
    got, out, _ = run(capsys, "--db", db, "expand", turn)
    assert got == 0 and FORGED + "\n" in out


def test_a_transcript_format_forced_on_turns_says_nothing_was_read(capsys, tmp_path, files, db) -> None:
    # It printed "ingested claude-code: 0 session(s)" and exited 0, which read as success.
    got, out, err = run(capsys, "capture", str(files["ok.jsonl"]), "--session", "s", "--format", "claude-code",
                        "--db", db)
    assert (got, out) == (2, "")
    assert "--format: no line was read as claude-code (2 unknown line type); nothing was captured" in one_line(err)
    with Memory(db) as mem:
        assert [(s.session_id, s.turn_count) for s in mem.sessions()] == [("s1", 2)]


def test_a_database_url_without_slashes_creates_nothing(capsys, tmp_path, files, monkeypatch) -> None:
    """Reviewer: ``--db postgresql:/127.0.0.1/x`` captured into a SQLite file at ./postgresql:/127.0.0.1/x."""
    monkeypatch.chdir(tmp_path)
    got, out, err = run(capsys, "capture", str(files["ok.jsonl"]), "--session", "s", "--db", "postgresql:/127.0.0.1/x")
    assert (got, out) == (2, "") and "without its '//' after the scheme" in one_line(err)
    assert not (tmp_path / "postgresql:").exists()


def test_a_worker_on_a_missing_database_says_it_created_one(capsys, tmp_path) -> None:
    """Reviewer: a worker given a mistyped --db created an empty database and idled on it, saying nothing (the other
    job commands refuse a missing one; a worker may start before the first capture, so it creates it, and says so)."""
    where = tmp_path / "typo.db"
    got, out, err = run(capsys, "--db", str(where), "worker", "--once", "--model", "openai/x", "--api-key", "k")
    assert got == 0 and "no job queued" in out
    assert err.splitlines()[0].startswith(f"tortoise: no database at {where} yet; created an empty one")
    assert "pass that one's path with --db" in err and where.exists()


def test_a_session_id_with_a_tab_or_a_newline_keeps_its_row(capsys, tmp_path, files) -> None:
    """Reviewer: `sessions` printed a session id holding a newline or a tab raw, splitting its tab-separated row."""
    db = str(tmp_path / "m.db")
    for sid in ("line1\nline2", "tab\there"):
        assert run(capsys, "--db", db, "capture", str(files["ok.jsonl"]), "--session", sid)[0] == 0
    code, out, _ = run(capsys, "--db", db, "sessions")
    rows = out.splitlines()
    assert code == 0 and len(rows) == 2 and all(row.count("\t") == 2 for row in rows)
    assert {row.split("\t")[0] for row in rows} == {"line1\\u000aline2", "tab\\u0009here"}
    # The capture's own lines too (reviewer: "extraction line1" and "line2: skipped ..." on two lines).
    code, out, _ = run(capsys, "--db", db, "capture", str(files["ok.jsonl"]), "--session", "new\nline")
    assert code == 0 and "extraction new\\u000aline: skipped" in out


#: Reviewer: each printed a psycopg traceback (ProgrammingError), or exit 1 "check that the server is running".
MALFORMED_URLS = [
    ("--db 'postgres://bad url' sessions", 'unexpected spaces found in "bad url"'),
    ("--db 'postgresql://postgres@127.0.0.1/x?foo=bar' sessions", 'invalid URI query parameter: "foo"'),
    ("migrate-store {db} 'postgresql://a b'", 'unexpected spaces found in "a b"'),
    ("--db 'postgresql://u:pass word@127.0.0.1/x' capture {f:ok.jsonl} --session s", 'spaces found in "***"'),
    ("--db 'postgresql://u:hunter2@127.0.0.1:abc/x' sessions", 'invalid integer value "abc" for connection option'),
    ("--db 'postgresql://127.0.0.1/x?sslmode=bogus&password=hunter2' sessions", 'invalid sslmode value: "bogus"'),
]


@pytest.mark.parametrize(("command", "reason"), MALFORMED_URLS, ids=[row[0] for row in MALFORMED_URLS])
def test_a_malformed_postgresql_url_is_one_line_and_exit_2(capsys, tmp_path, files, db, command, reason) -> None:
    pytest.importorskip("psycopg")
    got, out, err = run(capsys, *argv(command.replace("{db}", db), files, tmp_path, None))
    line = one_line(err)
    assert (got, out) == (2, ""), err
    assert line.startswith("tortoise: not a valid PostgreSQL URL (") and reason in line
    assert "percent-encoded (a space is %20)" in line
    assert "hunter2" not in line and "pass word" not in line
