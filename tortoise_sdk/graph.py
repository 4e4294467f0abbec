"""The networkx projection of a namespace, and its export (GraphML, node-link JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from .store.base import Store

if TYPE_CHECKING:
    import networkx

__all__ = ("build_graph", "export_graph")


def build_graph(store: Store, namespace: str) -> networkx.MultiDiGraph:
    """Sessions, turns (``session -has_turn-> turn``, ``turn -next-> turn``) and whatever extraction added.

    Node ids are prefixed by kind (``session:``, ``turn:``, ``memory:``, ``entity:``).
    """
    import networkx as nx

    g = nx.MultiDiGraph(namespace=namespace)
    for s in store.sessions(namespace):
        sid = f"session:{s.session_id}"
        g.add_node(sid, kind="session", session_id=s.session_id, session_date=s.session_date,
                   turn_count=s.turn_count)
        prev = None
        for t in store.turns(namespace, s.session_id):
            tid = f"turn:{t.turn_id}"
            g.add_node(tid, kind="turn", role=t.role, name=t.name, content=t.content, index=t.index,
                       external_id=t.external_id, session_id=t.session_id)
            g.add_edge(sid, tid, key="has_turn", kind="has_turn")
            if prev is not None:
                g.add_edge(prev, tid, key="next", kind="next")
            prev = tid
    extend = getattr(store, "extend_graph", None)
    if extend is not None:
        extend(g, namespace)
    return g


def export_graph(g: networkx.MultiDiGraph, out: str | Path | BinaryIO, fmt: Literal["graphml", "json"]) -> None:
    """Write the graph as GraphML or node-link JSON, to a path or a binary file (``sys.stdout.buffer``). GraphML gets
    None dropped and lists as JSON text."""
    import networkx as nx

    if fmt == "json":
        data = nx.node_link_data(g, edges="edges")
        text = json.dumps(data, ensure_ascii=False, indent=1, default=str)
        if isinstance(out, (str, Path)):
            Path(out).write_text(text, encoding="utf-8")
        else:
            out.write(text.encode("utf-8") + b"\n")
        return
    h = g.copy()
    for _, attrs in h.nodes(data=True):
        _scalarize(attrs)
    for _, _, attrs in h.edges(data=True):
        _scalarize(attrs)
    _scalarize(h.graph)
    nx.write_graphml(h, str(out) if isinstance(out, (str, Path)) else out)


def _scalarize(attrs: dict[str, Any]) -> None:
    for key in list(attrs):
        value = attrs[key]
        if value is None:
            del attrs[key]
        elif isinstance(value, (list, dict, tuple)):
            attrs[key] = json.dumps(value, ensure_ascii=False, default=str)
        elif not isinstance(value, (str, int, float, bool)):
            attrs[key] = str(value)
