"""The ``tortoise serve`` application: the JSON API, the inspector, limits and error answers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.datastructures import Headers

from ... import __version__
from ...errors import (
    CaptureConflict,
    ConfigError,
    IdempotencyConflict,
    InvalidInput,
    ModelError,
    NotFoundError,
    ReadOnlyStore,
    StoreError,
    StoreTimeout,
    TortoiseError,
    reword,
)
from ...memory import NO_MODEL_REASON, Memory
from ..claude_code import HTTP_ROUTE
from . import api, hooks, inspector
from .api import NO_MODEL_ON_SERVER
from .auth import Denied, MemoryPool, ServeSettings, check_bind, is_loopback

__all__ = ("NO_MODEL_ON_SERVER", "build_app", "error_status")

log = logging.getLogger("tortoise.serve")

#: HTTP status of each error the SDK raises on purpose, most specific first.
_STATUS: tuple[tuple[type[TortoiseError], int], ...] = (
    (CaptureConflict, 409),
    (IdempotencyConflict, 409),
    (InvalidInput, 400),
    (ConfigError, 400),
    (NotFoundError, 404),
    (ReadOnlyStore, 409),
    (StoreTimeout, 503),
    (StoreError, 503),
    (ModelError, 502),
)
_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def error_status(exc: TortoiseError) -> int:
    """The HTTP status for an SDK error: 400 bad input, 404 not found, 409 conflict, 502/503 upstream, else 500."""
    if isinstance(exc, Denied):
        return exc.status
    return next((status for kind, status in _STATUS if isinstance(exc, kind)), 500)


def build_app(settings: ServeSettings | None = None, *, memory_factory: Callable[..., Any] = Memory) -> FastAPI:
    """The ASGI app: ``/v1/...`` (JSON; schema ``/openapi.json``, pages ``/docs``), ``/health``, the inspector at ``/``.

    Args:
        settings: database, tokens and limits (default: the default database, no tokens, loopback).
        memory_factory: builds each namespace's ``Memory`` (``namespace=``, ``db=`` or ``store=``, options).
    """
    settings = settings or ServeSettings()
    check_bind(settings.host, settings.tokens, settings.claude_code_hooks)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        app.state.pool.close()

    app = FastAPI(title="tortoise-sdk", version=__version__, lifespan=lifespan,
                  description="Long-term memory for LLM agents over HTTP: the Memory API of one database, "
                              "per namespace. Authenticate with 'Authorization: Bearer SECRET' when the server "
                              "was started with --token.")
    app.state.settings = settings
    app.state.pool = MemoryPool(settings, memory_factory)

    @app.get("/health", response_model=api.Health, tags=["server"], summary="The server is up")
    def health() -> api.Health:
        """No token needed; says nothing about the data."""
        return api.Health(version=__version__)

    app.include_router(api.router, tags=["memory"])
    app.include_router(hooks.router, tags=["hosts"])
    app.include_router(inspector.router, include_in_schema=False)
    app.mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static")

    def openapi() -> dict[str, Any]:
        """FastAPI's schema without the 422 it documents for bad input: this server answers 400 (``ErrorBody``)."""
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            for operations in schema["paths"].values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(TortoiseError)
    async def sdk_error(request: Request, exc: TortoiseError) -> Response:
        status = error_status(exc)
        if status >= 500:
            log.error("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        elif request.url.path.endswith(HTTP_ROUTE):  # Claude Code shows no answer of a hook: the log must say why
            log.warning("%s %s: %d %s: %s", request.method, request.url.path, status, type(exc).__name__, exc)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        message = NO_MODEL_ON_SERVER if str(exc) == NO_MODEL_REASON else _in_http_terms(_one_line(str(exc)))
        return _answer(request, status, type(exc).__name__, message, getattr(exc, "field", None), headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        if inspector.is_page(request):  # a page's query parameter, e.g. a link without its ?id=
            where = _field(first.get("loc", ()))
            message = _one_line(str(first.get("msg", "invalid request")))
            return inspector.error_page(request, f"{where}: {message}" if where else message, 400)
        if first.get("type") == "json_invalid":  # its location is a character position, not a field
            return _error(400, "InvalidInput", "the body is not valid JSON (" + _one_line(str(first.get("msg", "")))
                          + "): send one JSON object with Content-Type: application/json", "body")
        if tuple(first.get("loc", ())) == ("body",):  # the body as a whole: empty, or not an object
            return _error(400, "InvalidInput", f"the body must be one JSON object, with the fields {request.url.path} "
                          "takes (its schema is in /openapi.json): send the body as JSON with Content-Type: "
                          "application/json", "body")
        where = _field(first.get("loc", ()))
        message = _one_line(str(first.get("msg", "invalid request")))
        if "[" in where.rsplit(".", 1)[-1] and first.get("type") == "literal_error":
            # One member of a union (``extract``: 'background' or false): say every value the field takes.
            where = where.rsplit(".", 1)[0]
            taken = [str(e.get("ctx", {}).get("expected", "")) for e in exc.errors()
                     if _field(e.get("loc", ())).rsplit(".", 1)[0] == where and e.get("type") == "literal_error"]
            json_values = {"False": "false", "True": "true", "None": "null"}
            message = f"Input should be {' or '.join(json_values.get(t, t) for t in taken if t)}"
        if not where and "json" not in request.headers.get("content-type", ""):
            message += "; send the body as JSON with Content-Type: application/json"
        return _error(400, "InvalidInput", f"{where}: {message}" if where else message, where or None)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _answer(request, exc.status_code, "HTTPError", _one_line(str(exc.detail)))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        return _answer(request, 500, "InternalError", "the server failed on this request; its log has the details")

    app.add_middleware(_BodyLimit, max_bytes=settings.max_body_bytes)
    if not settings.tokens and is_loopback(settings.host):
        # A page on another site can resolve its own name to 127.0.0.1 (DNS rebinding) and read an
        # unauthenticated loopback server; the Host header it sends still names that site.
        app.add_middleware(_LoopbackHost)
    return app


class _LoopbackHost:
    """400, as the API's JSON error, for a request whose Host header does not name this machine (Starlette's
    ``TrustedHostMiddleware`` answered in plain text, without saying why)."""

    ALLOWED = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})

    def __init__(self, app: Callable[[_Scope, _Receive, _Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host", "")
        name = host[:host.find("]") + 1] if host.startswith("[") else host.split(":")[0]
        if name.lower() in self.ALLOWED:
            await self.app(scope, receive, send)
            return
        await _error(400, "InvalidInput", f"the Host header {host!r} does not name this machine: a server without "
                     "tokens answers only requests addressed to 127.0.0.1, localhost or [::1] (a page of another site "
                     "could otherwise reach it through DNS rebinding); use one of those, or start it with --token",
                     "Host")(scope, receive, send)


def _answer(request: Request, status: int, error: str, message: str, field: str | None = None,
            headers: dict[str, str] | None = None) -> Response:
    """The JSON error, or the inspector's HTML error page when the request is for one of its pages."""
    if inspector.is_page(request):
        return inspector.error_page(request, message, status)
    return _error(status, error, message, field, headers)


def _error(status: int, error: str, message: str, field: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    body = api.ErrorBody(error=error, message=message, field=field)
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


#: The library's advice as this API gives it (a Python argument or call means nothing to an HTTP client).
_IN_HTTP_TERMS = (
    ("; split the capture or raise max_turns_per_capture", "; split the capture into several requests"),
    (", e.g. Memory(namespace='alice')", " in the path, e.g. /v1/ns/alice/..."),
    ("take one from MemoryBlock.pointers, search() or memories()",
     "take one from the pointers of POST .../context, or from .../search or .../memories"),
    ("mem.sessions() or `tortoise sessions`", "GET .../sessions"),
    ("mem.memories() or `tortoise memories`", "GET .../memories"),
    ("check it and retry, or raise Memory(store_timeout_s=...)", "check it and retry the request"),
    ("(or capture() the whole session)", "(or send the whole session again)"),
)


def _in_http_terms(text: str) -> str:
    return reword(text, _IN_HTTP_TERMS)


def _field(loc: Any) -> str:
    """``turns[3].role`` from pydantic's location, without the ``body``/``query`` part."""
    out = ""
    for part in tuple(loc)[1:] if tuple(loc)[:1] in (("body",), ("query",), ("path",)) else tuple(loc):
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _BodyLimit:
    """413 for a body over ``max_bytes``, by its Content-Length or, when chunked, as it arrives."""

    def __init__(self, app: Callable[[_Scope, _Receive, _Send], Awaitable[None]], max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return
        chunks: list[MutableMapping[str, Any]] = []
        size = 0
        while True:
            message = await receive()
            chunks.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay() -> MutableMapping[str, Any]:
            return chunks.pop(0) if chunks else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        response = _error(413, "PayloadTooLarge", f"the request body is over {self.max_bytes} bytes; send fewer "
                                                  "turns per request, or a long turn's text shorter (the server's "
                                                  "limit is its --max-body)")
        await response(scope, receive, send)
