"""What the command line says when a newcomer goes astray (issue 26): one table, one row per message.

Each row: the command, whether the database holds the demo-like namespace ``demo`` first, the exit
code, and text the output must hold (``out``, ``err``) or must not (``not_err``).
"""

from __future__ import annotations

import json
import shlex

import pytest

from conftest import run_cli as run
from tortoise_sdk import Memory, __version__
from tortoise_sdk.reflex import DEFAULT_TIME_BUDGET_MS

ROWS = [
    # --version
    ("--version", False, 0, {"out": f"tortoise-sdk {__version__}"}),
    # an unknown option names the near one and shows the command's usage
    ("search Biscuit --nmespace demo", True, 2,
     {"err": ["tortoise search: unknown option --nmespace; did you mean --namespace?", "usage: tortoise search"]}),
    ("--nmespace demo sessions", True, 2,
     {"err": ["tortoise: unknown option --nmespace; did you mean --namespace?", "usage: tortoise "]}),
    # Reviewer: before the command, the option's value was read as the command ("unknown command 'x'").
    ("--nmespace x sessions", True, 2,
     {"err": ["tortoise: unknown option --nmespace; did you mean --namespace?", "usage: tortoise "],
      "not_err": ["unknown command"]}),
    ("--db-path x sessions", True, 2, {"err": ["tortoise: unknown option --db-path"], "not_err": ["unknown command"]}),
    ("sessions --jsn", True, 2, {"err": ["did you mean --json?", "usage: tortoise sessions"]}),
    ("memories --namespace=demo --sesion s1", True, 2, {"err": ["did you mean --session?"]}),
    # an unknown command names the near one, as an unknown option does
    ("serach Biscuit", False, 2, {"err": ["tortoise: unknown command 'serach'; did you mean search?"],
                                  "not_err": ["choose from"]}),
    ("zzzzzz", False, 2, {"err": ["tortoise: unknown command 'zzzzzz' (see tortoise --help)"], "not_err": ["did you mean"]}),
    ("sessions --zzzzzz", True, 2, {"err": ["tortoise sessions: unknown option --zzzzzz", "usage: tortoise sessions"],
                                    "not_err": ["did you mean"]}),
    # forget with no terminal says what to add
    ("forget --session s1", True, 2,
     {"err": ["add --yes to forget without asking"], "not_err": ["yes: stdin", "--yes: stdin"]}),
    # an empty namespace names the ones that hold data; the exit code is unchanged
    ("search Biscuit", True, 0,
     {"err": ["namespace 'default' is empty; data is in: demo (1 sessions, 2 turns, 1 memories). "
              "Add --namespace demo"]}),
    ("sessions", True, 0, {"err": ["data is in: demo", "Add --namespace demo"]}),
    ("memories", True, 0, {"err": ["data is in: demo"]}),
    ("stats", True, 0, {"err": ["data is in: demo"]}),
    ("sessions --json", True, 0, {"out": "[]", "err": ["data is in: demo"]}),
    ("sessions --namespace demo", True, 0, {"out": "s1", "not_err": ["is empty"]}),
    ("search Biscuit --namespace demo", True, 0, {"out": "Biscuit", "not_err": ["is empty"]}),
    # in a store of two turns every word is in half of them: the 0.000 scores say why
    ("search Biscuit --namespace demo", True, 0, {"err": ["scores are near 0: every word searched is in half"]}),
    # Reviewer: "every word searched is in half the turns" when one of them is in no turn.
    ("search 'Biscuit zebra' --namespace demo", True, 0,
     {"err": ["scores are near 0: biscuit is in half the turns or more, too common for BM25 to tell turns apart "
              "(usual in a store of a few turns), and zebra in none"], "not_err": ["every word"]}),
    # Reviewer: a session that is not stored was answered "capture with a model configured".
    ("memories --namespace demo --session nosuch", True, 0,
     {"err": ["no memories: no session 'nosuch' is stored in namespace 'demo' (`tortoise sessions` lists them)"],
      "not_err": ["capture with a model"]}),
    ("memories --namespace demo --session s1", True, 0,
     {"err": ["no memories (capture with a model configured"], "not_err": ["no session"]}),
    ("sessions", False, 0, {"err": ["namespace 'default' is empty, and so is this database", "tortoise demo"]}),
    # tortoise namespaces
    ("namespaces", True, 0, {"out": "demo\t1 sessions\t2 turns\t1 memories"}),
    ("namespaces", False, 0, {"err": ["no namespace holds data yet"]}),
]


