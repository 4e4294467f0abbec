"""Claude Code hooks: capture the transcript as it grows, and give each prompt its memory block.

``tortoise hooks install`` writes the entries into ``.claude/settings.local.json`` (or ``settings.json``); Claude Code
then runs ``tortoise hook`` for each event, with the event as JSON on stdin
(``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``; ``prompt`` on
``UserPromptSubmit``; ``agent_transcript_path`` on ``SubagentStop``):

- ``UserPromptSubmit``: the transcript lines added since the last call are captured
  (``Memory.follow``: from the byte offset kept in the store), then the memory block for the
  prompt and the session's recent turns is returned as
  ``{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": block}}``,
  or None when the block is empty. Pointers already shown in the session are not repeated
  unless the prompt asks; the session's turns Claude Code still holds (all of them, or those
  since its last compaction summary) are never pointed to, and a pointer needs evidence
  specific to the prompt (``reflex.gate``): generic prompts get no block. A slash command
  (``/init``, ``/review URL``) is searched by its arguments only: its name says what to do now.
- ``Stop``, ``SubagentStop``, ``PreCompact``, ``SessionEnd``: what is new in the transcript
  (and a sub-agent's own transcript) is captured, turns and sub-agent rows, and extraction
  is queued (``tortoise worker`` runs it).

``handle_event`` raises on failure; the ``tortoise hook`` command turns every failure
into silence (exit 0, no output) within its time limit, and logs the reason.
"""

from __future__ import annotations

import logging
import re
import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from ..errors import InvalidInput, StoreTimeout, TortoiseError
from ..models import CLAUDE_CODE_SHOWN_CURSOR
from ._common import is_loopback
from ..memory import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from ..memory import Memory

__all__ = (
    "CAPTURE_EVENTS",
    "CATCH_UP_S",
    "HOOK_EVENTS",
    "HTTP_ROUTE",
    "MAX_BYTES_PER_CALL",
    "STORE_BOUND_S",
    "expand_hint",
    "handle_event",
    "hook_url",
    "install_hooks",
    "is_our_command",
    "is_our_hook",
    "namespace_words",
    "transcript_paths",
    "uninstall_hooks",
)

log = logging.getLogger(__name__)

#: Events after which what is new in the transcript is captured and extraction queued.
CAPTURE_EVENTS: tuple[str, ...] = ("Stop", "SubagentStop", "PreCompact", "SessionEnd")
#: Every event ``tortoise hooks install`` registers.
HOOK_EVENTS: tuple[str, ...] = ("UserPromptSubmit", *CAPTURE_EVENTS)
#: The bound on each step's store calls (the capture, then the block), a wait for another process's write lock
#: included: Claude Code waits for the hook, so a locked database costs a prompt this much, and its block is
#: still built from what is stored (reads go on beside a writer); what was not captured is taken by the next
#: event of the session.
STORE_BOUND_S = 2.0
#: New transcript bytes one read captures at most (a prompt reads one piece; a capture event reads on for
#: ``CATCH_UP_S``). Small enough that capturing it stays far inside ``STORE_BOUND_S`` (1 MiB of random text,
#: the slowest to index, took 0.23 s here; 4 MiB took 0.9 s, and up to 2 s on a loaded machine, so a piece
#: could time out on every call and never be captured).
MAX_BYTES_PER_CALL = 1024 * 1024
#: How long a capture event (``CAPTURE_EVENTS``: no prompt waits for a block) goes on reading pieces of
#: ``max_bytes`` while its transcript holds more: a session's last turns after megabytes of tool output are
#: captured at its end, when no later event would take them. Half the hook's own limit (8 s), so a piece begun
#: just before it still ends inside that limit.
CATCH_UP_S = 4.0
#: The path under ``tortoise serve``'s namespace prefix that takes Claude Code's HTTP hooks (``--claude-code-hooks``).
HTTP_ROUTE = "/hooks/claude-code"
#: Recent turns of the session the reflex reads beside the prompt.
WINDOW_TURNS = 6
#: The reflex's own time budget in a hook. Larger than ``Memory.context``'s in-process default: each
#: hook is a fresh process whose first store reads are cold, and the hook has its own hard limit.
REFLEX_TIME_BUDGET_MS = 1000.0
#: How many pointer ids already shown in a session are remembered (prior-mention rule).
SHOWN_KEPT = 64
#: The key of a session's cursor that lists the sessions it resumed (their lines start its transcript).
RESUMES_KEY = "resumes"
#: A prompt that runs a slash command: ``/name`` (``/workflows:review``, ``/pr-comments``), then its arguments.
_SLASH_COMMAND = re.compile(r"\A\s*/[A-Za-z][\w:.-]*(?=\s|\Z)")
#: How Claude Code's compaction summary begins (a user-role line it writes itself, stored as a system turn).
COMPACTION_PREFIX = "This session is being continued from a previous conversation"


