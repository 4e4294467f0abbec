"""The README and docs/ hold together: the README fits on a screen, every relative link points at a
file, every Python snippet parses and names only what tortoise_sdk has, and the site builds with
``mkdocs build --strict`` (a broken link or a docstring the API reference cannot render fails).

Benchmark figures come from runs: ``docs/figures/*.md`` are what a script printed with ``--record``
(``benchmarks/figures.py``), each one well-formed, named after its own command and included by a
page; a figure a page states outside those fragments must appear in one of them, unless the passage
is marked as typed by hand (``<!-- hand-typed -->`` on the line, or between ``<!-- hand-typed: begin
-->`` and ``<!-- hand-typed: end -->``), which stays the exception until the run is recorded; a figure in bold is
checked even there. No page cites the project's internal issue numbers."""

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
FIGURES = REPO / "docs" / "figures"
PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if FIGURES not in p.parents)]
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


def test_every_docs_page_the_code_sends_a_user_to_exists():
    # `tortoise forget` sent users to "the README, Forgetting", a section the README no longer has.
    code = [p for d in ("tortoise_sdk", "adapters") for p in sorted((REPO / d).rglob("*.py"))]
    named = {m for p in code for m in re.findall(r"\bdocs/[\w/-]+\.md\b", p.read_text(encoding="utf-8"))}
    assert "docs/forgetting.md" in named and not [n for n in named if not (REPO / n).exists()], named
    assert not [p for p in code if "see the README," in p.read_text(encoding="utf-8")]


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


def _shell_blocks() -> list[tuple[str, str]]:
    """The fenced blocks with no language or a shell's, as (page#n, code)."""
    found = []
    for p in PAGES:
        lang, lines, n = None, [], 0
        for line in p.read_text(encoding="utf-8").splitlines():
            fence = re.match(r"\s*(```|~~~)\s*(\S*)", line)
            if fence and lang is None:
                lang, lines = fence.group(2), []
            elif fence and not fence.group(2):
                if lang in ("", "sh", "bash", "shell", "console"):
                    found.append((f"{p.relative_to(REPO)}#{n}", "\n".join(lines)))
                lang, n = None, n + 1
            elif lang is not None:
                lines.append(line)
    return found


def test_every_shell_example_runs_as_shown():
    """A command copied from a page works: ``tortoise worker`` exits 2 without a model, and the package is
    not on PyPI (README: install from a clone), so ``pip install 'tortoise-sdk[...]'`` in a block fails."""
    bad = []
    for where, code in _shell_blocks():
        for line in code.splitlines():
            command = line.split("#", 1)[0]
            if re.search(r"\btortoise worker\b", command) and "--model" not in command \
                    and "TORTOISE_MODEL" not in code:
                bad.append(f"{where}: {line.strip()} (no --model, no TORTOISE_MODEL)")
            if re.search(r"pip install\s+['\"]?tortoise-sdk", command):
                bad.append(f"{where}: {line.strip()} (not on PyPI: pip install -e '.[extra]' from a clone)")
    assert not bad, "\n".join(bad)