@pytest.mark.parametrize("argv, seeded, code, expect", ROWS, ids=[r[0] for r in ROWS])
def test_cli_message(capsys, db, monkeypatch, argv, seeded, code, expect):
    with Memory(db, namespace="demo") as mem:
        if seeded:
            mem.append("s1", [{"role": "user", "content": "My dog Biscuit is a beagle"},
                              {"role": "assistant", "content": "Lovely."}])
            mem.remember("Maya's dog Biscuit is a beagle")
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    got, out, err = run(capsys, "--db", db, *shlex.split(argv))
    assert got == code, (out, err)
    if "out" in expect:
        assert expect["out"] in out
    for text in expect.get("err", []):
        assert text in err
    for text in expect.get("not_err", []):
        assert text not in err


def test_search_scores_that_tell_turns_apart_need_no_note(capsys, db):
    with Memory(db, namespace="demo") as mem:
        mem.append("s1", [{"role": "user", "content": text} for text in
                          ("My dog Biscuit is a beagle", "The weather is grey", "I cook pasta", "Tea please")])
    code, out, err = run(capsys, "--db", db, "--namespace", "demo", "search", "Biscuit")
    assert code == 0 and "Biscuit" in out and float(out.split()[0]) > 0.1
    assert "scores are near 0" not in err


def test_namespaces_json(capsys, db):
    with Memory(db, namespace="b") as mem:
        mem.append("s", {"role": "user", "content": "x"})
    with Memory(db, namespace="a") as mem:
        mem.remember("a fact")
    code, out, _ = run(capsys, "--db", db, "namespaces", "--json")
    assert code == 0
    assert json.loads(out) == [{"name": "a", "sessions": 0, "turns": 0, "memories": 1},
                               {"name": "b", "sessions": 1, "turns": 1, "memories": 0}]


@pytest.mark.parametrize("command, hidden, shown", [
    ("migrate-store", ["--db", "--namespace"], ["--json"]),
    ("vacuum", ["--namespace"], ["--db"]),
    ("namespaces", ["--namespace"], ["--db", "--json"]),
    ("eval", ["--db", "--namespace"], []),
    ("search", [], ["--db", "--namespace"]),
])
def test_help_lists_only_the_options_that_apply(capsys, command, hidden, shown):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    for option in hidden:
        assert option not in out
    for option in shown:
        assert option in out


def test_the_demo_ends_with_a_command_that_finds_what_it_captured(capsys, db):
    code, out, _ = run(capsys, "--db", db, "demo")
    assert code == 0
    last = out.strip().splitlines()[-1]
    assert last.startswith("next, try: tortoise search Biscuit --namespace demo")
    code, found, err = run(capsys, *shlex.split(last.split(": ", 1)[1])[1:])
    assert code == 0 and "Biscuit" in found and "is empty" not in err


def _seed_demo(db: str) -> str:
    """The ``demo`` namespace holds a session; returns one of its turn ids."""
    with Memory(db, namespace="demo") as mem:
        mem.append("s1", [{"role": "user", "content": "My dog Biscuit is a beagle"},
                          {"role": "assistant", "content": "Lovely."}])
        return mem.search("Biscuit beagle")[0].turn_id


def _window(tmp_path, text: str = "what is my dog Biscuit?") -> str:
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"role": "user", "content": text}) + "\n")
    return str(path)


