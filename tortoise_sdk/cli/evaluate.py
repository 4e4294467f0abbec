"""``tortoise eval locomo``: memory quality end to end (LoCoMo answer accuracy with a judge, recall, cost)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ._common import rich_console, seconds


__all__ = ("register",)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``tortoise eval`` to the ``tortoise`` parser."""
    p = sub.add_parser("eval", help="measure memory quality on a benchmark (LoCoMo)",
                       description="Measure memory quality end to end. Example: tortoise eval locomo locomo10.json "
                                   "--model openai/gpt-4o-mini --mode both --out locomo.json")
    benchmarks = p.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    p.set_defaults(handler=lambda args: _usage(p))
    _register_locomo(benchmarks)


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def _register_locomo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "locomo", help="answer LoCoMo's questions through the memory block and judge the answers",
        description="Captures each LoCoMo conversation (a namespace each, sessions in order with their dates) into "
                    "a store beside the report, extracting memories in --mode memories; then for each question "
                    "builds the memory block (Memory.context, the question as the window), asks the answer model "
                    "and the judge (prompts/eval_answer.md, eval_judge.md; X-Tortoise-Stage answer / judge). "
                    "Writes a JSON report and a Markdown table (OUT with .md), and prints the table. Running the "
                    "same command again resumes: questions already judged in OUT are skipped. "
                    "Examples: tortoise eval locomo locomo10.json --model openai/gpt-4o-mini --mode both; "
                    "tortoise eval locomo conv-26.json --judge exact --answer-from-block (no model at all)")
    p.add_argument("files", nargs="+", metavar="FILE", help="LoCoMo file(s): locomo10.json or one conversation each")
    p.add_argument("--model", help="litellm model for extraction, and for answer and judge unless given apart "
                                   "(default: $TORTOISE_MODEL)")
    p.add_argument("--answer-model", help="model that answers each question from the block (default: --model)")
    p.add_argument("--judge-model", help="model that labels each answer CORRECT or WRONG (default: --model)")
    p.add_argument("--api-base", help="model endpoint URL, e.g. http://localhost:8000/v1")
    p.add_argument("--api-key", help="provider key (default: the provider's environment variable)")
    p.add_argument("--timeout", dest="request_timeout_s", type=seconds, metavar="S",
                   help="seconds one model request may take (default: 60); a request that times out is retried "
                        "once, a second timeout stops the run (the same command resumes it)")
    p.add_argument("--mode", choices=("verbatim", "memories", "both"), default="verbatim",
                   help="verbatim: captured turns only, no extraction; memories: extract with --model first; "
                        "both: one after the other, each in its own store (default: %(default)s)")
    p.add_argument("--budget", type=int, default=5, help="pointers per block, 1-8 (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=400, help="token cap of a block (default: %(default)s)")
    p.add_argument("--judge", choices=("llm", "exact"), default="llm",
                   help="llm: the judge model; exact: normalised exact/substring match, no model "
                        "(default: %(default)s)")
    p.add_argument("--answer-from-block", action="store_true",
                   help="no answer model: the block's text is the answer (with --judge exact: does the block hold "
                        "the gold answer verbatim)")
    p.add_argument("--temperature", type=_temperature, default=0.0,
                   help="sampling temperature of answer and judge calls; 'none' leaves the provider's default "
                        "(default: %(default)s)")
    p.add_argument("--concurrency", type=int, default=4,
                   help="answer and judge calls in flight at once (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("locomo-eval.json"),
                   help="JSON report, rewritten as questions are answered (default: %(default)s)")
    p.set_defaults(handler=_cmd_locomo)


def _temperature(text: str) -> float | None:
    if text.strip().lower() in ("none", "default", ""):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a number, or 'none' for the provider's default") from None


def _cmd_locomo(args: argparse.Namespace) -> int:
    # The engine is a Memory client with the model layer, run whole by this command (like the demo).
    from ..evaluation import EvalSettings, load_conversations, render_markdown, run_locomo

    for name in args.files:  # a missing or wrong file is said before the models are (it is the likelier mistake)
        load_conversations(name)
    settings = EvalSettings.with_models(
        args.model, answer_model=args.answer_model, judge_model=args.judge_model,
        files=args.files, out=args.out, modes=("verbatim", "memories") if args.mode == "both" else (args.mode,),
        budget=args.budget, max_tokens=args.max_tokens, judge=args.judge, answer_from_block=args.answer_from_block,
        api_base=args.api_base, api_key=args.api_key, temperature=args.temperature, concurrency=args.concurrency,
        model_settings={"timeout_s": args.request_timeout_s} if args.request_timeout_s else {},
    )
    try:
        with _progress() as progress:
            report = run_locomo(settings, progress)
    except KeyboardInterrupt:  # the report was saved on the way out; say so, or Ctrl-C looks like a loss
        kept = f"what was answered is kept in {args.out}; " if args.out.exists() else ""
        print(f"tortoise: interrupted; {kept}run the same command again to resume", file=sys.stderr)
        return 130
    print(render_markdown(report), end="")
    unjudged = sum(1 for q in report["questions"] if q["label"] is None)
    if unjudged:
        print(f"tortoise: {unjudged} question(s) have no judge label (the judge's reply named none); "
              "run the same command again to judge them", file=sys.stderr)
    print(f"report: {args.out} (table: {args.out.with_suffix('.md')})", file=sys.stderr)
    return 0


@contextmanager
def _progress() -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar per phase on a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        yield lambda phase, done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    tasks: dict[str, int] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  transient=False, console=rich_console(sys.stderr)) as bar:
        def advance(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        yield advance
