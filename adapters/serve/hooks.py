"""Claude Code's HTTP hooks on ``tortoise serve --claude-code-hooks``: each event handled by the running server.

A command hook starts a Python process per event (``tortoise hook``), and most of that process's time
goes to importing the package. An HTTP hook (``"type": "http"`` in Claude Code's settings, written by
``tortoise hooks install --url``) posts the same event as JSON to ``POST /v1/ns/{namespace}/hooks/claude-code``
instead. The server is already warm and answers with what the command would have printed, from the
same ``handle_event`` with the same bounds, so the block is the same. Claude Code treats a non-2xx
answer, a refused connection or a timeout as a non-blocking error: a server that is down costs those
prompts their blocks, never the prompts, and the next event of a session captures what its transcript
gained meanwhile (the store keeps each file's byte offset).

The server reads the transcript files the events name, so the route takes what only Claude Code on
this machine sends:

- it answers 404 unless the server was started with ``--claude-code-hooks``, and ``build_app`` refuses
  that on an address other machines can reach (their transcripts are not on this one);
- a transcript must be an absolute ``.jsonl`` path inside Claude Code's projects folder
  (``ServeSettings.transcripts``: ``$CLAUDE_CONFIG_DIR/projects`` or ``~/.claude/projects``), and only
  the lines of the event's own ``session_id`` (required) are captured;
- the body must be ``application/json``, and a request a browser sends (an ``Origin`` header, or
  ``Sec-Fetch-Site`` other than ``none``) is refused: a page of another site cannot make the server read
  a file;
- like every route, it needs a token when the server has tokens.

Failures answer 4xx/5xx with the usual error body, and a line on the server's stderr says why (the
command instead exits 0 silently and logs to ``hooks.log``); either way Claude Code goes on without a
block.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request

from ...errors import InvalidInput, NotFoundError, StreamParseError
from ..claude_code import HTTP_ROUTE, MAX_BYTES_PER_CALL, STORE_BOUND_S, handle_event, transcript_paths
from .api import ERRORS, MAX_BUDGET, MAX_MAX_TOKENS, PREFIX, READ_ONLY, Mem

__all__ = ("OFF", "router")

log = logging.getLogger("tortoise.serve")

#: What the route says when the server was not started with ``--claude-code-hooks``.
OFF = ("this server takes no Claude Code hooks: start it with `tortoise serve --claude-code-hooks` (it then reads "
       "the transcript files the events name, so run it as the user whose transcripts they are)")

router = APIRouter(prefix=PREFIX, responses=ERRORS)


@router.post(HTTP_ROUTE, response_model=dict[str, Any], summary="One Claude Code hook event (an HTTP hook)",
             responses=READ_ONLY)
def claude_code_hook(
    event: Annotated[dict[str, Any], Body(description="The event as Claude Code posts it (hook_event_name, "
                                                       "session_id, transcript_path, prompt...).")],
    request: Request,
    mem: Mem,
    budget: Annotated[int, Query(ge=1, le=MAX_BUDGET, description="At most this many pointers.")] = 3,
    max_tokens: Annotated[int, Query(ge=1, le=MAX_MAX_TOKENS, description="Token cap of the block.")] = 400,
) -> dict[str, Any]:
    """``adapters.claude_code.handle_event`` in the server: on UserPromptSubmit the transcript's new lines are
    captured and ``{"hookSpecificOutput": {..., "additionalContext": block}}`` is returned; on Stop,
    SubagentStop, PreCompact and SessionEnd what is new is captured and extraction queued. An empty object
    when there is nothing to say (Claude Code then adds nothing)."""
    settings = request.app.state.settings
    if not settings.claude_code_hooks:
        raise NotFoundError(OFF)
    _from_claude_code(request)
    if not isinstance(event.get("hook_event_name"), str):
        raise InvalidInput("expected a Claude Code hook event with hook_event_name", field="hook_event_name")
    if not isinstance(event.get("session_id"), str) or not event["session_id"].strip():
        raise InvalidInput("a Claude Code hook event names its session_id", field="session_id")
    for key in ("transcript_path", "agent_transcript_path"):
        if event.get(key) is not None and not isinstance(event[key], str):
            raise InvalidInput(f"{key} must be a path (a string)", field=key)
    root = settings.transcripts_folder()
    for path in transcript_paths(event):
        if not _inside(path, root):
            raise InvalidInput(f"a transcript must be an absolute .jsonl path in Claude Code's projects folder, "
                               f"{root} (start the server with --transcripts DIR for another)", field="transcript_path")
    try:
        return handle_event(mem, event, budget=budget, max_tokens=max_tokens, max_bytes=MAX_BYTES_PER_CALL,
                            step_bound_s=STORE_BOUND_S) or {}
    except (OSError, StreamParseError) as exc:  # the transcript the event names: missing, unreadable, not a file
        log.warning("%s %s: transcript not captured: %s", request.method, request.url.path, exc)
        raise InvalidInput("the event's transcript could not be read (the server's log says why)",
                           field="transcript_path") from None


def _from_claude_code(request: Request) -> None:
    """Refuse a body that is not JSON and a request a browser made (Claude Code sends neither)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise InvalidInput("the event must be sent as application/json", field="content-type")
    if "origin" in request.headers or request.headers.get("sec-fetch-site", "none") != "none":
        raise InvalidInput("a browser's request is refused here: only Claude Code posts hook events", field="origin")


def _inside(path: str, root: Path) -> bool:
    candidate = Path(path)
    if not candidate.is_absolute() or candidate.suffix != ".jsonl":
        return False
    try:
        return candidate.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        return False
