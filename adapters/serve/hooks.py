"""Claude Code's HTTP hooks on ``tortoise serve --claude-code-hooks``: each event handled by the running server.

A command hook starts a Python process per event (``tortoise hook``), and most of that process's time
goes to importing the package. An HTTP hook (``"type": "http"`` in Claude Code's settings, written by
``tortoise hooks install --url``) posts the same event as JSON to ``POST /v1/ns/{namespace}/hooks/claude-code``
instead. The server is already warm and answers with what the command would have printed, from the
same ``handle_event``, so the block is the same. Claude Code treats a non-2xx answer, a refused
connection or a timeout as a non-blocking error. A server that is down therefore costs that prompt's
block, never the prompt. The transcript is read from the byte offset the store keeps, so the next event
captures whatever was missed.

The server reads the transcript files the events name. It must run as the user whose transcripts they
are, and it captures only the lines of the event's own session. The route answers 404 unless the server
was started with ``--claude-code-hooks``. It takes only ``application/json`` bodies: a page of another
site cannot post one unless the browser asks the server first, and the server never grants that. Like
every route, it needs a token when the server has tokens.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request

from ...errors import InvalidInput, NotFoundError, StreamParseError
from ..claude_code import HTTP_ROUTE, MAX_BYTES_PER_CALL, handle_event
from .api import MAX_BUDGET, MAX_MAX_TOKENS, Mem

__all__ = ("OFF", "router")

#: What the route says when the server was not started with ``--claude-code-hooks``.
OFF = ("this server takes no Claude Code hooks: start it with `tortoise serve --claude-code-hooks` (it then reads "
       "the transcript files the events name, so run it as the user whose transcripts they are)")

router = APIRouter(prefix="/v1/ns/{namespace}")


@router.post(HTTP_ROUTE, response_model=dict[str, Any], summary="One Claude Code hook event (an HTTP hook)")
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
    if not request.app.state.settings.claude_code_hooks:
        raise NotFoundError(OFF)
    try:
        return handle_event(mem, event, budget=budget, max_tokens=max_tokens, max_bytes=MAX_BYTES_PER_CALL) or {}
    except (OSError, StreamParseError) as exc:  # the transcript the event names: missing, unreadable, not a file
        raise InvalidInput(f"the event's transcript could not be read: {exc}", field="transcript_path") from None
