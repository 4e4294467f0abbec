"""The error tree as drawn (``errors.py``'s docstring, docs/guarantees.md) is the tree the classes form."""

from __future__ import annotations

import builtins
import re
from pathlib import Path

from tortoise_sdk import errors

README = Path(__file__).resolve().parents[1] / "docs" / "guarantees.md"
_NODE = re.compile(r"^(?P<indent>(?:[│ ] {3})*)(?:[├└]── )?(?P<name>\w+)(?: \(also (?P<also>\w+)\))?")


def drawn(text: str) -> list[str]:
    """The tree's lines, from ``TortoiseError`` to ``AdapterError``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "TortoiseError")
    end = next(i for i in range(start, len(lines)) if "AdapterError" in lines[i])
    return [line.strip("\n")[len(lines[start]) - len(lines[start].lstrip()):] for line in lines[start:end + 1]]


def test_the_docs_draw_the_same_tree_as_errors_py():
    assert drawn(README.read_text(encoding="utf-8")) == drawn(errors.__doc__ or "")


def test_the_drawn_tree_is_the_class_tree():
    parents: list[type] = []
    seen = set()
    for line in drawn(errors.__doc__ or ""):
        m = _NODE.match(line)
        assert m, line
        depth = len(m["indent"]) // 4 + (0 if m["name"] == "TortoiseError" else 1)
        cls = getattr(errors, m["name"])
        del parents[depth:]
        if parents:
            assert cls.__mro__[1] is parents[-1] or parents[-1] in cls.__bases__, (cls, parents[-1])
        if m["also"]:
            assert issubclass(cls, getattr(builtins, m["also"])), cls
        parents.append(cls)
        seen.add(m["name"])
    assert seen == set(errors.__all__)