def test_context_in_an_empty_namespace_names_the_ones_that_hold_data(capsys, db, tmp_path):
    _seed_demo(db)
    window = _window(tmp_path)
    code, out, err = run(capsys, "--db", db, "context", "--window", window)
    assert code == 0 and out == ""
    assert "namespace 'default' is empty; data is in: demo" in err and "Add --namespace demo" in err
    assert "nothing relevant" not in err
    code, out, err = run(capsys, "--db", db, "context", "--window", window, "--json")
    assert code == 0 and json.loads(out)["block"] == "" and "data is in: demo" in err
    code, out, err = run(capsys, "--db", db, "--namespace", "demo", "context", "--window", window)
    assert code == 0 and "Biscuit" in out and "is empty" not in err
    # a namespace with data and nothing relevant says just that
    code, out, err = run(capsys, "--db", db, "--namespace", "demo", "context", "--window",
                         _window(tmp_path, "what is the capital of Peru?"))
    assert code == 0 and out == "" and "nothing relevant" in err and "is empty" not in err


def test_expand_in_the_wrong_namespace_names_where_the_id_is(capsys, db):
    turn_id = _seed_demo(db)
    code, _, err = run(capsys, "--db", db, "expand", turn_id)
    assert code == 2
    assert f"{turn_id!r} in namespace 'default'" in err
    assert "It is in namespace demo: add --namespace demo" in err
    code, _, err = run(capsys, "--db", db, "expand", "t_doesnotexist")
    assert code == 2 and "data is in: demo (1 sessions, 2 turns, 0 memories)" in err
    code, _, err = run(capsys, "--db", db, "--namespace", "demo", "expand", "t_doesnotexist")
    assert code == 2 and "data is in" not in err  # the namespace holds data: the id is just wrong
    code, out, _ = run(capsys, "--db", db, "--namespace", "demo", "expand", turn_id)
    assert code == 0 and "Biscuit" in out
    with Memory(db, namespace="demo") as mem:
        memory_id = mem.remember("Maya's dog Biscuit is a beagle").id
    code, _, err = run(capsys, "--db", db, "expand", memory_id)
    assert code == 2 and "It is in namespace demo: add --namespace demo" in err


@pytest.mark.parametrize("reason, said, not_said", [
    ("timeout", ["ran out of its 50 ms time budget", "--time-budget-ms"], ["nothing relevant"]),
    (None, ["nothing relevant"], ["time"]),
    ("store_error", ["could not be read"], ["nothing relevant"]),
    ("internal_error: KeyError", ["internal error (KeyError)"], ["nothing relevant"]),
])
def test_an_empty_block_says_why_by_its_degraded_reason(capsys, db, tmp_path, monkeypatch, reason, said, not_said):
    from tortoise_sdk import MemoryBlock

    _seed_demo(db)
    monkeypatch.setattr(Memory, "context", lambda self, *a, **k: MemoryBlock(degraded_reason=reason))
    code, out, err = run(capsys, "--db", db, "--namespace", "demo", "context", "--window", _window(tmp_path))
    assert code == 0 and out == ""
    for text in said:
        assert text in err
    for text in not_said:
        assert text not in err


@pytest.mark.parametrize("flag, passed", [([], DEFAULT_TIME_BUDGET_MS), (["--time-budget-ms", "500"], 500.0),
                                          (["--time-budget-ms", "0"], None)])
def test_context_passes_its_time_budget(capsys, db, tmp_path, monkeypatch, flag, passed):
    from tortoise_sdk import MemoryBlock

    _seed_demo(db)
    seen = {}

    def context(self, *args, **kwargs):
        seen.update(kwargs)
        return MemoryBlock(degraded_reason="timeout")

    monkeypatch.setattr(Memory, "context", context)
    code, _, err = run(capsys, "--db", db, "--namespace", "demo", "context", "--window", _window(tmp_path), *flag)
    assert code == 0 and seen["time_budget_ms"] == passed
    code, _, err = run(capsys, "--db", db, "context", "--window", _window(tmp_path), "--time-budget-ms", "-1")
    assert code == 2 and "--time-budget-ms" in err


