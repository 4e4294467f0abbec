"""Embeddings from the command line: ``embed --backfill`` gives a vector to every turn and memory waiting for one."""

from __future__ import annotations

import argparse
import sys

from ._common import EXIT_EXTRACTION_FAILED, add_embedder_options, bounded_int, emit_json, model_options, open_memory

__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``embed``."""
    p = sub.add_parser("embed", help="compute the vectors of turns and memories (needs an embedder)",
                       description="Gives a vector to each turn and memory with none under the embedder's model "
                                   "(all of them after the model changed). Exit 3: the embedder failed; what was "
                                   "stored stays. Example: tortoise embed --backfill --embedder "
                                   "openai/text-embedding-3-small")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--backfill", action="store_true", help="everything waiting (the default)")
    scope.add_argument("--limit", type=bounded_int(1, 10**9), help="at most this many items")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_embedder_options(p)
    p.set_defaults(handler=_cmd_embed)


def _cmd_embed(args: argparse.Namespace) -> int:
    with open_memory(args, create=False, **model_options(args)) as mem:
        report = mem.embed_pending(limit=args.limit)
    if args.json:
        emit_json(report)
    else:
        dim = f", dimension {report.dim}" if report.dim is not None else ""
        more = "; more waits (run it again)" if report.more else ""
        print(f"embedded {report.embedded} item(s) with {report.model}{dim}{more}")
        if report.error is not None:
            print(f"embedder failed: {report.error}", file=sys.stderr)
    return EXIT_EXTRACTION_FAILED if report.error is not None else 0