def test_the_docs_site_builds_strictly(tmp_path):
    try:
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        skip_or_fail("the docs site needs mkdocs-material and mkdocstrings (pip install -e '.[dev]')")
    # No --quiet: it hides warnings from the strict count as well as from the log, so a docstring griffe
    # warns about built "strictly" with exit 0. Every WARNING line fails the test too, whatever the exit code.
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    out = done.stdout + done.stderr
    warnings = [line for line in out.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert done.returncode == 0 and not warnings, "\n".join(warnings) or out
    assert (tmp_path / "site" / "api" / "index.html").is_file()


sys.path.insert(0, str(REPO / "benchmarks"))
import figures  # noqa: E402

INCLUDE = re.compile(r'^[ \t]*--8<--[ \t]+"([^"]+)"[ \t]*$', re.M)
# A measured figure as the pages write them: a number, whole or decimal, with a time, size, rate or ratio unit
# ("2.56 ms", "1675 ms", "878 MB", "38,318 turns/s", "0.81x", "21.6 %"), each number of a run of them that ends
# in one ("245/338 ms", "0.00–0.02 s"), and any number with two decimals or more, unit or none ("0.694").
# Not figures: a number after a comparison ("p95 <= 20 ms" is a goal), counts without a unit ("300 queries"),
# parts of dates, versions, addresses and names ("2026-12-01", "3.11.7", "127.0.0.1", "conv-26", "p95"),
# code (inline and fenced: commands and snippets), and the settings listed in SETTINGS.
_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_UNIT = r"\s?(?:ms|s|MB|GB|KB|kB|turns/s|captures/s|jobs/s|calls/s|x|×|%)(?![\w/])"
FIGURE = re.compile(rf"(?<![\w.,:\-]){_NUM}(?:(?={_UNIT})|(?![\w:\-]|[.,]\d)(?=(?:\s?[/–]\s?{_NUM})+{_UNIT}))"
                    rf"|(?<![\w.,:\-])\d+\.\d{{2,}}(?![\w:\-]|[.,]\d)")
GOAL = re.compile(r"(?:[≤≥<>=~]|\bdefault)\s*$")  # a goal, or a setting's default ("default 60 s")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1)[^\n]|\n(?![ \t]*\n))+?\1")  # may wrap, never past a blank line
FENCE = re.compile(r"^\s*(```|~~~)")
# Settings that read like figures (timeouts and deadlines the code sets, sizes a test is given, not something
# measured), by page.
SETTINGS = {"docs/guarantees.md": {"0.1", "1.7", "2.7"},  # sizes a test stores; PostgreSQL's index row limit
            "docs/postgres.md": {"0.1"}, "docs/extraction.md": {"0.5", "0.3", "60"},  # stub delays; request timeout
            "docs/reflex.md": {"1.110"}}  # litellm's version, whose price table the cost table reads
FRAGMENTS = sorted(FIGURES.glob("*.md"))


def _included(page: Path) -> list[str]:
    return INCLUDE.findall(page.read_text(encoding="utf-8"))


BOLD = re.compile(r"\*\*(.+?)\*\*")


def _stated_figures(page: Path) -> list[tuple[int, str]]:
    """(line, number) of each figure the page states itself: outside included fragments, code and hand-typed passages."""
    lines, fenced = page.read_text(encoding="utf-8").splitlines(), False
    for n, line in enumerate(lines):  # fenced code, its fences included, becomes empty lines
        fence = bool(FENCE.match(line))
        if fenced or fence:
            lines[n] = ""
        fenced ^= fence
    text = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), "\n".join(lines))  # inline code, kept in place
    found, typed = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if "<!-- hand-typed: begin" in line:
            typed = True
        if "<!-- hand-typed: end" in line:
            typed = False
            continue
        if INCLUDE.match(line):
            continue
        if typed or "<!-- hand-typed -->" in line:
            # A passage typed by hand may say what no record printed, but not in bold: the figure a row
            # puts in bold is the one a reader takes away, and it comes from a record (a row's record
            # taken again must not leave the old headline behind).
            line = " ".join(BOLD.findall(line))
        found += [(n, m[0]) for m in FIGURE.finditer(line) if not GOAL.search(line[:m.start()])]
    return found


def _recorded_output() -> str:
    """What the records printed, with the load averages their footers state (a page may quote those too)."""
    def printed(meta: dict) -> str:
        loads = " ".join(f"{x:.2f}" for x in (*meta["load_before"], *meta["load_after"]))
        return f"{meta['output']}\n{loads}"

    return "\n".join(printed(figures.parse(f.read_text(encoding="utf-8"))) for f in FRAGMENTS)


def _stray_figures(page: Path, recorded: str) -> list[str]:
    """The figures ``page`` states that no recorded output printed (a setting of its page excepted)."""
    name = str(page.relative_to(REPO)) if page.is_relative_to(REPO) else page.name
    settings = SETTINGS.get(name, set())
    return [f"line {n}: {num}" for n, num in _stated_figures(page) if num not in settings
            and not re.search(rf"(?<![\d.,]){re.escape(num)}(?![\d]|[.,]\d)", recorded)]


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=lambda p: p.name)
def test_every_fragment_is_what_its_own_command_recorded(fragment):
    meta = figures.parse(fragment.read_text(encoding="utf-8"))  # ValueError when edited by hand
    argv = meta["command"].split()
    assert argv[:1] == ["python"] and (REPO / argv[1]).is_file(), f"{fragment.name}: no script in {meta['command']!r}"
    label = next((a.partition("=")[2] for a in argv if a == "--record" or a.startswith("--record=")), None)
    assert label is not None and figures.fragment_name(argv[1], label) == fragment.stem, (
        f"{fragment.name}: its command {meta['command']!r} would write another file")
    assert "--smoke" not in argv and meta["revision"], f"{fragment.name}: a smoke run or no git revision"


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=lambda p: p.name)
def test_every_fragment_is_included_by_a_page(fragment):
    assert any(f"figures/{fragment.name}" in _included(p) for p in PAGES), (
        f"no page includes {fragment.name} (--8<-- \"figures/{fragment.name}\"): include it or delete it")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_included_fragment_was_recorded(page):
    missing = [f for f in _included(page) if not (REPO / "docs" / f).is_file() or not f.startswith("figures/")]
    assert not missing, f"{page.relative_to(REPO)} includes {missing}: run the benchmark with --record"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_figure_a_page_states_comes_from_a_recorded_run(page):
    """Quoting a recorded fragment is fine; a number typed from memory, or left over from an older run, is not."""
    stray = _stray_figures(page, _recorded_output())
    assert not stray, (f"{page.relative_to(REPO)} states figures no recorded run printed: {stray}. Quote a fragment in "
                       "docs/figures/ (run the benchmark with --record), or mark the passage <!-- hand-typed -->")


