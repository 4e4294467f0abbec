"""The memory inspector at ``/``: server-rendered pages over the same ``Memory`` calls as the JSON API.

Namespaces → sessions → turns (tool turns folded), a search box, memories with their quotes,
source turns and supersession, sub-agent rows with the health check, extraction jobs (a failed
one can be queued again), a "try a prompt" panel showing the block with each pointer's ``why``,
and forgetting (asks first, shows the tombstone).
Every stored string reaches the page through Jinja's autoescaping; the script only ever sets
``textContent``. With tokens configured, a login form keeps the token in a same-site cookie.
"""

from __future__ import annotations

import hmac
from collections import Counter
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader

from ...errors import NotFoundError
from ...memory import HOST_SESSION
from .auth import COOKIE, Denied, authorize, check_path

__all__ = ("SESSIONS_PER_PAGE", "error_page", "is_page", "router")

#: Turns of a session page folded by default: tool calls and their results.
_TOOL_PREFIXES = ("[tool_use", "[tool_result")
#: Sessions a namespace page lists at once, most recently updated first (``?page=`` for the others).
SESSIONS_PER_PAGE = 200

_env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True)
_env.filters["q"] = lambda text: quote(str(text), safe="")
_env.globals["HOST_SESSION"] = HOST_SESSION  # what remember() and correct_memory() file memories under
_env.tests["tool"] = lambda turn: turn.role == "tool" or turn.content.lstrip().startswith(_TOOL_PREFIXES)
templates = Jinja2Templates(env=_env)
router = APIRouter()


def is_page(request: Request) -> bool:
    """Whether the request is for one of the inspector's pages (answered in HTML, errors too), not the JSON API."""
    path = request.url.path
    return path in ("/", "/login") or path.startswith("/ns/")


def error_page(request: Request, message: str, status: int) -> Response:
    """The inspector's error page (``error.html``) saying ``message``, with the status the JSON API would answer."""
    return templates.TemplateResponse(request, "error.html", {"message": message, "status": status, "ns": None},
                                      status_code=status)


def _page(request: Request, template: str, namespace: str | None = None, /, **context: Any) -> Response:
    check_path(request)
    try:
        grant = authorize(request, namespace)
    except Denied as exc:
        if exc.status == 401:
            # the path as sent (still encoded): "%2F" in a namespace's name must come back as "%2F", not "/"
            raw = request.scope.get("raw_path")
            here = (raw.decode("latin-1") if raw else quote(request.url.path)) + (
                f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(here, safe='/')}", status_code=303)
        return error_page(request, str(exc), exc.status)
    mem = request.app.state.pool.get(namespace) if namespace is not None else None
    # an SDK error reaches the app's handler: the status and wording the JSON API gives, on the HTML error page
    built = {k: v(mem) if callable(v) else v for k, v in context.items()}
    return templates.TemplateResponse(request, template, {"ns": namespace, "grant": grant, **built})


def _namespaces(request: Request, grant_ns: str | None) -> list[str]:
    """The configured namespaces, a token's own, then those holding data; only ``grant_ns`` when a token is bound."""
    if grant_ns is not None:
        return [grant_ns]
    settings = request.app.state.settings
    names = [*settings.namespaces, *(t.namespace for t in settings.tokens if t.namespace),
             *request.app.state.pool.stored()]
    return list(dict.fromkeys(names))


@router.get("/", response_class=HTMLResponse)
def index(request: Request) -> Response:
    grant_ns = None
    try:
        grant = authorize(request, None)
        grant_ns = grant.namespace if grant else None
    except Denied:
        pass
    return _page(request, "index.html", namespaces=lambda _: _namespaces(request, grant_ns))


