"""The model layer: every model call of the SDK goes through :class:`LLMClient`.

It is the only module that imports litellm (lazily, on the first call, so
importing the SDK stays cheap and offline) and the only one that retries
model calls. Each call:

- carries ``X-Tortoise-Stage: <stage>`` and, for chunked stages,
  ``X-Tortoise-Chunk: <n>`` on the wire;
- has a per-attempt deadline and is retried with jittered exponential
  backoff (honouring ``Retry-After`` up to the backoff cap) on 429, 5xx,
  timeouts and connection errors; 400/401/402/403/404 fail at once;
- when the reply is cut by the output cap (``finish_reason == "length"``) is
  asked once more with a larger cap, then accepted and marked ``partial``;
- maps litellm's exceptions once, here, into :class:`~tortoise_sdk.errors.ModelError`
  (``ModelTimeout``, ``MalformedOutput``) with an ``error_class``;
- adds its calls, retries, tokens, cost, time and errors to per-stage
  :class:`~tortoise_sdk.models.StageStats`.

Usage::

    client = LLMClient(LLMConfig.resolve(model="openai/gpt-4o-mini"))
    result = client.complete("s1", [{"role": "user", "content": "..."}], chunk=0)
    data = client.complete_json("s2", messages, expect="object").parsed.value
    client.stats["s1"].calls
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import tenacity
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tortoise_sdk.config import ensure_litellm_env, env_model
from tortoise_sdk.errors import ConfigError, MalformedOutput, ModelError, ModelTimeout
from tortoise_sdk.jsonparse import Expect, ParsedJSON, parse_json
from tortoise_sdk.models import StageStats

__all__ = (
    "CHUNK_HEADER",
    "DEFAULT_BACKOFF_BASE_S",
    "DEFAULT_BACKOFF_MAX_S",
    "DEFAULT_LENGTH_RETRY_FACTOR",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TIMEOUT_S",
    "ERROR_CLASSES",
    "RETRYABLE_CLASSES",
    "STAGES",
    "STAGE_HEADER",
    "LLMClient",
    "LLMConfig",
    "LLMResult",
    "Message",
    "map_error",
)

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_MAX_TOKENS = 4096
DEFAULT_BACKOFF_BASE_S = 1.0
DEFAULT_BACKOFF_MAX_S = 30.0
DEFAULT_LENGTH_RETRY_FACTOR = 2.0

STAGE_HEADER = "X-Tortoise-Stage"
CHUNK_HEADER = "X-Tortoise-Chunk"
STAGES: tuple[str, ...] = ("s1", "s2", "vet", "s4", "resolve")
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

Message = Mapping[str, Any]

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

_litellm_module: ModuleType | None = None
_litellm_lock = threading.Lock()


def _litellm() -> ModuleType:
    """Import litellm on first use, after pinning its offline cost map."""
    global _litellm_module
    if _litellm_module is None:
        with _litellm_lock:
            if _litellm_module is None:
                ensure_litellm_env()
                import litellm

                # Its "Give Feedback / Get Help" banners go to stdout on every error.
                litellm.suppress_debug_info = True
                _litellm_module = litellm
    return _litellm_module


class LLMConfig(BaseModel):
    """Which model to call and how patiently.

    Attributes:
        model: a litellm model name, e.g. ``openai/gpt-4o-mini``; any
            OpenAI-compatible server works as ``openai/<name>`` with ``api_base``.
        api_base: the endpoint, when not the provider's default.
        api_key: the key, when not in the provider's environment variable.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1, description="litellm model name, e.g. 'openai/gpt-4o-mini'.")
    api_base: str | None = Field(default=None, description="Endpoint URL, e.g. 'http://127.0.0.1:8765/v1'.")
    api_key: str | None = Field(
        default=None, repr=False, description="Provider key; None reads the provider's env var."
    )
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, description="Deadline of one attempt, in seconds.")
    max_attempts: int = Field(
        default=DEFAULT_MAX_ATTEMPTS, ge=1, description="Attempts per request, the first included."
    )
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=1, description="Output cap of a first attempt.")
    backoff_base_s: float = Field(
        default=DEFAULT_BACKOFF_BASE_S, ge=0, description="Backoff before the 2nd attempt; doubles after."
    )
    backoff_max_s: float = Field(
        default=DEFAULT_BACKOFF_MAX_S, ge=0, description="Longest wait between attempts, Retry-After included."
    )
    length_retry_factor: float = Field(
        default=DEFAULT_LENGTH_RETRY_FACTOR,
        ge=1,
        description="Output cap multiplier for the retry of a reply cut by the cap.",
    )
    temperature: float | None = Field(
        default=None, description="Sampling temperature; None leaves the provider default."
    )

    @classmethod
    def resolve(
        cls,
        model: str | None = None,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        **settings: Any,
    ) -> LLMConfig:
        """Build a config from explicit arguments, falling back to ``$TORTOISE_MODEL``.

        Raises:
            ConfigError: no model was given or a setting is invalid.
        """
        name = model or env_model()
        if not name:
            raise ConfigError(
                "no model configured: pass model='openai/gpt-4o-mini' (any litellm model name) or set TORTOISE_MODEL"
            )
        try:
            return cls(model=name, api_base=api_base, api_key=api_key, **settings)
        except ValidationError as exc:
            raise ConfigError(f"invalid model settings: {exc}") from exc


