"""Model failures sorted once, here: litellm and transport exceptions into a classified ``ModelError``.

Classes, and what the client does with each:

- ``auth`` (401/403, a missing or rejected key), ``billing`` (402, quota),
  ``model_not_found`` (404): fatal, never retried;
- ``unreachable`` (connection refused, DNS, TLS: no connection at all): retried
  once, quickly, then fatal;
- ``timeout`` (no answer within the request timeout): retried once, then fatal
  (a hanging provider would otherwise cost every attempt of every stage its full wait);
- ``rate_limit`` (429), ``server`` (5xx), ``network`` (a connection
  dropped mid-request): retried with backoff;
- ``bad_request``, ``parse``, ``truncation``, ``unknown``: not retried, not fatal.

A fatal class (:data:`FATAL_CLASSES`) stops an extraction run: every later
stage would call the same provider with the same key and model.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tortoise_sdk.errors import ModelError, ModelTimeout

from .lazy import load_litellm

__all__ = ("ERROR_CLASSES", "FATAL_CLASSES", "RETRYABLE_CLASSES", "key_variables", "map_error")

ERROR_CLASSES: tuple[str, ...] = (
    "auth",
    "billing",
    "model_not_found",
    "unreachable",
    "rate_limit",
    "server",
    "timeout",
    "network",
    "parse",
    "truncation",
    "bad_request",
    "unknown",
)
#: Retried with backoff (``unreachable``: once, quickly; ``timeout``: once).
RETRYABLE_CLASSES: frozenset[str] = frozenset({"rate_limit", "server", "timeout", "network", "unreachable"})
#: Stop the extraction run (no later stage is called) and open the Memory's circuit breaker.
FATAL_CLASSES: frozenset[str] = frozenset({"auth", "billing", "model_not_found", "unreachable", "timeout"})

_HINTS = {
    "billing": "the provider refused for quota or billing; add credit or raise the limit, then extract again",
    "rate_limit": "still rate limited after retries; lower concurrency or try again later",
    "server": "the provider kept failing; try again later",
    "timeout": ("no answer within the request timeout: check the endpoint, or raise the timeout "
                "(Memory(request_timeout_s=...), CLI --timeout)"),
    "network": "the connection dropped during the request; check the network and try again",
    "bad_request": "the provider rejected the request; check the model name and parameters",
    "unknown": "see the chained exception",
}
_LITELLM_PREFIX = re.compile(r"^(?:litellm\.\w+: )?(?:\w+: )?(?:\w+(?:Exception|Error) - )?")
_BILLING_WORDS = ("insufficient_quota", "exceeded your current quota", "billing", "credit balance", "payment required")
# litellm reports a key the client never had (openai's "Missing credentials") as a 500.
_AUTH_WORDS = (
    "missing credentials",
    "api_key client option must be set",
    "no api key provided",
    "incorrect api key",
    "invalid api key",
    "invalid_api_key",
    "api key not valid",
)
# The client had no key to send (these never come from a server that checked one).
_MISSING_KEY_WORDS = ("missing credentials", "api_key client option must be set", "no api key provided")
_NOT_FOUND_WORDS = ("model_not_found", "does not exist", "no such model", "unknown model", "model not found")
# litellm cannot tell the provider from the model name (``llama3`` instead of ``openai/llama3``): raised
# before any request, and every later call would be refused the same way.
_NO_PROVIDER_WORDS = ("llm provider not provided",)

_UNREACHABLE_NAMES = frozenset(
    {
        "ConnectError",
        "ConnectTimeout",
        "ConnectionRefusedError",
        "gaierror",
        "SSLError",
        "SSLCertVerificationError",
        "ClientConnectorError",
        "ClientConnectorDNSError",
        "ClientConnectorCertificateError",
        "ClientSSLError",
        # An api_base that is not an http(s) URL: nothing can connect there (httpx; aiohttp).
        "UnsupportedProtocol",
        "InvalidURL",
        "InvalidUrlClientError",
        "NonHttpUrlClientError",
    }
)
_TIMEOUT_NAMES = frozenset({"APITimeoutError", "TimeoutException", "TimeoutError", "ServerTimeoutError"})
_NETWORK_NAMES = frozenset(
    {
        "APIConnectionError",
        "TransportError",
        "ClientConnectionError",
        "ConnectionError",
        "RemoteProtocolError",
        "ReadError",
        "WriteError",
        "ServerDisconnectedError",
    }
)


def map_error(exc: BaseException, *, model: str | None = None, api_base: str | None = None,
              embedding: bool = False) -> ModelError:
    """Turn a litellm (or transport) exception into a classified :class:`ModelError` whose message says what to do.

    ``embedding``: the call was an embedding, whose key is ``embed_api_key=`` / ``$TORTOISE_EMBED_API_KEY``."""
    if isinstance(exc, ModelError):
        return exc
    error_class, status = _classify(exc)
    detail = _detail(exc)
    if error_class == "unreachable":
        root = _root_cause(exc)
        if root and root not in detail:
            detail = f"{detail.rstrip('. ')} ({root})"
    message = f"{model or 'model'} call failed ({error_class}"
    message += f", HTTP {status})" if status else ")"
    hint = _hint(error_class, model, api_base, key_sent=_key_sent(exc, status), embedding=embedding)
    message += f": {detail}. {hint}".rstrip()
    kind = ModelTimeout if error_class == "timeout" else ModelError
    return kind(message, model=model, status_code=status, error_class=error_class, body=_body(exc))


def key_variables(model: str | None) -> list[str]:
    """The environment variables litellm reads the key of ``model``'s provider from (may be empty)."""
    if not model:
        return []
    litellm = load_litellm()
    try:
        missing = [str(v) for v in litellm.validate_environment(model).get("missing_keys") or []]
        if missing:
            return [v for v in missing if v.endswith("_KEY")] or missing
        provider = litellm.get_llm_provider(model)[1]
    except Exception:  # noqa: BLE001 - an unknown provider has no known variable
        return []
    return [f"{provider.upper()}_API_KEY"] if provider else []