def handle_event(
    mem: Memory,
    event: Mapping[str, Any],
    *,
    budget: int = 3,
    max_tokens: int = 400,
    max_bytes: int | None = None,
    time_budget_ms: float = REFLEX_TIME_BUDGET_MS,
    step_bound_s: float | None = None,
    catch_up_s: float = CATCH_UP_S,
) -> dict | None:
    """Act on one hook event; returns the JSON document to print, or None to print nothing.

    ``budget`` and ``max_tokens`` bound the block, ``time_budget_ms`` the reflex's run (past it
    the block is empty); ``max_bytes`` bounds the transcript bytes captured at a time (``Memory.follow``): a
    prompt reads one piece (a long backlog waits for the next events), a capture event reads pieces until it
    has caught up or ``catch_up_s`` has passed (its last piece may end after it).
    ``step_bound_s`` bounds each step's store calls together (a capture, then the block), whatever ``mem``'s own
    bound: a database another process holds for writing then costs a prompt that long, and the block is still built.

    Raises:
        InvalidInput: the event is not a hook event object.
        TortoiseError, OSError: the store or the transcript failed (the command logs it and stays silent).
    """
    if not isinstance(event, Mapping) or not isinstance(event.get("hook_event_name"), str):
        raise InvalidInput("expected a Claude Code hook event with hook_event_name", field="stdin")
    name = event["hook_event_name"]
    session_id = _text(event.get("session_id"))
    transcript = _text(event.get("transcript_path"))
    if name == "UserPromptSubmit":
        locked = False
        if transcript and not Path(transcript).exists():
            # A new session's first prompt comes before Claude Code writes its transcript: nothing to capture yet.
            log.info("transcript %s not written yet: nothing captured", transcript)
        elif transcript:
            try:
                with mem.within(step_bound_s):
                    _, others = _follow(mem, transcript, session_id, False, max_bytes)
                    _note_resumed(mem, session_id, others)
            except (TortoiseError, OSError) as exc:  # the block can still be built from what is stored
                log.warning("transcript not captured: %s", exc)
                locked = isinstance(exc, StoreTimeout)
        prompt = slash_arguments(_text(event.get("prompt")))
        if not prompt:
            return None
        with mem.within(step_bound_s):
            return _prompt_context(mem, session_id, prompt, budget, max_tokens, time_budget_ms, remember=not locked)
    if name in CAPTURE_EVENTS:
        until = time.monotonic() + catch_up_s
        for path in transcript_paths(event):
            while True:
                with mem.within(step_bound_s):
                    read_some, others = _follow(mem, path, session_id, "background", max_bytes)
                    _note_resumed(mem, session_id, others)
                if max_bytes is None or not read_some or time.monotonic() >= until:
                    break
    return None


def transcript_paths(event: Mapping[str, Any]) -> list[str]:
    """The files an event names for capture: its ``transcript_path`` and a sub-agent's ``agent_transcript_path``."""
    return list(dict.fromkeys(p for p in (_text(event.get("transcript_path")),
                                          _text(event.get("agent_transcript_path"))) if p))