class LLMResult(BaseModel):
    """One completed model call."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(description="The reply text ('' when the model sent none).")
    finish_reason: str | None = Field(description="As reported: stop, length, content_filter, ...")
    partial: bool = Field(
        default=False, description="The reply was still cut by the output cap after the larger-cap retry."
    )
    attempts: int = Field(description="HTTP attempts made for this call, retries included.")
    prompt_tokens: int | None = Field(default=None, description="Summed over attempts; None when never reported.")
    completion_tokens: int | None = Field(default=None, description="Summed over attempts; None when never reported.")
    cost_usd: float | None = Field(
        default=None, description="From litellm; None when it does not know the model's price."
    )
    stage: str
    chunk: int | None = None
    model: str | None = Field(default=None, description="The model name the provider reported.")
    wall_ms: float = 0.0
    parsed: ParsedJSON | None = Field(default=None, description="Set by complete_json: the parsed reply.")


@dataclass
class _Tally:
    """What one logical call cost, across its attempts."""

    attempts: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    errors: Counter[str] = field(default_factory=Counter)

    def add_usage(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None)
        completion = getattr(usage, "completion_tokens", None)
        # litellm fills a missing usage block with zeros; no real call uses 0 + 0.
        if prompt or completion:
            self.prompt_tokens = (self.prompt_tokens or 0) + int(prompt or 0)
            self.completion_tokens = (self.completion_tokens or 0) + int(completion or 0)
        cost = _cost(response)
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost


class _StatsBook:
    """Per-stage StageStats behind a lock; updates never await, so one lock serves threads and tasks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stages: dict[str, StageStats] = {}

    def add(self, stage: str, tally: _Tally, wall_ms: float, *, call: bool = True) -> None:
        with self._lock:
            s = self._stages.setdefault(stage, StageStats())
            if call:
                s.calls += 1
                s.retries += max(0, tally.attempts - 1)
                s.wall_ms += wall_ms
            if tally.prompt_tokens is not None:
                s.prompt_tokens = (s.prompt_tokens or 0) + tally.prompt_tokens
            if tally.completion_tokens is not None:
                s.completion_tokens = (s.completion_tokens or 0) + tally.completion_tokens
            if tally.cost_usd is not None:
                s.cost_usd = (s.cost_usd or 0.0) + tally.cost_usd
            for name, count in tally.errors.items():
                s.errors[name] = s.errors.get(name, 0) + count

    def snapshot(self) -> dict[str, StageStats]:
        with self._lock:
            return {k: v.model_copy(deep=True) for k, v in self._stages.items()}

    def reset(self) -> dict[str, StageStats]:
        with self._lock:
            taken, self._stages = self._stages, {}
            return taken


