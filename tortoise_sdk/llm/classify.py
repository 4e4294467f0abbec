"""Model failures sorted once, here: litellm and transport exceptions into a classified ``ModelError``."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tortoise_sdk.errors import ModelError, ModelTimeout

from .lazy import load_litellm

__all__ = ("ERROR_CLASSES", "RETRYABLE_CLASSES", "map_error")

ERROR_CLASSES: tuple[str, ...] = (
    "auth",
    "billing",
    "rate_limit",
    "server",
    "timeout",
    "network",
    "parse",
    "truncation",
    "bad_request",
    "unknown",
)
RETRYABLE_CLASSES: frozenset[str] = frozenset({"rate_limit", "server", "timeout", "network"})

_HINTS = {
    "auth": "check the API key: pass api_key= or set the provider's variable (e.g. OPENAI_API_KEY)",
    "billing": "the provider refused for quota or billing; check the account's credit",
    "rate_limit": "still rate limited after retries; lower concurrency or try again later",
    "server": "the provider kept failing; try again later",
    "timeout": "no answer within timeout_s; raise it or check the endpoint",
    "network": "could not reach the model; check api_base and the connection",
    "bad_request": "the provider rejected the request; check the model name and parameters",
    "unknown": "see the chained exception",
}
_LITELLM_PREFIX = re.compile(r"^(?:litellm\.\w+: )?(?:\w+: )?(?:\w+(?:Exception|Error) - )?")
_BILLING_WORDS = ("insufficient_quota", "exceeded your current quota", "billing", "credit balance", "payment required")

_TIMEOUT_NAMES = frozenset({"APITimeoutError", "TimeoutException", "TimeoutError", "ServerTimeoutError"})
_NETWORK_NAMES = frozenset(
    {
        "APIConnectionError",
        "ConnectError",
        "TransportError",
        "ClientConnectionError",
        "ConnectionError",
        "RemoteProtocolError",
    }
)

def map_error(exc: BaseException, *, model: str | None = None) -> ModelError:
    """Turn a litellm (or transport) exception into a classified :class:`ModelError`."""
    if isinstance(exc, ModelError):
        return exc
    error_class, status = _classify(exc)
    detail = _detail(exc)
    message = f"{model or 'model'} call failed ({error_class}"
    message += f", HTTP {status})" if status else ")"
    message += f": {detail}. {_HINTS.get(error_class, '')}".rstrip()
    kind = ModelTimeout if error_class == "timeout" else ModelError
    return kind(message, model=model, status_code=status, error_class=error_class, body=_body(exc))


def _classify(exc: BaseException) -> tuple[str, int | None]:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout", None
    litellm = load_litellm()
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    if isinstance(exc, litellm.Timeout):
        return "timeout", None
    if isinstance(exc, litellm.APIConnectionError):
        return "network", None
    transport = _transport_failure(exc)
    if transport is not None:
        return transport, None
    text = str(exc).lower()
    if status in (None, 400, 402, 403, 429) and any(w in text for w in _BILLING_WORDS):
        return "billing", status
    if status == 402:
        return "billing", status
    if status in (401, 403) or isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)):
        return "auth", status
    if status == 429 or isinstance(exc, litellm.RateLimitError):
        return "rate_limit", status
    if status == 408:
        return "timeout", status
    if status is not None and status >= 500:
        return "server", status
    if status is not None and 400 <= status < 500:
        return "bad_request", status
    if isinstance(exc, (litellm.BadRequestError, litellm.NotFoundError)):
        return "bad_request", status
    if isinstance(exc, (litellm.InternalServerError, litellm.ServiceUnavailableError)):
        return "server", status
    if isinstance(exc, (ConnectionError, OSError)):
        return "network", None
    return "unknown", status


def _transport_failure(exc: BaseException) -> str | None:
    """``timeout`` or ``network`` when the request got no HTTP answer at all.

    litellm reports a refused connection as ``InternalServerError`` (500), so
    the chained causes tell; names are compared so httpx, httpx2 and aiohttp
    need not be imported.
    """
    seen: set[int] = {id(exc)}
    # litellm's own classes subclass openai's status errors, so only the causes count.
    cause: BaseException | None = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen and len(seen) < 12:
        seen.add(id(cause))
        names = {klass.__name__ for klass in type(cause).__mro__}
        if "APIStatusError" in names:
            return None  # the provider answered with a status
        if names & _TIMEOUT_NAMES:
            return "timeout"
        if names & _NETWORK_NAMES:
            return "network"
        cause = cause.__cause__ or cause.__context__
    return None


def _detail(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc).strip()
    if not text:
        return type(exc).__name__
    text = _LITELLM_PREFIX.sub("", text.splitlines()[0])
    return text.rstrip(". ")[:300]


def _body(exc: BaseException) -> Any:
    body = getattr(exc, "body", None)
    if body is not None:
        return body
    response = getattr(exc, "response", None)
    try:
        return response.text if response is not None else None
    except Exception:  # a streamed or closed response has no text
        return None
