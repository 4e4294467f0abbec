"""Where `tortoise hooks install` writes (issue 26): personal by default, shared on request, named by --print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tortoise_sdk.cli import main


def test_a_project_install_is_personal_unless_shared(tmp_path, capsys, monkeypatch) -> None:
    """Issue 26: settings.local.json (not committed) by default; --shared writes settings.json with no path of
    this machine in it (the command is `tortoise` from PATH, --db as given)."""
    monkeypatch.chdir(tmp_path)
    assert main(["hooks", "install", "--project", str(tmp_path), "--db", "memory.db"]) == 0
    local = json.loads((tmp_path / ".claude" / "settings.local.json").read_text())
    assert not (tmp_path / ".claude" / "settings.json").exists()
    assert str(tmp_path / "memory.db") in local["hooks"]["Stop"][0]["hooks"][0]["command"]  # personal: absolute
    assert "settings.local.json" in capsys.readouterr().err
    assert main(["hooks", "install", "--project", str(tmp_path), "--shared", "--db", "memory.db",
                 "--namespace", "team"]) == 0
    shared = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    commands = {h["command"] for groups in shared["hooks"].values() for g in groups for h in g["hooks"]}
    assert commands == {"tortoise --db memory.db --namespace team hook"}
    # Both files hold our hooks: Claude Code would run both, so each event would be captured twice; install says so.
    err = capsys.readouterr().err
    assert f"tortoise hooks are also in {tmp_path / '.claude' / 'settings.local.json'}" in err
    assert f"`tortoise hooks uninstall --project {tmp_path}` removes that one" in err
    assert main(["hooks", "uninstall", "--project", str(tmp_path)]) == 0
    assert not (tmp_path / ".claude" / "settings.local.json").exists()  # it held only our hooks: no `{}` left
    assert json.loads((tmp_path / ".claude" / "settings.json").read_text()) == shared  # the shared file untouched
    assert "which held nothing else: the file is gone" in capsys.readouterr().err


def test_a_shared_install_warns_of_a_db_in_this_machines_home(tmp_path, capsys) -> None:
    # `--db ~/.tortoise/memory.db` unquoted: the shell wrote this machine's home into the file the team commits.
    assert main(["hooks", "install", "--project", str(tmp_path), "--shared", "--db",
                 str(Path.home() / ".tortoise" / "memory.db")]) == 0
    assert "names this machine's home directory, in a file the team commits" in capsys.readouterr().err
    assert main(["hooks", "install", "--project", str(tmp_path), "--shared", "--db", "memory.db"]) == 0
    assert "home directory" not in capsys.readouterr().err


@pytest.mark.parametrize("where, name", [([], ".claude/settings.local.json"), (["--shared"], ".claude/settings.json"),
                                         (["--user"], ".claude/settings.json")])
def test_print_names_the_file_it_would_write(tmp_path, capsys, where, name) -> None:
    project = [] if where == ["--user"] else ["--project", str(tmp_path)]
    assert main(["hooks", "install", *project, *where, "--print"]) == 0
    out, err = capsys.readouterr()
    base = Path.home() if where == ["--user"] else tmp_path
    assert json.loads(out)["hooks"] and f"would write {base / name} (nothing written)" in err
    assert not (tmp_path / ".claude").exists()


def test_shared_and_user_together_are_refused(capsys) -> None:
    assert main(["hooks", "install", "--user", "--shared"]) == 2
    assert "pass one of them" in capsys.readouterr().err


def test_a_bare_project_flag_means_the_current_directory(tmp_path, capsys, monkeypatch) -> None:
    """The README writes `tortoise hooks install --project --db …`; a DIR-less --project is the current directory."""
    monkeypatch.chdir(tmp_path)
    assert main(["hooks", "install", "--project", "--db", "memory.db"]) == 0
    assert (tmp_path / ".claude" / "settings.local.json").is_file()


@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_a_project_directory_that_does_not_exist_is_refused_and_not_created(tmp_path, capsys, action) -> None:
    """A mistyped --project DIR would otherwise get a new directory tree holding only .claude/."""
    missing = tmp_path / "no-such-project"
    assert main(["hooks", action, "--project", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--project" in err and str(missing) in err
    assert not missing.exists()
    (tmp_path / "a-file").write_text("x")
    assert main(["hooks", action, "--project", str(tmp_path / "a-file")]) == 2
    assert "not a directory" in capsys.readouterr().err


def _commands(settings: Path) -> set[str]:
    data = json.loads(settings.read_text())
    return {h["command"] for groups in data["hooks"].values() for g in groups for h in g["hooks"]}


def test_a_project_install_names_its_namespace_after_the_project(tmp_path, capsys) -> None:
    """Reviewer: with one shared namespace a Python project's prompt got a Go project's code review. Installed in a
    project without --namespace, the hooks write to a namespace named after its directory, and install says so."""
    projects = {name: tmp_path / name for name in ("spotter", "claude-code-log")}
    for name, where in projects.items():
        where.mkdir()
        assert main(["hooks", "install", "--project", str(where), "--db", str(tmp_path / "m.db")]) == 0
        (command,) = _commands(where / ".claude" / "settings.local.json")
        assert command.endswith(f"--namespace {name} hook"), command
        err = capsys.readouterr().err
        assert f"namespace {name!r}: `tortoise search WORDS --db {tmp_path / 'm.db'} --namespace {name}`" in err
        assert "no model given" in err and "no extraction is queued" in err
    # --namespace still wins, and a user-wide install keeps the one shared namespace, saying what that means.
    assert main(["hooks", "install", "--project", str(projects["spotter"]), "--namespace", "team"]) == 0
    assert all(c.endswith("--namespace team hook") for c in _commands(projects["spotter"] / ".claude" /
                                                                       "settings.local.json"))
    capsys.readouterr()
    assert main(["hooks", "install", "--user"]) == 0
    assert not any("--namespace" in c for c in _commands(Path.home() / ".claude" / "settings.json"))
    assert "every project shares it, so a block can quote another project's sessions" in capsys.readouterr().err


def test_install_says_which_worker_extracts_with_the_model_given(tmp_path, capsys, monkeypatch) -> None:
    """Reviewer: install said `tortoise worker --model MODEL` though a model was given, and with none the worker
    said only "no job queued"."""
    monkeypatch.delenv("TORTOISE_DB")  # the default database (in the test's HOME): no --db in the commands
    project = tmp_path / "app"
    project.mkdir()
    assert main(["hooks", "install", "--project", str(project), "--model", "openai/gpt-4o-mini"]) == 0
    err = capsys.readouterr().err
    assert "`tortoise worker --namespace app --model openai/gpt-4o-mini` extracts it" in err
    assert "20 turns or 5 minutes after its last capture" in err
    monkeypatch.setenv("TORTOISE_MODEL", "ollama/llama3")
    assert main(["hooks", "install", "--project", str(project)]) == 0
    err = capsys.readouterr().err
    assert "--model ollama/llama3` extracts it" in err
    # ... but the command names no model: Claude Code's environment decides, and install says so.
    assert "$TORTOISE_MODEL is set in this shell, not in the hook's command" in err
    # A dry run of an uninstall that would leave nothing says it would remove the file, as the real one does.
    assert main(["hooks", "uninstall", "--project", str(project), "--print"]) == 0
    assert "would remove " + str(project / ".claude" / "settings.local.json") in capsys.readouterr().err


@pytest.mark.parametrize("argv, namespace", [
    (["--namespace", "default"], "default"),   # given, even as the default's own name: kept (an upgrade's memory)
    (["--namespace=default"], "default"),
    ([], "-dash"),                             # a name that starts like an option is written --namespace=-dash
])
def test_a_given_namespace_is_kept_and_an_odd_project_name_still_parses(tmp_path, capsys, argv, namespace) -> None:
    """Reviewer: an explicit --namespace default became the project's name, and a project called -dash wrote a
    command whose every event exited 2 (`--namespace -dash` reads as an option)."""
    project = tmp_path / "-dash"
    project.mkdir()
    assert main(["hooks", "install", "--project", str(project), "--db", str(tmp_path / "m.db"), *argv]) == 0
    (command,) = _commands(project / ".claude" / "settings.local.json")
    if namespace == "default":
        err = capsys.readouterr().err
        assert "--namespace" not in command and "a --user install and any other project given --namespace default " \
            "share it" in err and "drop --namespace to give this project its own" in err
        return
    assert command.endswith("--namespace=-dash hook")
    import io
    import shlex
    import sys

    sys_stdin = sys.stdin
    try:  # the command as Claude Code runs it parses and exits 0
        sys.stdin = io.StringIO(json.dumps({"hook_event_name": "Stop", "session_id": "s", "cwd": str(project)}))
        assert main(shlex.split(command)[1:]) == 0
    finally:
        sys.stdin = sys_stdin
    assert "expected one argument" not in capsys.readouterr().err


def test_a_relative_project_directory_is_named_by_what_it_resolves_to(tmp_path, capsys, monkeypatch) -> None:
    (tmp_path / "alpha" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "alpha" / "sub")
    assert main(["hooks", "install", "--project", "..", "--print"]) == 0
    assert "--namespace alpha hook" in capsys.readouterr().out


def test_two_projects_installed_apart_never_see_each_other(tmp_path, capsys, monkeypatch) -> None:
    """What the per-project namespace buys, end to end: each project's hook command, run as Claude Code runs it,
    stores its own session and finds it; the other project's prompt on the same words gets nothing."""
    import io
    import shlex
    import sys

    db = tmp_path / "m.db"
    said = {"spotter": "the goreleaser notarize step retries three times before it gives up",
            "site": "the hero banner uses the serif font from the brand kit"}
    argv = {}
    for name in said:
        (tmp_path / name).mkdir()
        assert main(["hooks", "install", "--project", str(tmp_path / name), "--db", str(db)]) == 0
        argv[name] = shlex.split(next(iter(_commands(tmp_path / name / ".claude" / "settings.local.json"))))[1:]
    capsys.readouterr()

    def hook(name: str, event: dict) -> dict | None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"cwd": str(tmp_path / name), **event})))
        assert main(argv[name]) == 0
        out = capsys.readouterr().out
        return json.loads(out) if out.strip() else None

    for name, text in said.items():
        transcript = tmp_path / f"{name}.jsonl"
        transcript.write_text(json.dumps({"type": "user", "sessionId": f"s-{name}", "uuid": f"u-{name}",
                                          "timestamp": "2026-01-05T10:00:00Z",
                                          "message": {"role": "user", "content": text}}) + "\n")
        hook(name, {"session_id": f"s-{name}", "transcript_path": str(transcript), "hook_event_name": "SessionEnd",
                    "reason": "other"})
    ask = {"session_id": "later", "transcript_path": str(tmp_path / "none.jsonl"), "hook_event_name": "UserPromptSubmit",
           "prompt": "how many times does the goreleaser notarize step retry?"}
    (tmp_path / "none.jsonl").write_text("")
    mine = hook("spotter", ask)
    assert mine is not None and said["spotter"] in mine["hookSpecificOutput"]["additionalContext"]
    assert hook("site", ask) is None