class LLMClient:
    """Calls the configured model for the pipeline stages, with retries and per-stage stats.

    Safe to share between threads and between tasks of one event loop.

    Usage::

        client = LLMClient(LLMConfig(model="openai/stub-model", api_base=stub.base_url, api_key="sk-test"))
        result = await client.acomplete("s1", messages, chunk=3)

    Parameters:
        config: the model and its patience settings.
    """

    def __init__(self, config: LLMConfig) -> None:
        self._config = config
        self._book = _StatsBook()

    @property
    def config(self) -> LLMConfig:
        """The settings this client calls with."""
        return self._config

    @property
    def stats(self) -> dict[str, StageStats]:
        """A snapshot of the per-stage stats so far (a copy; later calls do not change it)."""
        return self._book.snapshot()

    def reset_stats(self) -> dict[str, StageStats]:
        """Start counting afresh; returns the stats up to now."""
        return self._book.reset()

    def complete(
        self,
        stage: str,
        messages: Sequence[Message],
        *,
        chunk: int | None = None,
        max_tokens: int | None = None,
        json_mode: bool = False,
    ) -> LLMResult:
        """Call the model once (retrying transient failures) and return its reply.

        Args:
            stage: the pipeline stage, sent as ``X-Tortoise-Stage``: s1, s2, vet, s4, resolve.
            messages: OpenAI-style chat messages.
            chunk: the chunk number of a chunked stage, sent as ``X-Tortoise-Chunk``.
            max_tokens: output cap of the first attempt; defaults to the config's.
            json_mode: ask for a JSON object (``response_format={"type": "json_object"}``).

        Raises:
            ModelError: the call failed for good (``ModelTimeout`` on timeouts).
        """
        with _Call(self, stage, chunk, messages, max_tokens, json_mode) as call:
            for request in call:
                with call.sending():
                    call.reply = self._retrying_sync(call.tally, request)
            return call.result()

    async def acomplete(
        self,
        stage: str,
        messages: Sequence[Message],
        *,
        chunk: int | None = None,
        max_tokens: int | None = None,
        json_mode: bool = False,
    ) -> LLMResult:
        """The async twin of :meth:`complete`; the deadline covers the whole attempt."""
        with _Call(self, stage, chunk, messages, max_tokens, json_mode) as call:
            for request in call:
                with call.sending():
                    call.reply = await self._retrying_async(call.tally, request)
            return call.result()

    def complete_json(
        self,
        stage: str,
        messages: Sequence[Message],
        *,
        expect: Expect = "object",
        chunk: int | None = None,
        max_tokens: int | None = None,
        json_mode: bool = True,
    ) -> LLMResult:
        """:meth:`complete`, then :func:`~tortoise_sdk.jsonparse.parse_json` into ``result.parsed``.

        JSON mode needs the word "JSON" in the prompt on some providers, and
        always returns an object: ask for ``{"items": [...]}`` and pass
        ``expect="list"`` to get the list back.

        Raises:
            ModelError: the call failed for good.
            MalformedOutput: the reply is not JSON (``parse``) or was cut
                before anything complete (``truncation``); counted in the stats.
        """
        result = self.complete(stage, messages, chunk=chunk, max_tokens=max_tokens, json_mode=json_mode)
        return self._parse(result, expect)

    async def acomplete_json(
        self,
        stage: str,
        messages: Sequence[Message],
        *,
        expect: Expect = "object",
        chunk: int | None = None,
        max_tokens: int | None = None,
        json_mode: bool = True,
    ) -> LLMResult:
        """The async twin of :meth:`complete_json`."""
        result = await self.acomplete(stage, messages, chunk=chunk, max_tokens=max_tokens, json_mode=json_mode)
        return self._parse(result, expect)

    # -- private layers -------------------------------------------------

    def _parse(self, result: LLMResult, expect: Expect) -> LLMResult:
        try:
            parsed = parse_json(result.text, expect)
        except MalformedOutput as exc:
            exc.model = self._config.model
            if result.partial and exc.error_class == "parse":
                exc.error_class = "truncation"
            self._book.add(result.stage, _Tally(errors=Counter({exc.error_class: 1})), 0.0, call=False)
            raise
        return result.model_copy(update={"parsed": parsed})

    def _larger(self, cap: int) -> int:
        return max(cap + 1, int(cap * self._config.length_retry_factor))

    def _request(
        self, stage: str, chunk: int | None, messages: Sequence[Message], max_tokens: int, json_mode: bool
    ) -> dict[str, Any]:
        if not stage:
            raise ConfigError("stage must name the pipeline stage, e.g. 's1'")
        headers = {STAGE_HEADER: stage}
        if chunk is not None:
            headers[CHUNK_HEADER] = str(chunk)
        cfg = self._config
        request: dict[str, Any] = {
            "model": cfg.model,
            "messages": [dict(m) for m in messages],
            "max_tokens": max_tokens,
            "timeout": cfg.timeout_s,
            # Retries are ours (counted, classified); the OpenAI SDK's own would hide them.
            "max_retries": 0,
            "extra_headers": headers,
        }
        if cfg.api_base:
            request["api_base"] = cfg.api_base
        if cfg.api_key:
            request["api_key"] = cfg.api_key
        if cfg.temperature is not None:
            request["temperature"] = cfg.temperature
        if json_mode:
            request["response_format"] = {"type": "json_object"}
        return request

    def _retrying_sync(self, tally: _Tally, request: dict[str, Any]) -> Any:
        def attempt() -> Any:
            with self._attempt(tally):
                response = _litellm().completion(**request)
            tally.add_usage(response)
            return response

        return tenacity.Retrying(**self._retry_policy())(attempt)

    async def _retrying_async(self, tally: _Tally, request: dict[str, Any]) -> Any:
        async def attempt() -> Any:
            with self._attempt(tally):
                response = await asyncio.wait_for(_litellm().acompletion(**request), self._config.timeout_s)
            tally.add_usage(response)
            return response

        return await tenacity.AsyncRetrying(**self._retry_policy())(attempt)

    @contextmanager
    def _attempt(self, tally: _Tally) -> Iterator[None]:
        """Counts one HTTP attempt and maps its failure to a classified ModelError."""
        tally.attempts += 1
        try:
            yield
        except Exception as exc:
            raise self._failed(tally, exc) from exc

    def _retry_policy(self) -> dict[str, Any]:
        return {
            "stop": tenacity.stop_after_attempt(self._config.max_attempts),
            "wait": self._wait,
            "retry": tenacity.retry_if_exception(_retryable),
            "reraise": True,
        }

    def _wait(self, state: tenacity.RetryCallState) -> float:
        cfg = self._config
        ceiling = min(cfg.backoff_max_s, cfg.backoff_base_s * 2 ** (state.attempt_number - 1))
        delay = ceiling / 2 + random.uniform(0, ceiling / 2)
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = _retry_after(exc.__cause__ if exc is not None else None)
        if hinted is not None:
            delay = max(delay, min(hinted, cfg.backoff_max_s))
        return delay

    def _failed(self, tally: _Tally, exc: BaseException) -> ModelError:
        error = map_error(exc, model=self._config.model)
        tally.errors[error.error_class] += 1
        return error

    def _result(
        self, response: Any, stage: str, chunk: int | None, tally: _Tally, partial: bool, started: float
    ) -> LLMResult:
        choices = getattr(response, "choices", None) or []
        if not choices:
            tally.errors["parse"] += 1
            raise MalformedOutput(
                "the provider answered without any choice", model=self._config.model, error_class="parse"
            )
        message = getattr(choices[0], "message", None)
        return LLMResult(
            text=getattr(message, "content", None) or "",
            finish_reason=_finish_reason(response),
            partial=partial,
            attempts=tally.attempts,
            prompt_tokens=tally.prompt_tokens,
            completion_tokens=tally.completion_tokens,
            cost_usd=tally.cost_usd,
            stage=stage,
            chunk=chunk,
            model=getattr(response, "model", None),
            wall_ms=(time.perf_counter() - started) * 1000,
        )