def slash_arguments(prompt: str | None) -> str | None:
    """The prompt to search: a slash command's arguments ("/review https://…/pull/9": the URL), None for a
    command alone ("/init", "/exit"); any other prompt as it is."""
    if prompt is None or not (m := _SLASH_COMMAND.match(prompt)):
        return prompt
    return prompt[m.end():].strip() or None


def _follow(mem: Memory, path: str, session_id: str | None, extract: Any,
            max_bytes: int | None) -> tuple[bool, list[str]]:
    """What is new in ``path`` (a regular file, read in pieces), captured for the event's session only:
    lines of another session (the session a resumed one continues, another app's JSONL) are left out and
    logged. Returns whether it read anything (the offset moved on) and the other sessions whose lines it met."""
    report = mem.follow(path, "claude-code", extract=extract, max_bytes=max_bytes, only_session=session_id)
    others = []
    for error in report.errors:
        log.warning("%s", error.message)
        if error.code == "other_session" and isinstance(other := error.detail.get("session_id"), str):
            others.append(other)
    return (report.end_offset or 0) > (report.start_offset or 0), others


def _note_resumed(mem: Memory, session_id: str | None, others: list[str]) -> None:
    """Keep, in the session's cursor, the sessions whose lines its transcript holds: a resumed session's transcript
    starts with the session it continues (``claude --resume`` copies it, under its own id), which Claude Code
    holds in its context as it holds the session's own turns."""
    if not session_id or not others:
        return
    shown = mem.cursor(f"{CLAUDE_CODE_SHOWN_CURSOR}{session_id}")
    known = [s for s in shown.value.get(RESUMES_KEY) or [] if isinstance(s, str)]
    if set(others) <= set(known):
        return
    mem.save_cursor(shown.name, {**shown.value, RESUMES_KEY: sorted({*known, *others})}, revision=shown.revision)


def _prompt_context(
    mem: Memory, session_id: str | None, prompt: str, budget: int, max_tokens: int, time_budget_ms: float,
    remember: bool = True,
) -> dict | None:
    """The hook output for a prompt, or None; with ``remember`` the pointers shown are saved for the
    prior-mention rule (not when the database is locked: the prompt waited for it once already)."""
    recent = mem.turns(session_id, last=WINDOW_TURNS) if session_id else []
    window = [*({"role": h.role, "content": h.content} for h in recent), {"role": "user", "content": prompt}]
    shown = mem.cursor(f"{CLAUDE_CODE_SHOWN_CURSOR}{session_id}") if session_id else None
    ids = [i for i in (shown.value.get("ids") if shown else None) or [] if isinstance(i, str)]
    prior = " ".join(f"ref:{i}" for i in ids) or None
    # Claude Code holds the session since its last compaction: those turns are not memory, and a
    # coding session's generic prompts ("continue", "did you push?") get no block (issue 23). Before this
    # session's first compaction it holds the sessions it resumed too, from their own last compaction.
    first = held_from(mem.turns(session_id, role="system")) if session_id else 0
    resumed = [s for s in (shown.value.get(RESUMES_KEY) if shown else None) or [] if isinstance(s, str)]
    held = {s: held_from(mem.turns(s, role="system")) for s in resumed} if first == 0 and resumed else {}
    held |= reported_sub_agents(mem, session_id, first) if session_id else {}
    block = mem.context(window, prior, budget=budget, max_tokens=max_tokens, session_id=session_id,
                        time_budget_ms=time_budget_ms, held_from=first, specific_only=True,
                        held_sessions=held or None)
    if block.degraded_reason:
        log.warning("no memory block: %s (%.0f ms)", block.degraded_reason, block.elapsed_ms)
    if not block.block:
        return None
    if shown is not None and remember:
        kept = [*[i for i in ids if i not in {p.id for p in block.pointers}], *(p.id for p in block.pointers)]
        try:
            mem.save_cursor(shown.name, {**shown.value, "ids": kept[-SHOWN_KEPT:]}, revision=shown.revision)
        except TortoiseError as exc:  # a locked database: the block goes out, its pointers may show again
            log.warning("shown pointers not saved: %s", exc)
    return {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                   "additionalContext": f"{block.block}\n{expand_hint(mem)}"}}


