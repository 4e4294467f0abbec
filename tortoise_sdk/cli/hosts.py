"""``tortoise mcp``, ``tortoise hook`` and ``tortoise hooks``: the commands that connect tortoise to agent hosts."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from ..adapters.claude_code import CATCH_UP_S, MAX_BYTES_PER_CALL, STORE_BOUND_S
from ..errors import ConfigError, InvalidInput, NotFoundError, StreamParseError, TortoiseError
from ..memory import DEFAULT_EXTRACT_EVERY, DEFAULT_IDLE_S, DEFAULT_NAMESPACE, env_model
from ._common import add_model_options, bounded_float, model_options
from .serve import DEFAULT_PORT

__all__ = ("DEFAULT_HOOK_TIMEOUT_S", "log_refused_arguments", "register")

#: The hook's own hard limit, in seconds: well under the timeout written into settings.json.
DEFAULT_HOOK_TIMEOUT_S = 8.0
#: The bound on each store call of the hook (``STORE_BOUND_S``; at most half the hook's limit). It covers the
#: capture's own work too: see ``HOOK_MAX_BYTES``.
HOOK_STORE_TIMEOUT_S = STORE_BOUND_S
#: What ``hooks install`` asks Claude Code to allow (its default is 60 s, or 600 s in newer versions).
SETTINGS_TIMEOUT_S = 30
#: What ``hooks install --url`` asks Claude Code to allow a request: the command's own hard limit, since a
#: request has no limit of its own on the server (past it Claude Code goes on without the block).
HTTP_TIMEOUT_S = int(DEFAULT_HOOK_TIMEOUT_S)
#: New transcript bytes one read of a hook call captures (kept far inside ``HOOK_STORE_TIMEOUT_S``).
HOOK_MAX_BYTES = MAX_BYTES_PER_CALL
_LOG_MAX_BYTES = 1024 * 1024
#: An environment variable's name, as Claude Code interpolates it into an HTTP hook's header.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The cursor that names the project a project install's namespace belongs to (``{"dir": absolute path}``).
PROJECT_CURSOR = "hooks:project"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the host commands to the ``tortoise`` parser."""
    _register_mcp(sub)
    _register_hook(sub)
    _register_hooks(sub)


# -- mcp -------------------------------------------------------------------------------------------


def _cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from ..adapters.mcp_server import build_server
    except ImportError as exc:
        raise ConfigError(f"{exc}") from None
    from ..memory import Memory

    with Memory(args.db, namespace=args.namespace, **model_options(args)) as mem:
        build_server(mem).run("stdio")
    return 0


def _register_mcp(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mcp", help="serve this memory to MCP clients over stdio",
                       description="An MCP server (stdio) with the tools memory_search, memory_context, "
                                   "memory_expand, memory_capture and memory_memories, and the recent sessions "
                                   "as resources, for one namespace fixed at start. Needs the mcp extra: "
                                   "pip install 'tortoise-sdk[mcp]'. "
                                   "Example: claude mcp add tortoise -- tortoise mcp --namespace alice")
    add_model_options(p, model_help="litellm model whose extraction jobs memory_capture queues for `tortoise "
                                    "worker` (default: $TORTOISE_MODEL; with neither, turns are stored and not "
                                    "extracted)", timeout=False)
    p.set_defaults(handler=_cmd_mcp)


# -- hook: one Claude Code hook event -------------------------------------------------------------


def _cmd_hook(args: argparse.Namespace) -> int:
    """Never fails the host: any failure, or a run past the limit, ends with exit 0, no output, a log line.

    Claude Code pipes the event in; a terminal on stdin means a person ran it by hand: exit 2, saying so.
    """
    if _is_terminal(sys.stdin):
        raise InvalidInput("`tortoise hook` reads one Claude Code hook event (JSON) on stdin and Claude Code runs it; "
                           "to set that up, run `tortoise hooks install`")
    outcome: dict[str, Any] = {}
    with _hook_log(args.db, outcome) as log:
        return _run_hook(args, outcome, log)


