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
    assert main(["hooks", "uninstall", "--project", str(tmp_path)]) == 0
    assert json.loads((tmp_path / ".claude" / "settings.local.json").read_text()) == {}
    assert json.loads((tmp_path / ".claude" / "settings.json").read_text()) == shared  # the shared file untouched
    capsys.readouterr()


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
