"""``tortoise serve``: the ``Memory`` API over HTTP JSON, and a memory inspector at ``/``.

Needs the ``server`` extra (``pip install 'tortoise-sdk[server]'``: FastAPI and uvicorn). Run it
with ``tortoise serve``; from Python::

    import uvicorn
    from tortoise_sdk.adapters.serve import ServeSettings, build_app

    uvicorn.run(build_app(ServeSettings(db="memory.db", namespaces=["alice"])), host="127.0.0.1", port=8765)

Routes: ``/v1/ns/{namespace}/...`` (one per ``Memory`` method, see ``api``), ``/health``, the
schema at ``/openapi.json`` and its pages at ``/docs``, the inspector at ``/``. One ``Memory`` per
namespace, on one store, serves every request. Security: ``auth``.
"""

from __future__ import annotations

from ...errors import install_hint

try:
    import fastapi  # noqa: F401
    import jinja2  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("tortoise serve needs FastAPI and uvicorn: " + install_hint("server")) from exc

from .app import build_app, error_status
from .auth import ServeSettings, TokenGrant, check_bind, is_loopback, parse_tokens

__all__ = ("ServeSettings", "TokenGrant", "build_app", "check_bind", "error_status", "is_loopback", "parse_tokens")
