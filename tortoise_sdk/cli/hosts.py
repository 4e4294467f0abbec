"""``tortoise mcp``, ``tortoise hook`` and ``tortoise hooks``: the commands that connect tortoise to agent hosts."""

from __future__ import annotations

import argparse

from ..errors import ConfigError

__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the host commands to the ``tortoise`` parser."""
    _register_mcp(sub)


def _memory_options(p: argparse.ArgumentParser) -> None:
    """``--db`` and ``--namespace`` after the command too (``tortoise mcp --namespace alice``)."""
    p.add_argument("--db", default=argparse.SUPPRESS, help="SQLite path or postgresql:// URL")
    p.add_argument("--namespace", default=argparse.SUPPRESS, help="the namespace to serve (fixed for the run)")


# -- mcp -------------------------------------------------------------------------------------------


def _cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from ..adapters.mcp_server import build_server
    except ImportError as exc:
        raise ConfigError(f"{exc}") from None
    from ..memory import Memory

    with Memory(args.db, namespace=args.namespace) as mem:
        build_server(mem).run("stdio")
    return 0


def _register_mcp(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mcp", help="serve this memory to MCP clients over stdio",
                       description="An MCP server (stdio) with the tools memory_search, memory_context, "
                                   "memory_expand, memory_capture and memory_memories, and the recent sessions "
                                   "as resources, for one namespace fixed at start. Needs the mcp extra: "
                                   "pip install 'tortoise-sdk[mcp]'. "
                                   "Example: claude mcp add tortoise -- tortoise mcp --namespace alice")
    _memory_options(p)
    p.set_defaults(handler=_cmd_mcp)