def namespace_words(namespace: str) -> list[str]:
    """``--namespace NAME`` for a command line; ``--namespace=-x`` for a name that starts like an option."""
    return [f"--namespace={namespace}"] if namespace.startswith("-") else ["--namespace", namespace]


def expand_hint(mem: Memory) -> str:
    """The line after the block that tells the agent how to read a pointer whole: a synopsis is cut at
    ``SYNOPSIS_CHARS`` and made inert (brackets as parentheses), so a command in it is not the command."""
    argv0 = Path(sys.argv[0])  # the hook's own `tortoise`, which may not be on the agent's PATH
    words = [str(argv0.absolute()) if argv0.name.startswith("tortoise") and argv0.is_file() else "tortoise"]
    secret = "***" in mem.store.url  # a URL's password is never written into the block
    words += ["--db", "DB_URL" if secret else mem.store.url]
    if mem.namespace != DEFAULT_NAMESPACE:
        words += namespace_words(mem.namespace)
    return (f"(Each pointer is shortened and its brackets made parentheses: `{shlex.join(words)} expand ID`, "
            "ID its t_… or m_… id, prints it as stored (exact; a tool call's arguments and output were "
            "stored cut short), with the turns around it"
            + (", DB_URL the --db of the hook's command)" if secret else ".)"))


def reported_sub_agents(mem: Memory, session_id: str, first: int) -> dict[str, int]:
    """The sub-agents of the session whose result Claude Code holds (they ended, and the call that ran them is not
    compacted away, at or after ``first``), each with the index of its final report: its last turn, when that is a
    message of its own (not a tool call or result), which Claude Code gives the session word for word as the call's
    result. Their turns before it are not held; a sub-agent whose report was not captured (its last turn is a tool's)
    holds nothing back."""
    reports: dict[str, int] = {}
    for row in mem.subagents(session_id):
        child = row.child_session_id or (f"{session_id}:agent-{row.agent_id}" if row.agent_id else None)
        if child is None or row.settled_at is None or row.turn_id is None:
            continue
        try:
            if mem.store.get_turn(mem.namespace, row.turn_id).index < first:
                continue
        except TortoiseError:  # the launching turn is not stored: nothing says the session holds the result
            continue
        last = mem.turns(child, last=1)
        if last and _is_report(last[0]):
            reports[child] = last[0].index
    return reports


def _is_report(turn: Any) -> bool:
    """An assistant turn that is a message, not a tool call (``[tool_use …]``)."""
    return turn.role == "assistant" and not (turn.content.startswith("[tool_use ") or "\n[tool_use " in turn.content)


def held_from(turns: list[Any]) -> int:
    """The index of the session's first turn Claude Code still holds: its last compaction summary's, else 0 (``turns``:
    the session's, or its system turns only)."""
    held = 0
    for t in turns:
        if t.role == "system" and t.content.lstrip().startswith(COMPACTION_PREFIX):
            held = t.index
    return held


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


# -- settings.json -------------------------------------------------------------------------------


def is_our_command(command: Any) -> bool:
    """Whether a hook command runs ``tortoise hook`` (what ``install_hooks`` writes)."""
    if not isinstance(command, str):
        return False
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    return bool(argv) and Path(argv[0]).name in ("tortoise", "tortoise.exe") and "hook" in argv[1:]


def is_our_hook(entry: Any) -> bool:
    """Whether a settings hook entry is one ``install_hooks`` writes: a command running ``tortoise hook``, or an
    HTTP hook posting to ``tortoise serve``'s Claude Code route."""
    if not isinstance(entry, Mapping):
        return False
    if entry.get("type") == "http":
        url = entry.get("url")
        return isinstance(url, str) and urlsplit(url).path.endswith(HTTP_ROUTE) and "/v1/ns/" in url
    return is_our_command(entry.get("command"))


