"""The networkx projection of a namespace, and its export (GraphML, node-link JSON)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from .store.base import Store

if TYPE_CHECKING:
    import networkx

__all__ = ("build_graph", "export_graph")


def build_graph(store: Store, namespace: str) -> networkx.MultiDiGraph:
    """Sessions, turns (``session -has_turn-> turn``, ``turn -next-> turn``) and whatever extraction added.

    Node ids are prefixed by kind (``session:``, ``turn:``, ``memory:``, ``entity:``); an entity node lists its
    ``aliases`` (its other names), when it has any.
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
        for e in store.entities(namespace):  # its other names: short forms, roles, merged names
            if e["aliases"] and (node := g.nodes.get(f"entity:{e['id']}")) is not None:
                node["aliases"] = [a["name"] for a in e["aliases"]]
    return g


def export_graph(g: networkx.MultiDiGraph, out: str | Path | BinaryIO, fmt: Literal["graphml", "json"]) -> None:
    """Write the graph as GraphML or node-link JSON, to a path or a binary file (``sys.stdout.buffer``). GraphML gets
    None dropped, lists as JSON text and characters XML cannot hold (terminal colours, bells) as ``\\xNN``."""
    import networkx as nx

    if fmt == "json":
        data = nx.node_link_data(g, edges="edges")
        text = json.dumps(data, ensure_ascii=False, indent=1, default=str)
        if isinstance(out, (str, Path)):
            Path(out).write_text(text, encoding="utf-8")
        else:
            out.write(text.encode("utf-8") + b"\n")
        return
    h = nx.MultiDiGraph(**_scalarize(g.graph))
    h.add_nodes_from((_xml_id(n), _scalarize(attrs)) for n, attrs in g.nodes(data=True))
    h.add_edges_from((_xml_id(u), _xml_id(v), _xml_id(k), _scalarize(attrs))
                     for u, v, k, attrs in g.edges(keys=True, data=True))
    nx.write_graphml(h, str(out) if isinstance(out, (str, Path)) else out)


#: What XML 1.0 cannot hold: control characters but tab, newline and carriage return, and U+FFFE/U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(value: Any) -> Any:
    """``value`` with each character XML cannot hold written as its ``\\xNN`` (``\\uNNNN``) escape."""
    if not isinstance(value, str):
        return value
    return _NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", value)


def _xml_id(value: Any) -> Any:
    """A node id or edge key XML can hold, one to one: an id with a backslash or a character XML cannot hold has
    its backslashes doubled and those characters escaped, so "s\\x01" (a control character) and "s\\\\x01"
    (backslash, x, 0, 1) stay two nodes; any other id is written as it is."""
    if not isinstance(value, str) or ("\\" not in value and not _NOT_XML.search(value)):
        return value
    return _xml_text(value.replace("\\", "\\\\"))


def _scalarize(attrs: dict[str, Any]) -> dict[str, Any]:
    """GraphML attributes: None dropped, lists and dicts as JSON text, other values as text XML can hold."""
    out = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, (list, dict, tuple)):
            value = json.dumps(value, ensure_ascii=False, default=str)
        elif not isinstance(value, (str, int, float, bool)):
            value = str(value)
        out[_xml_text(key)] = _xml_text(value)
    return out