def test_the_figure_pattern_finds_figures_and_skips_goals_sizes_dates_versions_and_code(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("p50 2.56 ms, 38,318 turns/s (0.81x), recall 0.694, 1675 ms, 878 MB, 21.6 %, 4.3 jobs/s\n"
                    "hook p50/p95 245/338 ms, 0.00–0.02 s, ratio 0.97\n"
                    "goal p95 ≤ 20 ms, ≥ 0.68, < 0.5 s, 100,000 turns, 300 queries, default 50 ms\n"
                    "on 2026-12-01 at 21:09:47, Python 3.11.7, 127.0.0.1:5432, conv-26, p95, a44858e, 1e-3\n"
                    "run `bench.py --turns 2080 --delay 0.25` then `bench.py\n--delay 0.75 --record`\n"
                    "```text\n12.34 ms\n```\n"
                    "typed 1.25 ms <!-- hand-typed -->\n<!-- hand-typed: begin -->\n3.5 ms\n<!-- hand-typed: end -->\n"
                    "**p95 23.94 ms**: missed, on a machine at 17.0 ms <!-- hand-typed -->\n",
                    encoding="utf-8")
    assert _stated_figures(page) == [
        (1, "2.56"), (1, "38,318"), (1, "0.81"), (1, "0.694"), (1, "1675"), (1, "878"), (1, "21.6"), (1, "4.3"),
        (2, "245"), (2, "338"), (2, "0.00"), (2, "0.02"), (2, "0.97"),
        (14, "23.94")]  # a hand-typed line's bold headline still needs a record; the rest of it does not


def test_the_check_fails_on_a_planted_figure_no_run_printed(tmp_path):
    """The check itself can fail: figures typed into a page, whole or decimal, with or without a unit, are named."""
    recorded = _recorded_output()
    planted = ["97,531.86", "8642", "13579", "24.681"]
    assert not any(re.search(rf"(?<![\d.,]){re.escape(n)}(?![\d]|[.,]\d)", recorded) for n in planted)
    quoted = re.findall(r"(?<![\d.,])\d+\.\d{2}(?!\d)", recorded)[:2]  # two figures a record did print
    assert len(quoted) == 2
    page = tmp_path / "planted.md"
    page.write_text("capture reads 97,531.86 turns/s; the hook p50/p95 8642/13579 ms; recall 24.681\n"
                    f"quoted from a record: p50 {quoted[0]} ms, rank_bm25 {quoted[1]} ms\n", encoding="utf-8")
    assert _stray_figures(page, recorded) == [f"line 1: {n}" for n in planted]


@pytest.mark.parametrize("page", PAGES + FRAGMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_pages_cite_no_internal_issue_numbers(page):
    """Readers cannot open the project's issue tracker: a page says what changed, not which issue asked for it."""
    text = re.sub(r"\[[^\]]*\]\(https?://[^)]*\)", "", page.read_text(encoding="utf-8"))  # a public issue, linked
    cited = re.findall(r"\bissues?\s+#?\d+(?:\s+and\s+\d+)?", text, re.I)
    assert not cited, f"{page.relative_to(REPO)} cites {cited}: say what it refers to, or link a public page"


_HEADING = re.compile(r"^#{1,6} \S", re.M)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_heading_of_a_page_renders_as_a_heading(page: Path) -> None:
    """A wrapped line that starts with an HTML block tag (a code span's ``<main checkout>`` did) turns the rest of
    the page into raw text, its headings and links with it, and the strict build does not see it."""
    markdown = pytest.importorskip("markdown", reason="the docs tools are not installed (pip install -e '.[dev]')")
    text = page.read_text(encoding="utf-8")
    html = markdown.markdown(text, extensions=["toc", "tables", "fenced_code"])
    assert len(re.findall(r"<h[1-6] id=", html)) == len(_HEADING.findall(_FENCE.sub("", text)))