def test_two_projects_of_one_name_get_two_namespaces(tmp_path, capsys) -> None:
    """Installed in ~/work/app and ~/play/app with one database, the hooks of each must not quote the other's
    sessions: the first claims `app`, the second gets `app-<hash of its path>`, and each install again keeps its own."""
    db = str(tmp_path / "m.db")
    first, second = tmp_path / "work" / "app", tmp_path / "play" / "app"
    for where in (first, second):
        where.mkdir(parents=True)
    assert main(["hooks", "install", "--project", str(first), "--db", db]) == 0
    (command,) = _commands(first / ".claude" / "settings.local.json")
    assert command.endswith("--namespace app hook"), command
    assert "another project" not in capsys.readouterr().err
    assert main(["hooks", "install", "--project", str(second), "--db", db]) == 0
    (command,) = _commands(second / ".claude" / "settings.local.json")
    other = command.split("--namespace ")[1].split()[0]
    assert other.startswith("app-") and len(other) == len("app-") + 6, command
    err = capsys.readouterr().err
    assert f"namespace 'app' holds the sessions of {first}, another project of this name" in err
    assert f"this project's hooks write to {other!r}" in err and f"--namespace {other}` reads it" in err
    # Installing again changes nothing for either project.
    for where, name in ((first, "app"), (second, other)):
        assert main(["hooks", "install", "--project", str(where), "--db", db]) == 0
        assert all(c.endswith(f"--namespace {name} hook") for c in _commands(where / ".claude" /
                                                                              "settings.local.json"))
    capsys.readouterr()
    # A --namespace given is kept even when it is another project's, with a warning that says what it means.
    assert main(["hooks", "install", "--project", str(second), "--db", db, "--namespace", "app"]) == 0
    assert all(c.endswith("--namespace app hook") for c in _commands(second / ".claude" / "settings.local.json"))
    assert f"warning: namespace 'app' holds the sessions of {first}" in capsys.readouterr().err


