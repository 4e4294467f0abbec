"""The data flow of STYLE.md, checked on the source: imports point downstream only.

- ``models`` and ``errors`` import nothing of ours;
- ``reflex`` never imports ``llm``, not even through another module;
- adapters and ``cli`` use only ``Memory`` (with the models and errors it speaks in);
- litellm is imported only inside ``llm`` (by its ``lazy`` module), and lazily;
- no module of ours imports itself back through others: no import circle at all.

Imports are read with ``ast`` (every import statement, also those inside
functions and under ``TYPE_CHECKING``), so nothing is executed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[1]
# The repository keeps adapters/ at the top; it ships as tortoise_sdk.adapters (pyproject's package-dir).
PACKAGE_DIRS = ((REPO / "tortoise_sdk", "tortoise_sdk"), (REPO / "adapters", "tortoise_sdk.adapters"))

#: What the CLI and the adapters may import of ours besides their own modules.
MEMORY_FACADE = frozenset({"tortoise_sdk", "tortoise_sdk.memory", "tortoise_sdk.models", "tortoise_sdk.errors"})
#: Precise exceptions for the CLI, as (module, imported name).
CLI_EXCEPTIONS = frozenset({
    # A constant, no code: the score at or under which a hit matched only words too common to count.
    ("tortoise_sdk.search", "ZERO_SCORE"),
    # Writes the networkx graph Memory.graph() returned to a file: a serializer that reads no store.
    ("tortoise_sdk.graph", "export_graph"),
    # `tortoise demo` is itself a Memory client (checked below to use only Memory), run from the CLI.
    ("tortoise_sdk.demo", "run_demo"),
    # `tortoise eval locomo` runs the evaluation engine whole (checked below: Memory plus the model layer).
    ("tortoise_sdk.evaluation", "EvalSettings"),
    ("tortoise_sdk.evaluation", "run_locomo"),
    ("tortoise_sdk.evaluation", "render_markdown"),
    ("tortoise_sdk.evaluation", "load_conversations"),  # its input files are checked before its models
    # `tortoise capture FILE` tells turns from an agent transcript by each format's markers (a pure
    # function of the lines), then calls Memory.capture or Memory.ingest.
    ("tortoise_sdk.streams", "detect_format"),
})


def _modules() -> Iterator[tuple[str, Path, bool]]:
    for base, package in PACKAGE_DIRS:
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            yield ".".join([package, *parts]), path, is_package


MODULES = {name: (path, is_package) for name, path, is_package in _modules()}


@cache
def imports(module: str) -> frozenset[tuple[str, str | None]]:
    """(module, name) pairs a module imports; name is None for ``import x`` and for ``from x import *``.

    ``from package import submodule`` is reported as the submodule.
    """
    path, is_package = MODULES[module]
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                source = ".".join([*package, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add((submodule, None) if submodule in MODULES else (source, alias.name))
    return frozenset(found)


def ours(module: str) -> set[str]:
    """The modules of this package that ``module`` imports."""
    return {m for m, _ in imports(module) if m == "tortoise_sdk" or m.startswith("tortoise_sdk.")}


def in_package(module: str, package: str) -> bool:
    """``module`` is ``package`` or one of its submodules."""
    return module == package or module.startswith(package + ".")


def reachable(module: str) -> set[str]:
    """Every module of ours that ``module`` imports, directly or through others (lazy imports included)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for dep in ours(todo.pop()):
            if dep not in seen and dep in MODULES:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_module_map_is_complete() -> None:
    assert {"tortoise_sdk.models", "tortoise_sdk.errors", "tortoise_sdk.reflex", "tortoise_sdk.llm",
            "tortoise_sdk.cli", "tortoise_sdk.memory", "tortoise_sdk.adapters.loop",
            "tortoise_sdk.adapters.langchain"} <= MODULES.keys()
    # The parser sees relative, absolute and function-level imports alike.
    assert ("tortoise_sdk.memory", "Memory") in imports("tortoise_sdk")
    assert "tortoise_sdk.reflex" in ours("tortoise_sdk.memory")  # from . import reflex
    assert "tortoise_sdk.graph" in ours("tortoise_sdk.memory")  # inside Memory.graph()
    assert ("tortoise_sdk.adapters._common", "MemoryAdapter") in imports("tortoise_sdk.adapters.loop")
    # ... and follows them: the rules below would see a violation two modules away.
    assert "tortoise_sdk.store.base" in reachable("tortoise_sdk.reflex")
    assert "tortoise_sdk.llm" in reachable("tortoise_sdk.memory")


@pytest.mark.parametrize("module", ["tortoise_sdk.models", "tortoise_sdk.errors"])
def test_models_and_errors_import_nothing_of_ours(module: str) -> None:
    assert ours(module) == set()


def test_reflex_never_reaches_llm() -> None:
    assert not {m for m in reachable("tortoise_sdk.reflex") if in_package(m, "tortoise_sdk.llm")}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("tortoise_sdk.adapters")))
def test_adapters_use_only_memory(module: str) -> None:
    outside = {m for m in ours(module) if not m.startswith("tortoise_sdk.adapters")}
    assert outside <= MEMORY_FACADE, f"{module} imports {sorted(outside - MEMORY_FACADE)}"


#: The CLI's own modules (the ``tortoise_sdk.cli`` package); the adapters it runs (``tortoise mcp``,
#: ``tortoise hook``) are Memory clients themselves, checked by ``test_adapters_use_only_memory``.
CLI_MODULES = tuple(sorted(m for m in MODULES if in_package(m, "tortoise_sdk.cli")))