def test_a_max_tokens_too_small_is_exit_2_as_a_bad_budget_is(capsys, db, tmp_path):
    _seed_demo(db)
    window = _window(tmp_path)
    code, _, err = run(capsys, "--db", db, "--namespace", "demo", "context", "--window", window, "--max-tokens", "10")
    assert code == 2 and "max_tokens: 10 " in err
    assert run(capsys, "--db", db, "--namespace", "demo", "context", "--window", window, "--budget", "9")[0] == 2
    assert run(capsys, "--db", db, "--namespace", "demo", "context", "--window", window)[0] == 0


def test_a_missing_postgresql_database_says_how_to_create_it(capsys):
    from pgtemp import pg_base_url, require_postgres

    require_postgres()
    url = pg_base_url().rsplit("/", 1)[0] + "/tortoise_no_such_database_x"
    code, _, err = run(capsys, "search", "x", "--db", url)
    assert code == 1
    assert "does not exist; create it first (createdb" in err and "tortoise_no_such_database_x)" in err, err


def test_the_library_advice_reaches_the_command_line_in_its_terms(capsys, db, tmp_path):
    """Reviewer: a shell user was told to run mem.extract(session_id, full=True), mem.sessions(), mem.memories(),
    mem.process_pending(), and that "since" (not --since) was not a time."""
    turns = tmp_path / "t.jsonl"
    turns.write_text(json.dumps({"role": "user", "content": "I adopted a cat named Pixel."}) + "\n")
    model = ["--model", "openai/x", "--api-key", "k"]
    _, out, _ = run(capsys, "--db", db, "capture", str(turns), "--session", "bg", "--extract", "background", *model)
    said = [out]
    for args in (["extract", "nosuch", *model], ["expand", "m_nothere"], ["expand", "zzz"],
                 ["subagents", "--health", "--since", "garbage"]):
        code, out, err = run(capsys, "--db", db, *args)
        assert code == 2, (args, err)
        said.append(err)
    text = "\n".join(said)
    assert "mem." not in text and "MemoryBlock" not in text, text
    assert "run by `tortoise worker`, now by `tortoise flush`" in said[0]
    assert "list them with `tortoise sessions`" in said[1] and "list them with `tortoise memories`" in said[2]
    assert "`tortoise search`" in said[3] and said[4].startswith("tortoise: --since: 'garbage' is not a time")


def test_job_commands_on_an_empty_namespace_name_where_the_data_is(capsys, db, tmp_path):
    """Reviewer: jobs, flush and worker --once of a mistyped namespace said "no jobs" / "nothing pending" / "no job
    queued" and nothing more, where search, sessions and stats name the namespaces holding data."""
    turns = tmp_path / "t.jsonl"
    turns.write_text(json.dumps({"role": "user", "content": "I adopted a cat named Pixel."}) + "\n")
    assert run(capsys, "--db", db, "--namespace", "maya", "capture", str(turns), "--session", "s")[0] == 0
    model = ["--model", "openai/x", "--api-key", "k"]
    for args, said in ((["jobs"], "no jobs"), (["flush", *model], "nothing pending"),
                       (["worker", "--once", *model], "no job queued")):
        code, out, err = run(capsys, "--db", db, "--namespace", "mya", *args)
        assert (code, out.strip()) == (0, said), args
        assert "namespace 'mya' is empty; data is in: maya" in err, args


@pytest.mark.parametrize(("answer", "code", "said"), [("n\n", 0, "not confirmed; nothing was forgotten"),
                                                      ("y\n", 0, "forgot session s1")])
def test_forget_answered_no_forgets_nothing_and_exits_0(capsys, db, monkeypatch, answer, code, said):
    """Reviewer: answering n exited 1, the code of a store that cannot be reached."""
    import io

    with Memory(db) as mem:
        mem.append("s1", [{"role": "user", "content": "My dog Biscuit is a beagle"}])
    stdin = io.StringIO(answer)
    stdin.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stdin", stdin)
    got, out, err = run(capsys, "--db", db, "forget", "--session", "s1")
    assert got == code and said in out + err and "Traceback" not in err
    with Memory(db) as mem:
        assert [s.session_id for s in mem.sessions()] == ([] if answer.startswith("y") else ["s1"])
