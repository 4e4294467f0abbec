"""Who may reach which namespace, and the one ``Memory`` per namespace the requests share.

A token is ``SECRET`` (every namespace) or ``SECRET:namespace`` (that namespace only). With no
token configured, nothing is asked, which ``check_bind`` allows on a loopback address only.
Clients send ``Authorization: Bearer SECRET``; the inspector's pages may carry it in a cookie
instead (set by its login form), which the JSON routes accept only with the inspector's own
header, so another site cannot make a browser call them.
"""

from __future__ import annotations

import hmac
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request

from ...errors import ConfigError, InvalidInput, TortoiseError
from .._common import is_loopback

__all__ = ("COOKIE", "INSPECTOR_HEADER", "Denied", "MemoryPool", "ServeSettings", "TokenGrant", "authorize",
           "check_bind", "check_path", "is_loopback", "namespace_memory", "parse_tokens")

#: The cookie the inspector's login form sets, and the header its script sends with every JSON call.
COOKIE = "tortoise_token"
INSPECTOR_HEADER = "x-tortoise-inspector"


class Denied(TortoiseError):
    """A request without a valid token (401) or with a token bound to another namespace (403)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class TokenGrant:
    """A token and the namespace it is bound to (None: all)."""

    secret: str
    namespace: str | None = None


def parse_tokens(specs: Iterable[str]) -> list[TokenGrant]:
    """``SECRET`` or ``SECRET:namespace`` each (from ``--token`` or comma-separated ``TORTOISE_SERVE_TOKENS``).

    Raises:
        ConfigError: an empty secret, one shorter than 16 characters, or an empty namespace.
    """
    grants = []
    for spec in specs:
        secret, sep, namespace = spec.strip().partition(":")
        if len(secret) < 16:
            raise ConfigError("a serve token must be at least 16 characters (e.g. from `python -c \"import secrets;"
                              "print(secrets.token_urlsafe())\"`), optionally followed by :namespace", field="token")
        if sep and not namespace:
            raise ConfigError(f"token {secret[:4]}…: name the namespace after the colon, or drop the colon",
                              field="token")
        grants.append(TokenGrant(secret, namespace or None))
    return grants


def check_bind(host: str, grants: list[TokenGrant], claude_code_hooks: bool = False) -> None:
    """Refuse a bind address other clients can reach while no token is configured, or with the Claude Code hooks on.

    Raises:
        ConfigError: ``host`` is not loopback and ``grants`` is empty or ``claude_code_hooks`` is on.
    """
    if not grants and not is_loopback(host):
        raise ConfigError(f"--host {host} is reachable from other machines: pass --token SECRET[:namespace] (or set "
                          "TORTOISE_SERVE_TOKENS) so clients must authenticate, or bind --host 127.0.0.1", field="host")
    if claude_code_hooks and not is_loopback(host):
        raise ConfigError(f"--claude-code-hooks reads the transcript files of this machine's Claude Code: bind --host "
                          f"127.0.0.1, not {host} (another machine's transcripts are not on this one)", field="host")


@dataclass
class ServeSettings:
    """What ``build_app`` serves.

    Attributes:
        db: the database (``Memory``'s ``db``).
        namespaces: the namespaces the inspector lists (others are reachable by name; a token's own is added).
        tokens: the grants; empty: no authentication (loopback only).
        max_body_bytes: the largest request body accepted (413 past it).
        memory_options: more ``Memory`` arguments (``model``, ``api_base`` ...), the same for every namespace.
        host: the bind address, for the ``Host`` header check on loopback.
        claude_code_hooks: take Claude Code's HTTP hooks (``hooks``): the server then reads the transcript
            files the events name (loopback only).
        transcripts: the folder those files must be in (default: Claude Code's projects folder,
            ``$CLAUDE_CONFIG_DIR/projects`` or ``~/.claude/projects``).
    """

    db: str | None = None
    namespaces: list[str] = field(default_factory=lambda: ["default"])
    tokens: list[TokenGrant] = field(default_factory=list)
    max_body_bytes: int = 4 * 1024 * 1024
    memory_options: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    claude_code_hooks: bool = False
    transcripts: str | None = None

    def transcripts_folder(self) -> Path:
        """The folder the Claude Code hooks' transcripts must be in (``transcripts``, or Claude Code's own)."""
        if self.transcripts:
            return Path(self.transcripts).expanduser()
        config = os.environ.get("CLAUDE_CONFIG_DIR")
        return (Path(config).expanduser() if config else Path.home() / ".claude") / "projects"


class MemoryPool:
    """One ``Memory`` per namespace, all on one store opened once, shared by all requests (the store is thread-safe)."""

    def __init__(self, settings: ServeSettings, factory: Callable[..., Any]) -> None:
        self._settings = settings
        self._factory = factory
        self._lock = threading.Lock()
        self._open: dict[str, Any] = {}

    def get(self, namespace: str) -> Any:
        """The namespace's ``Memory``, opened on first use."""
        mem = self._open.get(namespace)
        if mem is not None:
            return mem
        with self._lock:
            if namespace not in self._open:
                first = next(iter(self._open.values()), None)
                where = {"store": first.store} if first is not None else {"db": self._settings.db}
                self._open[namespace] = self._factory(namespace=namespace, **where, **self._settings.memory_options)
            return self._open[namespace]

    def opened(self) -> list[str]:
        """The namespaces opened since start (by any request, whether they hold data or not)."""
        return list(self._open)

    def stored(self) -> list[str]:
        """The namespaces of the store that hold data (``Memory.namespaces``); empty when the store cannot list them."""
        first = next(iter(self._open.values()), None)
        mem = first if first is not None else self.get(next(iter(self._settings.namespaces), "default"))
        try:
            return [info.name for info in mem.namespaces()]
        except (AttributeError, NotImplementedError):  # a factory's Memory, or a store without the listing
            return []

    def close(self) -> None:
        """Close the shared store."""
        with self._lock:
            first = next(iter(self._open.values()), None)
            self._open.clear()
        if first is not None:
            first.close()


def authorize(request: Request, namespace: str | None) -> TokenGrant | None:
    """The grant the request carries, checked against ``namespace``; None when the server asks for none.

    Raises:
        Denied: no token, an unknown one, or one bound to another namespace.
    """
    grants: list[TokenGrant] = request.app.state.settings.tokens
    if not grants:
        return None
    secret = _presented(request)
    if secret is None and request.headers.get("authorization", "").strip().lower() == "bearer":
        raise Denied("the Authorization header holds 'Bearer' and no token: a Claude Code HTTP hook sends it so when "
                     "the variable its allowedEnvVars names (hooks install --token-env) is not set in Claude Code's "
                     "environment", status=401)
    if secret is None:
        raise Denied("this server needs a token: send the header 'Authorization: Bearer SECRET'", status=401)
    grant = next((g for g in grants if hmac.compare_digest(g.secret.encode(), secret.encode())), None)
    if grant is None:
        raise Denied("unknown token: check the SECRET given to `tortoise serve --token`", status=401)
    if namespace is not None and grant.namespace is not None and grant.namespace != namespace:
        raise Denied(f"this token is bound to namespace {grant.namespace!r}, not {namespace!r}", status=403)
    return grant


def _presented(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    cookie = request.cookies.get(COOKIE)
    # The cookie is the inspector's: its pages (GET) and its script's calls, which send the header
    # a cross-site form cannot.
    if cookie and (request.method == "GET" and not request.url.path.startswith("/v1/")
                   or request.headers.get(INSPECTOR_HEADER) == "1"):
        return cookie
    return None


def check_path(request: Request) -> None:
    """Refuse a path holding a line break: a route's pattern ends before a final one, so ``/ns/a%0A`` read as
    namespace ``a`` (another namespace's data), and one inside matches no route.

    Raises:
        InvalidInput: the path holds a line break.
    """
    if "\n" in request.scope["path"] or "\r" in request.scope["path"]:
        raise InvalidInput("the path holds a line break: a namespace with one cannot be reached over HTTP; "
                           "use the Python API or the command line for it", field="namespace")


def namespace_memory(namespace: str, request: Request) -> Any:
    """FastAPI dependency: the ``Memory`` of the path's namespace, once the request may reach it."""
    check_path(request)
    authorize(request, namespace)
    return request.app.state.pool.get(namespace)