def test_a_dry_run_opens_no_database_and_claims_nothing(tmp_path, capsys) -> None:
    """Reviewer: --print wrote the claim into an existing database (and a whole schema into an empty
    PostgreSQL one). A dry run opens no database; it says which name install would take instead."""
    from tortoise_sdk import Memory

    first, second = tmp_path / "work" / "app", tmp_path / "play" / "app"
    for where in (first, second):
        where.mkdir(parents=True)
    db = tmp_path / "m.db"
    assert main(["hooks", "install", "--project", str(first), "--db", str(db), "--print"]) == 0
    assert not db.exists()
    assert main(["hooks", "install", "--project", str(second), "--db", str(db)]) == 0  # claims `app`
    before = db.read_bytes()
    capsys.readouterr()
    assert main(["hooks", "install", "--project", str(first), "--db", str(db), "--print"]) == 0
    assert db.read_bytes() == before
    assert "--print opens no database" in capsys.readouterr().err
    with Memory(str(db), namespace="app") as mem:
        assert mem.cursor("hooks:project").value == {"dir": str(second)}


def test_an_install_refused_for_its_settings_file_claims_nothing(tmp_path, capsys) -> None:
    """Reviewer: a settings file install refused ("fix it first, nothing was changed") still claimed `app`, so the
    next project of that name was moved aside."""
    from tortoise_sdk import Memory

    broken, other = tmp_path / "z" / "app", tmp_path / "r" / "app"
    for where in (broken, other):
        (where / ".claude").mkdir(parents=True)
    (broken / ".claude" / "settings.local.json").write_text('{"hooks": "oops"}')
    db = str(tmp_path / "m.db")
    with Memory(db, namespace="app"):
        pass  # the database exists: install reads it
    assert main(["hooks", "install", "--project", str(broken), "--db", db]) == 2
    assert "nothing was changed" in capsys.readouterr().err
    assert main(["hooks", "install", "--project", str(other), "--db", db]) == 0
    (command,) = _commands(other / ".claude" / "settings.local.json")
    assert command.endswith("--namespace app hook"), command