def hook_url(server: str, namespace: str) -> str:
    """The URL Claude Code posts each event to: ``server`` (``http://127.0.0.1:8765``) and the namespace's route.

    Raises:
        InvalidInput: ``server`` is not an ``http://`` address of this machine (loopback) with a valid port,
            has a query or already holds a route (``/v1/...``); ``namespace`` holds a ``/``.
    """
    parts = urlsplit(server.strip())
    try:
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        parts = parts._replace(scheme="")
    if (parts.scheme != "http" or not parts.hostname or parts.query or parts.fragment
            or "/v1/" in parts.path + "/"):
        raise InvalidInput(f"--url {server!r}: give the address `tortoise serve` listens on, e.g. "
                           "http://127.0.0.1:8765 (the path to the namespace is added)", field="url")
    if not is_loopback(parts.hostname):
        raise InvalidInput(f"--url {server!r}: `tortoise serve --claude-code-hooks` listens on this machine only "
                           "(it reads this machine's transcripts): give 127.0.0.1, localhost or [::1]", field="url")
    if "/" in namespace:
        raise InvalidInput(f"namespace {namespace!r} holds a '/', which a URL path cannot carry: give the HTTP "
                           "hooks a namespace without one (--namespace NAME)", field="namespace")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}/v1/ns/{quote(namespace, safe='')}{HTTP_ROUTE}"


def install_hooks(settings: Mapping[str, Any], command: str | None = None, *, timeout: int,
                  url: str | None = None, token_env: str | None = None) -> dict[str, Any]:
    """``settings`` with one tortoise entry per event in ``HOOK_EVENTS`` (replacing ours, keeping others).

    Args:
        settings: the parsed ``settings.json`` (not modified).
        command: the shell command Claude Code runs, e.g. ``/home/me/.venv/bin/tortoise hook``.
        timeout: seconds Claude Code allows the command or the request (above the hook's own limit).
        url: instead of ``command``, the URL of a running ``tortoise serve --claude-code-hooks`` that Claude
            Code posts each event to (``hook_url``): no process starts per event.
        token_env: with ``url``, the environment variable holding the server's token, sent as
            ``Authorization: Bearer $NAME`` (Claude Code reads it from its own environment).

    Raises:
        InvalidInput: neither or both of ``command`` and ``url``; ``settings``, its ``hooks`` or the list of
            one of our events is not shaped like Claude Code settings (the message names the key).
    """
    if (command is None) == (url is None):
        raise InvalidInput("give the hook a command or a url, not both")
    entry: dict[str, Any] = {"type": "command", "command": command, "timeout": timeout}
    if url is not None:
        entry = {"type": "http", "url": url, "timeout": timeout}
        if token_env:
            entry |= {"headers": {"Authorization": f"Bearer ${token_env}"}, "allowedEnvVars": [token_env]}
    out = uninstall_hooks(settings)
    hooks = out.setdefault("hooks", {})
    for event in HOOK_EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise InvalidInput(f'"hooks.{event}" must be a list of matcher groups')
        groups.append({"hooks": [dict(entry)]})
    return out


def uninstall_hooks(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` without tortoise's entries (``is_our_hook``); every other hook, group and key is kept as it was.

    Raises:
        InvalidInput: ``settings`` or its ``hooks`` is not shaped like Claude Code settings.
    """
    if not isinstance(settings, Mapping):
        raise InvalidInput("settings.json must hold a JSON object")
    out = dict(settings)
    hooks = out.get("hooks")
    if hooks is None:
        return out
    if not isinstance(hooks, Mapping):
        raise InvalidInput('"hooks" must be an object of event names')
    kept_events: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept_events[event] = groups
            continue
        kept_groups = []
        for group in groups:
            entries = group.get("hooks") if isinstance(group, Mapping) else None
            if not isinstance(entries, list):
                kept_groups.append(group)
                continue
            mine = [h for h in entries if is_our_hook(h)]
            if not mine:
                kept_groups.append(group)
            elif len(mine) < len(entries):
                kept_groups.append({**group, "hooks": [h for h in entries if h not in mine]})
        if kept_groups or not groups:
            kept_events[event] = kept_groups
    if kept_events or not hooks:
        out["hooks"] = kept_events
    else:
        del out["hooks"]
    return out