def _run_hook(args: argparse.Namespace, outcome: dict[str, Any], log: logging.Logger) -> int:
    def work() -> None:
        try:
            from ..adapters.claude_code import handle_event
            from ..memory import Memory

            raw = read_event(sys.stdin)
            outcome["event"] = event = json.loads(raw) if raw.strip() else None
            with Memory(args.db, namespace=args.namespace, store_timeout_s=min(HOOK_STORE_TIMEOUT_S, args.timeout / 2),
                        **model_options(args)) as mem:
                outcome["output"] = handle_event(mem, event, budget=args.budget, max_tokens=args.max_tokens,
                                                 max_bytes=HOOK_MAX_BYTES, catch_up_s=min(CATCH_UP_S, args.timeout / 2))
        except BaseException as exc:  # noqa: BLE001 - reported in the log, never to the host
            outcome["error"] = exc

    started = time.monotonic()
    worker = threading.Thread(target=work, name="tortoise-hook", daemon=True)
    worker.start()
    worker.join(args.timeout)
    if worker.is_alive():
        log.error("timed out after %g s; nothing printed, the host went on", args.timeout)
        logging.shutdown()
        # A hard stop: the worker may sit in a database call. An open transaction dies with the
        # process (SQLite rolls back from its journal, PostgreSQL on disconnect): nothing half-written.
        os._exit(0)
    if "error" in outcome:
        exc = outcome["error"]
        # An event that is not one (garbage or nothing on stdin), or a transcript it names that cannot be read
        # (missing, not a regular file), is one line; anything else keeps its traceback.
        bad_event = isinstance(exc, (InvalidInput, json.JSONDecodeError, StreamParseError))
        log.error("%s: %s", type(exc).__name__, exc, exc_info=None if bad_event else exc)
        return 0
    output = outcome.get("output")
    if output:
        try:
            sys.stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        except OSError as exc:
            log.error("could not write the output: %s", exc)
    elapsed = time.monotonic() - started
    if elapsed > args.timeout * 0.8:
        log.warning("slow: %.2f s of the %g s limit", elapsed, args.timeout)
    return 0