def _key_sent(exc: BaseException, status: int | None) -> bool:
    """Whether the server answered a key it was sent (401/403), not the client finding none to send."""
    text = str(exc).lower()
    return status is not None and not any(w in text for w in _MISSING_KEY_WORDS)


def _hint(error_class: str, model: str | None, api_base: str | None, *, key_sent: bool = False,
          embedding: bool = False) -> str:
    if error_class == "auth":
        names = key_variables(model)
        # An embedder's key is its own: the CLI has no --api-key for it and never reads $TORTOISE_API_KEY.
        given, dummy = (("embed_api_key= (or $TORTOISE_EMBED_API_KEY)", "TORTOISE_EMBED_API_KEY=x") if embedding
                        else ("api_key= (CLI: --api-key or TORTOISE_API_KEY)", "--api-key x"))
        if key_sent:  # a dummy key for a keyless local server would not help: this server checks keys
            where = f"{' or '.join(names)} if no key is passed" if names else "the provider's key variable"
            return (f"the server refused the key it was sent: check the key given by {given}, else {where}, "
                    f"and that it may use this model")
        where = f"set {' or '.join(names)}" if names else "set the provider's key variable"
        local = f" (a local server that takes any key still needs one: {dummy})" if api_base else ""
        return f"the key is missing or was refused: {where}, or pass {given}{local}"
    if error_class == "unreachable":
        where = f"api_base {api_base}" if api_base else "the provider's default endpoint"
        return f"nothing answered at {where}: check that the server runs there, the URL, DNS and TLS"
    if error_class == "model_not_found":
        path = f", or api_base {api_base} is not the API's root (often it ends in /v1)" if api_base else ""
        return (f"the provider has no model {model!r} (or this key cannot use it): check the name "
                f"(litellm form provider/model, e.g. openai/gpt-4o-mini) and the account{path}")
    return _HINTS.get(error_class, "")


