"""``tortoise serve``: the HTTP JSON API and the memory inspector (the ``server`` extra)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InvalidInput, install_hint
from ._common import add_model_options, bounded_int, model_options, open_memory

__all__ = ("register",)

DEFAULT_PORT = 8765


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``serve`` to the ``tortoise`` parser."""
    p = sub.add_parser("serve", help="serve the memory over HTTP JSON, with an inspector at /",
                       description="The Memory API over HTTP JSON (schema at /openapi.json, pages at /docs) and a "
                                   "memory inspector at /, for every namespace of --db. A token is required when "
                                   "--host is not loopback. Needs the server extra: pip install "
                                   "'tortoise-sdk[server]'. Example: tortoise serve --db memory.db --namespace alice")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    p.add_argument("--port", type=bounded_int(0, 65535), default=DEFAULT_PORT, help=f"default: {DEFAULT_PORT}")
    p.add_argument("--token", action="append", default=[], metavar="SECRET[:NS]",
                   help="a bearer token clients must send, optionally bound to one namespace; repeat for more "
                        "(also $TORTOISE_SERVE_TOKENS, comma-separated)")
    p.add_argument("--max-body", type=bounded_int(1, 1024), default=4, metavar="MB",
                   help="the largest request body, in MiB (default: 4)")
    p.add_argument("--claude-code-hooks", action="store_true",
                   help="take Claude Code's HTTP hooks (`tortoise hooks install --url`) at "
                        "/v1/ns/NAMESPACE/hooks/claude-code: no process starts per event; the server reads the "
                        "transcript files the events name (loopback only), so run it as the user whose transcripts "
                        "they are")
    p.add_argument("--transcripts", metavar="DIR",
                   help="with --claude-code-hooks: the folder the events' transcripts must be in (default: Claude "
                        "Code's, $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects)")
    add_model_options(p, model_help="litellm model whose extraction jobs captures queue and POST /flush runs "
                                    "(default: $TORTOISE_MODEL)")
    p.set_defaults(handler=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from ..adapters.serve import ServeSettings, build_app, check_bind, parse_tokens
    except ImportError as exc:  # its message names the extra
        raise ConfigError(f"{exc}") from None
    try:
        import uvicorn
    except ImportError:
        raise ConfigError("tortoise serve needs uvicorn: " + install_hint("server")) from None
    env = [t for t in os.environ.get("TORTOISE_SERVE_TOKENS", "").split(",") if t.strip()]
    grants = parse_tokens([*args.token, *env])
    check_bind(args.host, grants, args.claude_code_hooks)
    settings = ServeSettings(db=args.db, namespaces=[args.namespace], tokens=grants,
                             max_body_bytes=args.max_body * 1024 * 1024, memory_options=model_options(args),
                             host=args.host, claude_code_hooks=args.claude_code_hooks, transcripts=args.transcripts)
    port = _check_port_free(args.host, args.port)  # for --port 0, the port taken: the install command names it
    if args.claude_code_hooks:
        folder = settings.transcripts_folder()
        server = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{port}"
        print(f"tortoise: Claude Code hooks at {server}/v1/ns/NAMESPACE/hooks/claude-code, transcripts from {folder}"
              + ("" if folder.is_dir() else " (not there yet)")
              + f"; `tortoise hooks install --url {server}` writes them", file=sys.stderr)
    app = _announced(build_app(settings), _start_lines(args, port))
    try:
        # No colours: on a terminal the CLI writes every ESC it is given as \u001b (stored text may hold one).
        uvicorn.run(app, host=args.host, port=port, log_level="warning", use_colors=False)
    except SystemExit as exc:  # uvicorn's start-up failure (3), which the CLI's codes give another meaning
        if exc.code in (None, 0):
            return 0
        print(f"tortoise: the server on {args.host}:{args.port} did not start (its error is above)", file=sys.stderr)
        return 1
    return 0


def _check_port_free(host: str, port: int) -> int:
    """Refuse a port another program listens on, naming the option, before the server starts (uvicorn exits 3).

    Returns the port to listen on: ``port``, or for 0 a free one (so that the start-up line can name it).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a TIME_WAIT port is free
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another port with "
                               "--port (or stop the program using it)") from None
        return int(probe.getsockname()[1])


def _start_lines(args: argparse.Namespace, port: int) -> list[str]:
    """What the server says on stderr once it listens: where, which store; and that a --db file is new.

    The store is opened here, before the server starts: a --db that is no database is refused in one line.
    """
    from ..memory import default_db_path

    path = args.db or default_db_path()
    new = "://" not in path and path != ":memory:" and not Path(path).expanduser().exists()
    with open_memory(args) as mem:
        store = mem.store.url
    server = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{port}"
    lines = [f"tortoise: serving {server} (the inspector at /, the API at /docs) from {store}, namespace "
             f"{args.namespace}; Ctrl-C stops it"]
    if new:  # as `tortoise worker` says it: a mistyped --db shows here
        lines.append(f"tortoise: no database at {path} yet; created an empty one, which this server fills as "
                     "clients capture: if your application's memory is in another database, stop the server and "
                     "pass that one's path with --db (or TORTOISE_DB)")
    return lines


def _announced(app: Any, lines: list[str]) -> Any:
    """``app``, saying ``lines`` on stderr once uvicorn has started it (its own start-up log is not shown)."""

    async def announced(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            return await app(scope, receive, send)

        async def said(message: dict[str, Any]) -> None:
            if message["type"] == "lifespan.startup.complete":
                print("\n".join(lines), file=sys.stderr, flush=True)
            await send(message)

        return await app(scope, receive, said)

    return announced