def test_the_cli_package_is_seen() -> None:
    assert {"tortoise_sdk.cli", "tortoise_sdk.cli._common", "tortoise_sdk.cli.capture"} <= set(CLI_MODULES)


@pytest.mark.parametrize("module", CLI_MODULES)
def test_cli_uses_only_memory(module: str) -> None:
    outside = {(m, name) for m, name in imports(module)
               if m.startswith("tortoise_sdk") and m not in MEMORY_FACADE and m not in CLI_MODULES
               and not m.startswith("tortoise_sdk.adapters.")}
    assert outside <= CLI_EXCEPTIONS, f"{module} imports {sorted(outside - CLI_EXCEPTIONS)}"


def test_the_demo_run_by_the_cli_uses_only_memory() -> None:
    outside = {m for m in ours("tortoise_sdk.demo") if not m.startswith("tortoise_sdk.demo")}
    assert outside <= MEMORY_FACADE, f"the demo imports {sorted(outside - MEMORY_FACADE)}"


#: What the evaluation engine may use besides Memory: the model layer (answer and judge calls go
#: through LLMClient, with its stage header, retries and stats), its JSON reader, the prompt loader.
EVALUATION_USES = MEMORY_FACADE | {"tortoise_sdk.llm", "tortoise_sdk.jsonparse", "tortoise_sdk.pipeline.prompts",
                                   "tortoise_sdk.config"}


def test_the_evaluation_run_by_the_cli_uses_memory_and_the_model_layer() -> None:
    outside = {m for m in reachable_within("tortoise_sdk.evaluation")
               if not m.startswith("tortoise_sdk.evaluation")}
    assert outside <= EVALUATION_USES, f"the evaluation imports {sorted(outside - EVALUATION_USES)}"


def reachable_within(package: str) -> set[str]:
    """What the modules of ``package`` import directly (not what those imports import in turn)."""
    return {dep for m in MODULES if m == package or m.startswith(package + ".") for dep in ours(m)}


def test_litellm_is_imported_only_by_llm_and_lazily() -> None:
    importers = {m for m in MODULES for dep, _ in imports(m) if dep.split(".")[0] == "litellm"}
    assert importers == {"tortoise_sdk.llm.lazy"}
    for module in importers:
        tree = ast.parse(MODULES[module][0].read_text(encoding="utf-8"))
        top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not [n for n in top_level if any(a.name.split(".")[0] == "litellm" for a in n.names)
                    or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "litellm")]


# -- no import circles ---------------------------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    """Each module of ours -> the modules of ours it imports, from every import statement in it.

    Function-level imports and those under ``TYPE_CHECKING`` are edges too: a lazy import only
    hides a circle until someone reads the code, and a type-only one still ties the two modules'
    meanings together. The parent packages an import runs implicitly (importing ``a.b.c`` runs
    ``a/__init__`` and ``a/b/__init__``) are not edges; an explicit ``from a.b import name`` is
    an edge to ``a.b``.
    """
    return {m: {d for d in ours(m) if d in MODULES} for m in MODULES}


def import_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One circle per group of modules that reach one another, as a path ``[a, b, ..., a]``.

    The groups are the strongly connected components of two or more modules, or of one module
    that imports itself; each is reported by a shortest circle through its first module.
    """
    g = nx.DiGraph()
    g.add_nodes_from(sorted(graph))
    g.add_edges_from((v, w) for v in sorted(graph) for w in sorted(set(graph[v])))
    groups = sorted(sorted(c) for c in nx.strongly_connected_components(g)
                    if len(c) > 1 or g.has_edge(next(iter(c)), next(iter(c))))
    return [_circle_through(g.subgraph(group), group[0]) for group in groups]


def _circle_through(group: nx.DiGraph, start: str) -> list[str]:
    """A shortest path from ``start`` back to itself, inside its group."""
    if group.has_edge(start, start):
        return [start, start]
    back = min((nx.shortest_path(group, w, start) for w in sorted(group.successors(start))), key=len)
    return [start, *back]


def test_no_import_circles_among_our_modules() -> None:
    circles = import_cycles(import_graph())
    assert circles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_import_graph_holds_lazy_and_type_only_imports_but_not_parent_packages() -> None:
    graph = import_graph()
    assert "tortoise_sdk.store.sqlite" in graph["tortoise_sdk.store"]  # inside open_store()
    assert "tortoise_sdk.store.base" in graph["tortoise_sdk.subagents"]  # under TYPE_CHECKING
    assert "tortoise_sdk.store" not in graph["tortoise_sdk.store.sqlite.store"]  # only its parent package


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c", "a"]]),
        ({"a": {"a"}, "b": {"a"}}, [["a", "a"]]),
        # Two circles sharing nothing, one of them reached only through a lazy edge's target.
        ({"a": {"b"}, "b": {"a", "x"}, "x": {"y"}, "y": {"x"}}, [["a", "b", "a"], ["x", "y", "x"]]),
        # One group, two circles in it: one shortest circle is reported for the group.
        ({"a": {"b", "c"}, "b": {"a"}, "c": {"a"}}, [["a", "b", "a"]]),
    ],
)
def test_the_cycle_finder_finds_every_circle_and_only_circles(graph, expected) -> None:
    assert import_cycles(graph) == expected