#: How litellm words a reply the provider sent as 200 OK that it could not read ("Received response -
#: <APIResponse [200 OK] ...>"), which it reports as an InternalServerError of status 500.
_UNREAD_200 = "<apiresponse [200 ok]"


def _classify(exc: BaseException) -> tuple[str, int | None]:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout", None
    litellm = load_litellm()
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    text = str(exc).lower()
    if any(w in text for w in _AUTH_WORDS) and status in (None, 400, 401, 403, 500):
        return "auth", status if status in (400, 401, 403) else None  # a missing key never left the client
    if isinstance(exc, litellm.Timeout):
        return "timeout", None
    transport = _transport_failure(exc)
    if transport is not None:
        return transport, None
    if isinstance(exc, litellm.APIConnectionError):
        return "unreachable", None
    if status in (None, 400, 402, 403, 429) and any(w in text for w in _BILLING_WORDS):
        return "billing", status
    if status == 402:
        return "billing", status
    if status in (401, 403) or isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)):
        return "auth", status
    if status == 404 or isinstance(exc, litellm.NotFoundError):
        return "model_not_found", status
    if status in (None, 400) and any(w in text for w in _NO_PROVIDER_WORDS):
        return "model_not_found", None  # never sent
    if status == 400 and any(w in text for w in _NOT_FOUND_WORDS) and "model" in text:
        return "model_not_found", status
    if status == 429 or isinstance(exc, litellm.RateLimitError):
        return "rate_limit", status
    if status == 408:
        return "timeout", status
    if _UNREAD_200 in text:
        return "network", None  # a 200 whose body could not be read (cut or garbled on the way): litellm says 500
    if status is not None and status >= 500:
        return "server", status
    if status is not None and 400 <= status < 500:
        return "bad_request", status
    if isinstance(exc, litellm.BadRequestError):
        return "bad_request", status
    if isinstance(exc, (litellm.InternalServerError, litellm.ServiceUnavailableError)):
        return "server", status
    if isinstance(exc, ConnectionRefusedError):
        return "unreachable", None
    if isinstance(exc, (ConnectionError, OSError)):
        return "network", None
    return "unknown", status


def _transport_failure(exc: BaseException) -> str | None:
    """``unreachable``, ``timeout`` or ``network`` when the request got no HTTP answer at all.

    litellm reports a refused connection as ``InternalServerError`` (500), so
    the chained causes tell; the most specific one wins (a refused connection is
    wrapped in the SDK's generic connection error). Names are compared so httpx,
    httpx2 and aiohttp need not be imported.
    """
    seen: set[int] = {id(exc)}
    found: set[str] = set()
    # litellm's own classes subclass openai's status errors, so only the causes count.
    cause: BaseException | None = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen and len(seen) < 12:
        seen.add(id(cause))
        names = {klass.__name__ for klass in type(cause).__mro__}
        if "APIStatusError" in names:
            return None  # the provider answered with a status
        if names & _UNREACHABLE_NAMES:
            found.add("unreachable")
        elif names & _TIMEOUT_NAMES:
            found.add("timeout")
        elif names & _NETWORK_NAMES:
            found.add("network")
        cause = cause.__cause__ or cause.__context__
    return next((c for c in ("unreachable", "timeout", "network") if c in found), None)


def _root_cause(exc: BaseException) -> str | None:
    """The innermost chained cause's text, e.g. ``[Errno 111] Connection refused``."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    last = None
    while cause is not None and id(cause) not in seen and len(seen) < 12:
        seen.add(id(cause))
        last = cause
        cause = cause.__cause__ or cause.__context__
    text = str(last).strip() if last is not None and last is not exc else ""
    return text.splitlines()[0][:200] if text else None


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
