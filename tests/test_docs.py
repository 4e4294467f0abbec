"""The README and docs/ hold together: the README fits on a screen, every relative link points at a
file, every Python snippet parses and names only what tortoise_sdk has, and the site builds with
``mkdocs build --strict`` (a broken link or a docstring the API reference cannot render fails)."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from needs import skip_or_fail

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
SNIPPET = re.compile(r"```python\n(.*?)```", re.S)


def test_the_readme_is_an_introduction_that_fits_on_a_screen():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move reference material into docs/"
    assert lines[2].startswith("Run the demo: `") and lines[4].startswith("Run the tests: `")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_at_a_file(page):
    text = page.read_text(encoding="utf-8")
    missing = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("mailto:")
               and not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(REPO)} links to missing files: {missing}"


def _snippets() -> list[tuple[str, str]]:
    return [(f"{p.relative_to(REPO)}#{i}", code) for p in PAGES for i, code in enumerate(SNIPPET.findall(
        p.read_text(encoding="utf-8")))]


@pytest.mark.parametrize(("where", "code"), _snippets(), ids=[w for w, _ in _snippets()])
def test_every_python_snippet_parses_and_imports_only_what_exists(where, code):
    """A stale snippet (a renamed class, module or ``Memory`` method) fails here, not in a reader's hands."""
    from tortoise_sdk import Memory

    tree = compile(code, where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tortoise_sdk"):
            module = importlib.import_module(node.module)
            absent = [a.name for a in node.names if not hasattr(module, a.name)
                      and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
            assert not absent, f"{where}: {node.module} has no {absent}"
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "mem"
                and not node.attr.startswith("_")):
            assert hasattr(Memory, node.attr), f"{where}: Memory has no {node.attr!r}"


def test_the_docs_site_builds_strictly(tmp_path):
    try:
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        skip_or_fail("the docs site needs mkdocs-material and mkdocstrings (pip install -e '.[dev]')")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "api" / "index.html").is_file()