def test_a_moved_project_keeps_its_namespace(tmp_path, capsys) -> None:
    """Reviewer: a project moved to another folder was told its own namespace was another project's. A claim whose
    directory no longer exists passes to the project installed under that name."""
    db = str(tmp_path / "m.db")
    old, new = tmp_path / "mv1" / "app", tmp_path / "mv2" / "app"
    old.mkdir(parents=True)
    assert main(["hooks", "install", "--project", str(old), "--db", db]) == 0
    (tmp_path / "mv1").rename(tmp_path / "mv2")
    capsys.readouterr()
    assert main(["hooks", "install", "--project", str(new), "--db", db]) == 0
    (command,) = _commands(new / ".claude" / "settings.local.json")
    assert command.endswith("--namespace app hook"), command
    assert f"was {old}'s, which no longer exists (moved?): it is this project's now" in capsys.readouterr().err
    # ... and it is recorded: a third project of that name moves aside.
    third = tmp_path / "t" / "app"
    third.mkdir(parents=True)
    assert main(["hooks", "install", "--project", str(third), "--db", db]) == 0
    assert f"holds the sessions of {new}" in capsys.readouterr().err


def test_a_project_under_a_folder_whose_name_is_not_utf8(tmp_path, capsys) -> None:
    """Reviewer: hashing the path crashed on a parent folder whose name is not UTF-8 (install worked before)."""
    import os

    base = tmp_path / os.fsdecode(b"bad\xff")
    first, second = tmp_path / "ok" / "app", base / "app"
    for where in (first, second):
        where.mkdir(parents=True)
    db = str(tmp_path / "m.db")
    assert main(["hooks", "install", "--project", str(first), "--db", db]) == 0
    assert main(["hooks", "install", "--project", str(second), "--db", db]) == 0
    assert "this project's hooks write to 'app-" in capsys.readouterr().err