def read_event(stream: Any) -> str:
    """The text of the one JSON object Claude Code writes on the hook's stdin, read until it is whole, not until the
    end of input: some versions leave the pipe open (SessionEnd after /clear, hooks on Windows), and a read to the
    end then waited for the hook's time limit and did nothing. Input that never makes one object is read to its
    end; a stream with no file descriptor (in memory) is read whole."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return str(stream.read())
    decoder = json.JSONDecoder()
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
        try:
            text = data.decode("utf-8")
            start = len(text) - len(text.lstrip())
            value, end = decoder.raw_decode(text, start)
        except ValueError:  # not whole yet (a UnicodeDecodeError too: a character cut between two writes)
            continue
        if isinstance(value, dict) and not text[end:].strip():
            return text
    return data.decode("utf-8", errors="replace")


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream: not a terminal
        return False


class _EventFilter(logging.Filter):
    """Stamps each record with the hook event and session it happened in."""

    def __init__(self, outcome: dict[str, Any]) -> None:
        super().__init__()
        self.outcome = outcome

    def filter(self, record: logging.LogRecord) -> bool:
        event = self.outcome.get("event")
        event = event if isinstance(event, dict) else {}
        record.hook_event = event.get("hook_event_name") or "-"
        record.hook_session = event.get("session_id") or "-"
        return True


def log_refused_arguments(argv: list[str], said: str) -> None:
    """``tortoise hook`` whose arguments were refused: what argparse said goes to ``hooks.log`` (the ``--db`` given,
    if it can be read), nothing to the host, which goes on."""
    db = next((v.split("=", 1)[1] if "=" in v else (argv[i + 1] if i + 1 < len(argv) else None)
               for i, v in enumerate(argv) if v == "--db" or v.startswith("--db=")), None)
    with _hook_log(db, {}) as log:
        log.error("the hook's arguments were refused, so it did nothing (check the command in the Claude Code "
                  "settings, e.g. with `tortoise hooks install --print`): %s", " ".join(said.split()))


@contextmanager
def _hook_log(db: str | None, outcome: dict[str, Any]) -> Iterator[logging.Logger]:
    """For the run, the ``tortoise_sdk`` loggers write warnings to ``hooks.log`` beside the database, not stderr.

    (Claude Code shows a hook's stderr to the user.)
    """
    from logging.handlers import RotatingFileHandler

    log = logging.getLogger("tortoise_sdk.hook")
    try:
        from ..memory import HOOK_LOG, state_dir

        path = state_dir(db) / HOOK_LOG
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = RotatingFileHandler(path, maxBytes=_LOG_MAX_BYTES, backupCount=1,
                                                       encoding="utf-8", delay=True)
    except Exception:  # noqa: BLE001 - logging must not be the failure that reaches the host
        handler = logging.NullHandler()
    handler.setLevel(logging.WARNING)
    handler.addFilter(_EventFilter(outcome))
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(hook_event)s session=%(hook_session)s pid=%(process)d %(name)s: %(message)s"))
    root = logging.getLogger("tortoise_sdk")
    before = (root.level, root.propagate)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    root.propagate = False
    try:
        yield log
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(before[0])
        root.propagate = before[1]


def _register_hook(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hook", help="handle one Claude Code hook event (JSON on stdin); installed by `hooks install`",
                       description="Reads one Claude Code hook event from stdin. UserPromptSubmit: captures the "
                                   "transcript lines added since the last call and prints the memory block as "
                                   "additionalContext (nothing when empty). Stop, SubagentStop, PreCompact, "
                                   "SessionEnd: captures what is new and queues extraction. Always exits 0; "
                                   "a failure or a run past --timeout prints nothing and is logged to hooks.log "
                                   "beside the database. Run by hand on a terminal, it says so and exits 2.")
    p.add_argument("--timeout", type=bounded_float(0.1, 3600), default=DEFAULT_HOOK_TIMEOUT_S,
                   help="hard limit in seconds (default: %(default)s)")
    p.add_argument("--budget", type=int, default=3, help="at most this many pointers (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=400, help="token cap of the block (default: %(default)s)")
    add_model_options(p, model_help="litellm model whose extraction jobs are queued (default: $TORTOISE_MODEL)",
                      timeout=False)
    p.set_defaults(handler=_cmd_hook)


# -- hooks install / uninstall ---------------------------------------------------------------------


def _cmd_hooks(args: argparse.Namespace) -> int:
    from ..adapters.claude_code import hook_url, install_hooks, uninstall_hooks

    if args.user and args.shared:
        raise InvalidInput("--shared chooses a project's committed .claude/settings.json; --user writes "
                           "~/.claude/settings.json: pass one of them")
    if args.url is None and args.token_env is not None:
        raise InvalidInput("--token-env names the server's token for --url: give --url too, or drop --token-env")
    if args.token_env is not None:
        args.token_env = args.token_env.removeprefix("$")
        if not _ENV_NAME.fullmatch(args.token_env):
            raise InvalidInput(f"{args.token_env!r} is not the name of an environment variable (letters, digits and "
                               "_, not starting with a digit), e.g. TORTOISE_TOKEN", field="token-env")
    if args.url is not None and args.model:
        raise InvalidInput("with --url the server queues extraction with its own model (`tortoise serve --model "
                           "MODEL`): drop --model here")
    path = _settings_path(args)
    current = _read_settings(path)
    claims: list[str] = []
    pending: Claim | None = None
    if args.action == "install":
        claims = _db_from_environment(args)
        if not args.user:
            more, pending = _choose_namespace(args)
            claims += more
    try:
        if args.action == "install":
            updated = (install_hooks(current, url=hook_url(args.url, hook_namespace(args)), token_env=args.token_env,
                                     timeout=HTTP_TIMEOUT_S) if args.url is not None
                       else install_hooks(current, _hook_command(args), timeout=SETTINGS_TIMEOUT_S))
        else:
            updated = uninstall_hooks(current)
    except InvalidInput as exc:  # the message names the key; this names the file
        raise InvalidInput(f"{exc}; fix it first, nothing was changed", field=str(path)) from None
    text = json.dumps(updated, ensure_ascii=False, indent=2) + "\n"
    if args.print:
        sys.stdout.write(text)
        would = f"remove {path}, which would hold nothing else" if current and not updated else f"write {path}"
        print(f"tortoise: would {would} (nothing written)", file=sys.stderr)
        for line in claims:
            print(line, file=sys.stderr)
        return 0
    if updated == current:  # leave the user's file (and its formatting) alone, or absent
        state = "already installed in" if args.action == "install" else "not found in"
        print(f"tortoise hooks {state} {path}; nothing changed", file=sys.stderr)
    elif not updated:  # it held only our hooks: no empty `{}` is left behind
        path.unlink()
        print(f"tortoise hooks removed from {path}, which held nothing else: the file is gone", file=sys.stderr)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tortoise-{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        done = "installed in" if args.action == "install" else "removed from"
        print(f"tortoise hooks {done} {path}", file=sys.stderr)
    if pending is not None:  # the settings are written: the namespace is this project's now
        claims += _save_claim(args, pending)
    if args.action == "install":
        faster = [] if args.url is not None else [
            "tortoise: each prompt starts a `tortoise hook` process and waits for its block; to skip the start, keep "
            "`tortoise serve --claude-code-hooks` running and install with --url SERVER (docs/hosts/claude-code.md)"]
        for line in (*claims, _namespace_note(args), *faster, *_install_warnings(args, path)):
            print(line, file=sys.stderr)
    return 0


def _install_warnings(args: argparse.Namespace, path: Path) -> list[str]:
    """What an install should know: our hooks in another settings file Claude Code also reads here (each prompt
    would get two blocks), and a committed command naming this machine's home directory."""
    from ..adapters.claude_code import uninstall_hooks

    project = Path(args.project or ".").expanduser().absolute()
    where = {project / ".claude" / "settings.json": f"--project {shlex.quote(str(project))} --shared",
             project / ".claude" / "settings.local.json": f"--project {shlex.quote(str(project))}",
             Path.home() / ".claude" / "settings.json": "--user"}  # last: in the home folder, that file is --user's
    out = []
    for other, flags in where.items():
        if other == path or not other.is_file():
            continue
        try:
            settings = _read_settings(other)
            ours = uninstall_hooks(settings) != settings  # it holds our hooks when removing them changes it
        except InvalidInput:  # not Claude Code settings: none of ours
            continue
        if ours:
            out.append(f"tortoise: warning: tortoise hooks are also in {other}; Claude Code runs the hooks of every "
                       f"settings file, so each prompt gets its block twice (and with two namespaces each event is "
                       f"captured into both): keep one, `tortoise hooks uninstall {flags}` removes that one")
    db = getattr(args, "db", None)
    home = str(Path.home())
    if args.shared and db and "://" not in db and (db == home or db.startswith(home + os.sep)):
        out.append(f"tortoise: warning: --db {db} names this machine's home directory, in a file the team commits; "
                   "their machines do not have it: give a path relative to the project, or leave --db out")
    return out


def _db_from_environment(args: argparse.Namespace) -> list[str]:
    """A personal install without ``--db`` while ``$TORTOISE_DB`` is set: that database is written into the
    command, so the hooks write where install looked (Claude Code's environment may not have the variable)."""
    env = os.environ.get("TORTOISE_DB")
    if getattr(args, "db", None) or args.shared or not env:
        return []
    args.db = env
    return [f"tortoise: --db not given: $TORTOISE_DB ({env}) is written into the command, so the hooks write "
            f"there whatever Claude Code's environment holds"]


class Claim(NamedTuple):
    """A namespace to record as a project's once its settings are written: the cursor's revision as read."""

    namespace: str
    project: str
    revision: int


def _choose_namespace(args: argparse.Namespace) -> tuple[list[str], Claim | None]:
    """Keep a project install's namespace to that project. A namespace named after a directory is recorded in
    the store as that directory's (``_save_claim``, once the settings are written), and another directory of
    the same name (``~/work/app`` beside ``~/play/app``) gets the name with a short hash of its path instead
    (``app-3f2a91``); ``args`` then carries that namespace. A claim whose directory no longer exists (the
    project moved) passes to this one. A ``--namespace`` given that holds another project's sessions is kept,
    with a warning; so is a ``--shared`` install's name, which claims nothing (the command is the team's).
    Returns what install should say and the claim to save. ``--print`` opens no database; a store that cannot
    be opened is named, and the install goes on (the check is a courtesy, not a condition)."""
    project = str(Path(args.project or ".").expanduser().resolve())
    wanted = hook_namespace(args)
    if wanted == DEFAULT_NAMESPACE:  # the namespace every --user install shares: nobody's to claim
        return [], None
    personal = not args.shared  # a personal install claims its name; a --shared one only checks it
    own = f"{wanted}-{hashlib.sha256(project.encode('utf-8', 'surrogateescape')).hexdigest()[:6]}"
    names = [wanted] if _namespace_given(args) or not personal else [wanted, own]
    if args.print:  # a dry run opens nothing (opening may create a database, or a schema in PostgreSQL)
        return ([f"tortoise: --print opens no database: if another project of this name holds {wanted!r} there, "
                 f"install writes to {own!r} instead"] if len(names) > 1 else []), None
    db = args.db  # a --shared install's relative --db is the project's: Claude Code runs the hook there
    if args.shared and db and "://" not in db and not Path(db).expanduser().is_absolute():
        db = str(Path(project) / db)
    from ..memory import Memory

    taken_by = None  # the project that holds the name wanted, when this one moved aside
    try:
        for name in names:
            with Memory(db, namespace=name, create=False) as mem:
                cursor = mem.cursor(PROJECT_CURSOR)
                owner = cursor.value.get("dir")
                moved = owner not in (None, project) and not Path(owner).exists()
                if owner not in (None, project) and not moved and name != names[-1]:
                    taken_by = owner
                    continue  # another project's: this project's own name next
                held = owner is None and bool(mem.sessions())
                break  # name: the one this project writes to; owner: who claimed it before (None: nobody)
    except NotFoundError:  # no database yet: nothing recorded, the name wanted is claimed once settings are written
        return [], (Claim(wanted, project, 0) if personal else None)
    except TortoiseError as exc:
        return [f"tortoise: warning: could not check whether namespace {wanted!r} is another project's "
                f"({exc})"], None
    notes = []
    if taken_by is not None:
        args.namespace, args.namespace_given = name, True
        notes.append(f"tortoise: namespace {wanted!r} holds the sessions of {taken_by}, another project of this "
                     f"name: this project's hooks write to {name!r}")
    if moved:
        notes.append(f"tortoise: namespace {name!r} was {owner}'s, which no longer exists (moved?): "
                     + ("it is this project's now, with its sessions" if personal else "this machine's hooks write there"))
    elif owner not in (None, project):
        fix = "drop --namespace to give this project its own" if personal else "pass --namespace NAME to keep them apart"
        notes.append(f"tortoise: warning: namespace {name!r} holds the sessions of {owner}: the two projects' "
                     f"blocks can quote each other's; {fix}")
    elif held and personal:
        notes.append(f"tortoise: namespace {name!r} already holds sessions, captured before install recorded "
                     f"which project a namespace is for; if they are another project's, install again with "
                     f"--namespace NAME to keep this one apart")
    return notes, (Claim(name, project, cursor.revision) if personal and (owner is None or moved) else None)


def _save_claim(args: argparse.Namespace, claim: Claim) -> list[str]:
    """Record ``claim`` in the store (creating the database, as the hook would); a claim saved by another
    install in between, or a store that fails, is named."""
    from ..memory import Memory

    try:
        with Memory(args.db, namespace=claim.namespace) as mem:
            if mem.save_cursor(PROJECT_CURSOR, {"dir": claim.project}, revision=claim.revision) is not None:
                return []
            other = mem.cursor(PROJECT_CURSOR).value.get("dir")
    except TortoiseError as exc:
        return [f"tortoise: warning: could not record namespace {claim.namespace!r} as this project's ({exc})"]
    if other == claim.project:
        return []
    return [f"tortoise: warning: another install gave namespace {claim.namespace!r} to {other} meanwhile: "
            f"run install again"]


def _namespace_note(args: argparse.Namespace) -> str:
    """What ``hooks install`` says of the namespace it chose: where to read it, and the worker that extracts it."""
    from ..adapters.claude_code import namespace_words

    namespace = hook_namespace(args)
    words = (["--db", args.db] if getattr(args, "db", None) else []) + (
        namespace_words(namespace) if namespace != DEFAULT_NAMESPACE else [])
    flag = f" {shlex.join(words)}" if words else ""
    note = f"tortoise: namespace {namespace!r}: `tortoise search WORDS{flag}` reads it"
    model = args.model or env_model()
    if getattr(args, "url", None) is not None:
        note += "; " + _serve_note(args, words)
    elif model:
        note += (f"; `tortoise worker{flag} --model {shlex.quote(model)}` extracts it (a session's job is due "
                 f"{DEFAULT_EXTRACT_EVERY} turns or {DEFAULT_IDLE_S / 60:g} minutes after its last capture)")
        if not args.model:  # the command names no model: Claude Code's own environment decides
            note += ("; $TORTOISE_MODEL is set in this shell, not in the hook's command: extraction is queued only "
                     "if Claude Code's environment has it too (or install with --model)")
    else:
        note += ("; no model given (--model, or $TORTOISE_MODEL in Claude Code's environment): the turns are stored "
                 "and searchable, and no extraction is queued for `tortoise worker`")
    if args.user:
        note += ("; every project shares it, so a block can quote another project's sessions: install in each "
                 "project instead (`tortoise hooks install --project DIR`, a namespace per project) to keep them apart")
    elif namespace == DEFAULT_NAMESPACE:
        note += ("; a --user install and any other project given --namespace default share it, so a block can quote "
                 "their sessions: drop --namespace to give this project its own")
    return note


def _serve_note(args: argparse.Namespace, words: list[str]) -> str:
    """What an ``--url`` install asks of the user: the server to keep running at that address, and its worker."""
    from urllib.parse import urlsplit

    url = urlsplit(args.url)
    serve = (["--db", args.db] if getattr(args, "db", None) else []) + ["serve", "--claude-code-hooks"]
    if url.hostname not in (None, "127.0.0.1"):
        serve += ["--host", url.hostname]
    if (url.port or 80) != DEFAULT_PORT:
        serve += ["--port", str(url.port or 80)]
    note = (f"Claude Code posts each event to {args.url}: keep `tortoise {shlex.join(serve)}` running there "
            f"(add --model MODEL to queue extraction, then `tortoise worker {shlex.join(words)} --model MODEL` "
            f"extracts")
    if args.token_env:
        note += f"; add --token SECRET:{hook_namespace(args)} with SECRET the value of ${args.token_env}"
        if args.token_env not in os.environ:
            note += f", which this shell does not set: Claude Code's environment must have it"
    return note + "); while it is down prompts get no block, and a session's next event captures what it missed"


def _settings_path(args: argparse.Namespace) -> Path:
    """``~/.claude/settings.json`` (``--user``); in a project, ``settings.local.json`` (personal, not committed)
    unless ``--shared`` (``settings.json``, which a team commits)."""
    if args.user:
        return Path.home() / ".claude" / "settings.json"
    name = "settings.json" if args.shared else "settings.local.json"
    project = Path(args.project or ".").expanduser().absolute()
    if not project.is_dir():  # a mistyped DIR must not become a new directory holding only .claude/
        what = "is not a directory" if project.exists() else "does not exist"
        raise InvalidInput(f"--project {project} {what}; give the project's directory (default: the current one)")
    return project / ".claude" / name


def _read_settings(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not valid JSON ({exc.msg}, line {exc.lineno}); fix it first, nothing was changed",
                           field=str(path)) from None
    if not isinstance(data, dict):
        raise InvalidInput("expected a JSON object; fix it first, nothing was changed", field=str(path))
    return data


def _namespace_given(args: argparse.Namespace) -> bool:
    """Whether the command line named the namespace (``main`` records it; a parsed ``args`` alone: not the default)."""
    return getattr(args, "namespace_given", getattr(args, "namespace", DEFAULT_NAMESPACE) != DEFAULT_NAMESPACE)


def hook_namespace(args: argparse.Namespace) -> str:
    """The namespace the hooks write to: ``--namespace`` when given; else, installed in a project, one named after
    the project's directory (``spotter`` for ``~/code/spotter``), so one project's sessions are never another's
    memory; installed for the user (``--user``), the one ``default`` namespace every project shares."""
    if _namespace_given(args) or getattr(args, "user", False):
        return getattr(args, "namespace", DEFAULT_NAMESPACE)
    name = Path(getattr(args, "project", None) or ".").expanduser().resolve().name  # `--project ..`: its name
    # A name a namespace cannot be (blank, a control character, long past a directory name's): the shared one.
    return name if name.strip() and name.isprintable() and len(name.encode("utf-8")) <= 255 else DEFAULT_NAMESPACE


def _hook_command(args: argparse.Namespace) -> str:
    """The command line Claude Code runs: this installation's ``tortoise``, with the options given to install."""
    argv0 = Path(sys.argv[0])
    exe = argv0 if argv0.name.startswith("tortoise") and argv0.is_file() else Path(sys.executable).with_name("tortoise")
    # A file the team commits names no path of this machine: `tortoise` from PATH, --db as given.
    shared = getattr(args, "shared", False)
    words = [str(exe.absolute()) if exe.is_file() and not shared else "tortoise"]
    if getattr(args, "db", None):
        db = args.db
        words += ["--db", db if "://" in db or shared else str(Path(db).expanduser().absolute())]
    namespace = hook_namespace(args)
    if namespace != DEFAULT_NAMESPACE:
        from ..adapters.claude_code import namespace_words

        words += namespace_words(namespace)
    words.append("hook")
    if args.model:
        words += ["--model", args.model]
    return shlex.join(words)


def _register_hooks(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hooks", help="install or remove the Claude Code hooks (.claude/settings.local.json)",
                       description="Merges one `tortoise hook` entry per event (UserPromptSubmit, Stop, SubagentStop, "
                                   "PreCompact, SessionEnd) into the project's .claude/settings.local.json (personal; "
                                   "--shared: .claude/settings.json; --user: ~/.claude/settings.json), keeping every "
                                   "other hook; "
                                   "uninstall removes only these. --db, --namespace and --model given here are "
                                   "written into the hook command. Example: tortoise hooks install --user")
    p.add_argument("action", choices=("install", "uninstall"))
    where = p.add_mutually_exclusive_group()
    where.add_argument("--project", metavar="DIR", nargs="?", const=".",
                       help="the project in DIR (default, and for a bare --project: the current directory)")
    where.add_argument("--user", action="store_true", help="~/.claude/settings.json")
    p.add_argument("--shared", action="store_true",
                   help="in a project, write .claude/settings.json (committed, shared with the team: the command is "
                        "`tortoise` from PATH, no path of this machine) instead of .claude/settings.local.json")
    p.add_argument("--print", action="store_true",
                   help="print the resulting settings instead of writing them, and name the file they would go to")
    p.add_argument("--model", help="litellm model the hook queues extraction for (default: $TORTOISE_MODEL)")
    p.add_argument("--url", metavar="SERVER",
                   help="write HTTP hooks that post each event to a running `tortoise serve --claude-code-hooks` at "
                        "SERVER (e.g. http://127.0.0.1:8765) instead of starting `tortoise hook` per event: no "
                        "process start, the same block")
    p.add_argument("--token-env", metavar="NAME",
                   help="with --url: the environment variable holding the server's token, sent as "
                        "'Authorization: Bearer $NAME' (Claude Code's environment must have it)")
    p.set_defaults(handler=_cmd_hooks)