class _Call:
    """One logical call: what :meth:`LLMClient.complete` and ``acomplete`` share (they differ only in how they send).

    Iterating gives the requests to send: the first, then once more with a larger
    output cap when the reply was cut by it. Leaving the ``with`` block adds the
    call to the stage's stats, whether it succeeded or not.
    """

    def __init__(
        self,
        client: LLMClient,
        stage: str,
        chunk: int | None,
        messages: Sequence[Message],
        max_tokens: int | None,
        json_mode: bool,
    ) -> None:
        self._started = time.perf_counter()
        self._client = client
        self._stage, self._chunk = stage, chunk
        self._messages, self._json_mode = messages, json_mode
        self._cap = max_tokens or client.config.max_tokens
        self._retrying = False
        self.tally = _Tally()
        self.reply: Any = None
        self.partial = False

    def __enter__(self) -> _Call:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client._book.add(self._stage, self.tally, (time.perf_counter() - self._started) * 1000)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        request = self._client._request(self._stage, self._chunk, self._messages, self._cap, self._json_mode)
        yield request
        if _finish_reason(self.reply) == "length":
            self.tally.errors["truncation"] += 1
            self._retrying = True
            yield {**request, "max_tokens": self._client._larger(self._cap)}
            if not self.partial and _finish_reason(self.reply) == "length":
                self.tally.errors["truncation"] += 1
                self.partial = True

    @contextmanager
    def sending(self) -> Iterator[None]:
        """Wraps sending one request: a failed larger-cap retry keeps the cut reply, marked partial."""
        try:
            yield
        except ModelError:
            if not self._retrying:
                raise
            self.partial = True  # keep the cut reply rather than lose it

    def result(self) -> LLMResult:
        return self._client._result(self.reply, self._stage, self._chunk, self.tally, self.partial, self._started)


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
    litellm = _litellm()
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


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ModelError) and exc.error_class in RETRYABLE_CLASSES


def _retry_after(exc: BaseException | None) -> float | None:
    """Seconds from a ``Retry-After`` header on the provider's error response, if any."""
    if exc is None:
        return None
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after")
    except Exception:
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _finish_reason(response: Any) -> str | None:
    choices = getattr(response, "choices", None) or []
    return getattr(choices[0], "finish_reason", None) if choices else None


def _cost(response: Any) -> float | None:
    hidden = getattr(response, "_hidden_params", None) or {}
    if "response_cost" in hidden:
        cost = hidden["response_cost"]
        return float(cost) if cost is not None else None
    try:
        return float(_litellm().completion_cost(completion_response=response))
    except Exception:  # litellm raises when it has no price for the model
        return None