def test_a_namespace_with_sessions_from_before_the_claim_is_named(tmp_path, capsys) -> None:
    """An older install wrote to `app` without recording its project: install cannot tell whose they are, so it
    claims the name and says how to keep this project apart if they are another's."""
    from tortoise_sdk import Memory

    project = tmp_path / "app"
    project.mkdir()
    db = str(tmp_path / "m.db")
    with Memory(db, namespace="app") as mem:
        mem.capture("s1", [{"role": "user", "content": "the deploy script lives in ops/"}])
    assert main(["hooks", "install", "--project", str(project), "--db", db]) == 0
    assert "already holds sessions, captured before install recorded which project" in capsys.readouterr().err


def test_the_database_install_checked_is_the_one_the_hooks_write_to(tmp_path, capsys, monkeypatch) -> None:
    """Reviewer: with $TORTOISE_DB set and no --db, install checked that database while the command (no --db)
    wrote wherever Claude Code's environment pointed, so two projects named `app` shared a namespace."""
    env_db = tmp_path / "env.db"
    monkeypatch.setenv("TORTOISE_DB", str(env_db))
    project = tmp_path / "play" / "app"
    project.mkdir(parents=True)
    assert main(["hooks", "install", "--project", str(project)]) == 0
    (command,) = _commands(project / ".claude" / "settings.local.json")
    assert f"--db {env_db} --namespace app hook" in command, command
    assert "$TORTOISE_DB" in capsys.readouterr().err
    # Without the variable, the default database: install and the hooks both use it, no --db written.
    monkeypatch.delenv("TORTOISE_DB")
    other = tmp_path / "work" / "app"
    other.mkdir(parents=True)
    assert main(["hooks", "install", "--project", str(other)]) == 0
    (command,) = _commands(other / ".claude" / "settings.local.json")
    assert "--db" not in command and command.endswith("--namespace app hook"), command


def test_a_shared_install_claims_nothing_but_warns_of_another_projects_namespace(tmp_path, capsys) -> None:
    """Reviewer: a --shared install wrote `--namespace app` that another project had claimed in this machine's
    database, with no word. The team's command keeps its name (a teammate's database is their own): it warns."""
    db = tmp_path / "m.db"
    first, second = tmp_path / "play" / "app", tmp_path / "x" / "app"
    for where in (first, second):
        where.mkdir(parents=True)
    assert main(["hooks", "install", "--project", str(first), "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["hooks", "install", "--project", str(second), "--db", str(db), "--shared"]) == 0
    (command,) = _commands(second / ".claude" / "settings.json")
    assert command.endswith("--namespace app hook"), command
    assert f"warning: namespace 'app' holds the sessions of {first}" in capsys.readouterr().err
    # It claimed nothing: a personal install of the second project still moves aside, and the first keeps `app`.
    assert main(["hooks", "install", "--project", str(first), "--db", str(db)]) == 0
    assert "another project" not in capsys.readouterr().err
    # A relative --db is the project's own (the hook runs there): nothing there yet, so nothing to warn of ...
    assert main(["hooks", "install", "--project", str(second), "--db", "memory.db", "--shared"]) == 0
    assert "warning: namespace" not in capsys.readouterr().err and not (second / "memory.db").exists()
    # ... and where the project's own database gave the name to another project, that is the one checked.
    assert main(["hooks", "install", "--project", str(first), "--db", str(second / "memory.db")]) == 0
    capsys.readouterr()
    assert main(["hooks", "install", "--project", str(second), "--db", "memory.db", "--shared"]) == 0
    assert f"warning: namespace 'app' holds the sessions of {first}" in capsys.readouterr().err
