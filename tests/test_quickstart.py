"""The newcomer walkthrough: the README's quick start runs as written and its shell
commands find what it stored; the offline LangChain example runs."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import run_cli as run

PAGE = Path(__file__).resolve().parent.parent / "README.md"


def blocks(kind: str) -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    text = text[text.index("## Quick start"):text.index("\n## ", text.index("## Quick start") + 3)]
    if kind == "python":
        return re.findall(r"```python\n(.*?)```", text, re.S)
    shell = "".join(re.findall(r"```sh\n(.*?)```", text, re.S))
    return [line.strip() for line in shell.splitlines() if line.startswith("tortoise ")]


def test_the_quick_start_runs_as_written(tmp_path, capsys, monkeypatch):
    (code,) = blocks("python")
    script = tmp_path / "quickstart.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    block = done.stdout[done.stdout.index("[tortoise memory]"):]
    assert '"My dog Biscuit is a two-year-old beagle." ref:' in block  # Friday's block quotes Monday
    assert "['monday', 'friday'] 4 turns on Monday" in done.stdout
    # Run again on the same file, as a user trying it twice does: a new conversation, nothing replayed or refused.
    again = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "['monday', 'friday'] 8 turns on Monday" in again.stdout
    monkeypatch.chdir(tmp_path)
    commands = blocks("shell")
    assert len(commands) == 2
    for line in commands:
        code_, out, err = run(capsys, *shlex.split(line)[1:])
        assert code_ == 0 and out.strip() and "is empty" not in err, (line, err)


def test_the_offline_langchain_example_runs(tmp_path):
    """examples/langchain_agent.py: a fake chat model with tool binding calls ``remember``; a later session's
    memory block brings the fact back."""
    example = PAGE.parent / "examples" / "langchain_agent.py"
    done = subprocess.run([sys.executable, str(example), "--db", str(tmp_path / "e.db")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "[monday] assistant: Done: remembered \"Maya's dog Biscuit is a beagle\"" in done.stdout
    assert "[friday] assistant: From memory: Maya's dog Biscuit is a beagle" in done.stdout
