"""The annotations a user's type checker reads say what the code takes (a reviewer's: mypy rejected code that runs)."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest

from tortoise_sdk import AsyncMemory, Memory
from tortoise_sdk.adapters.loop import MemorySession
from tortoise_sdk.store.base import Store

ROOT = Path(__file__).resolve().parents[1]


def accepts(hint: Any, value: Any) -> bool:
    """Whether ``value`` is an instance of one of the types the union ``hint`` names (its origin for a generic)."""
    members = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    return any(m is Any or isinstance(value, get_origin(m) or m) for m in members)


class Reply:
    """A client library's message object: an attribute ``content``, no mapping."""

    role = "assistant"
    content = "Salmon kibble."


def test_after_turn_is_typed_to_take_a_client_s_message_object(mem: Memory) -> None:
    """``session.after_turn(text, response.choices[0].message)`` runs (the object is read through ``model_dump``),
    but its hint was ``str | Mapping``: mypy refused the documented call."""
    from openai.types.chat import ChatCompletionMessage

    reply = ChatCompletionMessage(role="assistant", content="Salmon kibble.")
    for fn, names in ((MemorySession.after_turn, ("user_msg", "assistant_msg")),
                      (MemorySession.record_tool_call, ("message",))):
        hints = get_type_hints(fn)
        for name in names:
            assert accepts(hints[name], reply) and accepts(hints[name], Reply()), (fn.__name__, name, hints[name])
            assert accepts(hints[name], {"role": "assistant", "content": "hi"})
    session = MemorySession(mem, "chat", extract=False)
    assert session.after_turn("What does Biscuit eat?", reply) is not None
    assert [t.content for t in mem.turns("chat")] == ["What does Biscuit eat?", "Salmon kibble."]


@pytest.mark.reflex_time_budget  # Memory.context as shipped, not the tests' unbudgeted wrapper
def test_context_is_typed_to_take_the_none_its_docstring_allows(mem: Memory) -> None:
    for cls in (Memory, AsyncMemory):
        assert accepts(get_type_hints(cls.context)["window"], None), cls
    assert mem.context(None).block == ""


def test_every_method_memory_calls_on_its_store_is_declared_on_store() -> None:
    """``Memory.store`` is typed ``Store``: ``vector_stats`` called ``vector_counts`` and ``vector_search``, which only
    the engines' mixin defined, so mypy reported ``"Store" has no attribute``. Each ``store.<name>`` the package calls
    (``self.store``, ``store``, ``self._store``) is a member of ``Store``."""
    called: dict[str, set[str]] = {}
    for path in [*(ROOT / "tortoise_sdk").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]:
        if "store" in path.relative_to(ROOT).parts[1:-1]:
            continue  # the engines themselves
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and _is_a_store(node.value):
                called.setdefault(node.attr, set()).add(str(path.relative_to(ROOT)))
    assert {"vector_counts", "vector_search", "turns"} <= set(called)
    declared = {n for n in dir(Store) if not n.startswith("__")} | set(get_type_hints(Store))
    assert {n: sorted(p) for n, p in called.items() if n not in declared} == {}


def _is_a_store(node: ast.expr) -> bool:
    """``store``, ``_store``, or ``self.store`` / ``mem.store`` (what ``Memory.store`` and the store arguments are)."""
    if isinstance(node, ast.Name):
        return node.id in ("store", "_store")
    return (isinstance(node, ast.Attribute) and node.attr in ("store", "_store") and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "mem", "memory"))


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install mypy)")
def test_a_user_s_snippet_type_checks(tmp_path: Path) -> None:
    """The reviewer's snippet, through mypy itself. The package is laid out as installed (``adapters/`` is
    ``tortoise_sdk.adapters``, which an editable install's import hook gives and mypy cannot follow)."""
    tree = tmp_path / "tree" / "tortoise_sdk"
    tree.mkdir(parents=True)
    for entry in (ROOT / "tortoise_sdk").iterdir():
        (tree / entry.name).symlink_to(entry)
    (tree / "adapters").symlink_to(ROOT / "adapters")
    (tree / "prompts").symlink_to(ROOT / "prompts")
    snippet = tmp_path / "user.py"
    snippet.write_text(
        "from openai.types.chat import ChatCompletionMessage\n"
        "from tortoise_sdk import Memory\n"
        "from tortoise_sdk.adapters.loop import MemorySession\n"
        "mem = Memory(':memory:')\n"
        "session = MemorySession(mem, 'chat')\n"
        "reply = ChatCompletionMessage(role='assistant', content='Salmon kibble.')\n"
        "session.after_turn('What does Biscuit eat?', reply)\n"
        "session.record_tool_call(reply)\n"
        "block = mem.context(None)\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary",
                           "--cache-dir", str(tmp_path / "cache"), str(snippet)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MYPYPATH": str(tmp_path / "tree")})
    assert done.returncode == 0, done.stdout + done.stderr