def _sessions_page(mem: Any, page: int) -> dict[str, Any]:
    """One page of the namespace's sessions, most recently updated first, with the counts of them all."""
    found = sorted(mem.sessions(), key=lambda s: s.updated_at, reverse=True)
    start = (page - 1) * SESSIONS_PER_PAGE
    return {"sessions": found[start:start + SESSIONS_PER_PAGE], "total": len(found),
            "turns": sum(s.turn_count for s in found), "page": page,
            "pages": max(1, -(-len(found) // SESSIONS_PER_PAGE))}


# Namespaces may hold '/' (a client sends it as %2F, which arrives decoded): each route's fixed suffix
# ends the namespace, and the namespace page, which has none, is matched last (see the end of this module).
@router.get("/ns/{namespace:path}/session", response_class=HTMLResponse)
def session_page(request: Request, namespace: str, id: str) -> Response:  # noqa: A002 - the URL's name
    def turns(mem: Any) -> list[Any]:
        found = mem.turns(id)
        if not found:
            raise NotFoundError(f"no session {id!r} in namespace {namespace!r}")
        return found

    return _page(request, "session.html", namespace, session_id=id, turns=turns,
                 memories=lambda m: m.memories(id, True))


@router.get("/ns/{namespace:path}/memories", response_class=HTMLResponse)
def memories_page(request: Request, namespace: str, superseded: bool = True) -> Response:
    return _page(request, "memories.html", namespace, memories=lambda m: m.memories(None, superseded))


@router.get("/ns/{namespace:path}/expand", response_class=HTMLResponse)
def expand_page(request: Request, namespace: str, id: str) -> Response:  # noqa: A002
    return _page(request, "expand.html", namespace, item=lambda m: m.expand(id))


@router.get("/ns/{namespace:path}/try", response_class=HTMLResponse)
def try_page(request: Request, namespace: str, prompt: str = "", budget: int = 3) -> Response:
    budget = min(max(budget, 1), 8)
    return _page(request, "try.html", namespace, prompt=prompt, budget=budget,
                 block=lambda m: m.context([{"role": "user", "content": prompt}], budget=budget)
                 if prompt.strip() else None)


@router.get("/ns/{namespace:path}/entity", response_class=HTMLResponse)
def entity_page(request: Request, namespace: str, name: str) -> Response:
    return _page(request, "entity.html", namespace, name=name, hood=lambda m: _neighbourhood(m, name))


def _neighbourhood(mem: Any, name: str) -> dict[str, Any]:
    """The entity named ``name`` in ``Memory.graph()``: the memories about it, and the entities those also name."""
    g = mem.graph()
    wanted = name.casefold()
    nodes = {n for n, d in g.nodes(data=True)
             if d.get("kind") == "entity" and (d.get("name") or "").casefold() == wanted}
    if not nodes:
        raise NotFoundError(f"no entity named {name!r}: entities appear once memories are extracted")
    about, related = [], Counter()
    for node in sorted(nodes):
        for source, _, relation in g.in_edges(node, keys=True):
            if g.nodes[source].get("kind") != "memory":
                continue
            about.append({"id": source.split(":", 1)[1], "relation": relation, **g.nodes[source]})
            related.update(g.nodes[other]["name"] for _, other in g.out_edges(source)
                           if other not in nodes and g.nodes[other].get("kind") == "entity")
    first = g.nodes[min(nodes)]
    return {"kind": first.get("entity_kind"), "note": first.get("note"), "memories": about,
            "related": related.most_common(30)}


@router.get("/ns/{namespace:path}/subagents", response_class=HTMLResponse)
def subagents_page(request: Request, namespace: str) -> Response:
    return _page(request, "subagents.html", namespace, rows=lambda m: m.subagents(),
                 health=lambda m: m.subagent_health())


@router.get("/ns/{namespace:path}/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, namespace: str, status: str | None = None) -> Response:
    return _page(request, "jobs.html", namespace, status=status, jobs=lambda m: m.jobs(status=status))


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> Response:  # noqa: A002
    return templates.TemplateResponse(request, "login.html", {"next": _local(next), "failed": False, "ns": None})


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token, target = form.get("token", [""])[0].strip(), _local(form.get("next", ["/"])[0])
    if not any(hmac.compare_digest(t.secret.encode(), token.encode()) for t in request.app.state.settings.tokens):
        return templates.TemplateResponse(request, "login.html", {"next": target, "failed": True, "ns": None},
                                          status_code=401)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


def _local(target: str) -> str:
    """Only a path of this server (no ``//host``, ``/\\host`` or scheme), so the login cannot redirect elsewhere."""
    # Browsers read a backslash as a slash and drop tabs and newlines: "/\\evil" and "/\t/evil" mean "//evil".
    local = target.startswith("/") and not target.startswith(("//", "/\\")) and target.isprintable()
    return target if local else "/"


@router.get("/ns/{namespace:path}", response_class=HTMLResponse)
def namespace_page(request: Request, namespace: str, q: str = "",
                   page: Annotated[int, Query(ge=1, description="1 for the most recent sessions")] = 1) -> Response:
    return _page(request, "namespace.html", namespace, q=q, listing=lambda m: _sessions_page(m, page),
                 result=lambda m: m.explain_search(q, k=20) if q.strip() else None,
                 memory_count=lambda m: len(m.memories()))
