"""The call: ``LLMClient`` sends each request through litellm with retries, a per-attempt deadline and the length retry."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import tenacity
from pydantic import BaseModel, ConfigDict, Field

from tortoise_sdk.errors import ConfigError, MalformedOutput, ModelError
from tortoise_sdk.jsonparse import Expect, ParsedJSON, parse_json
from tortoise_sdk.models import StageStats

from .classify import FATAL_CLASSES, RETRYABLE_CLASSES, map_error
from .config import CHUNK_HEADER, EMBED_STAGE, STAGE_HEADER, LLMConfig, Message
from .lazy import load_litellm
from .usage import StatsBook, Tally

__all__ = ("LLMClient", "LLMResult")

#: ``unreachable`` is retried at most once, after at most this wait: nothing listening seldom starts to.
UNREACHABLE_RETRY_WAIT_S = 0.5
#: Timed-out attempts a call makes at most: a provider that hung twice seldom answers a third time.
MAX_TIMEOUTS = 2

class _NoRetries(int):
    """0 retries that reads as true: litellm's OpenAI embedding route takes ``max_retries or DEFAULT_MAX_RETRIES``,
    so a plain 0 would let the OpenAI SDK retry unseen (uncounted, unclassified) behind ours."""

    def __bool__(self) -> bool:
        return True


_NO_RETRIES = _NoRetries(0)


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
        self._book = StatsBook()
        self._fatal: ModelError | None = None

    @property
    def fatal(self) -> ModelError | None:
        """The first call failure of a fatal class (auth, billing, model_not_found, unreachable, timeout), if any.

        Once set, every later call of this client raises it again without sending
        anything: the same provider, key and model would refuse it the same way.
        """
        return self._fatal

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
        self._refuse_after_fatal()
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
        self._refuse_after_fatal()
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

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` in one request (``litellm.embedding``), one vector per text, in order.

        Sent with ``X-Tortoise-Stage: embed``; retried, classified and counted like the other calls.

        Raises:
            ModelError: the call failed for good, or the provider answered with a vector count unlike the texts'.
        """
        self._refuse_after_fatal()
        started, tally = time.perf_counter(), Tally()
        try:
            reply = self._retrying_sync(tally, self._embed_request(texts), send="embedding")
            return self._vectors(reply, len(texts), tally)
        finally:
            self._book.add(EMBED_STAGE, tally, (time.perf_counter() - started) * 1000)

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        """The async twin of :meth:`embed` (``litellm.aembedding``)."""
        self._refuse_after_fatal()
        started, tally = time.perf_counter(), Tally()
        try:
            reply = await self._retrying_async(tally, self._embed_request(texts), send="aembedding")
            return self._vectors(reply, len(texts), tally)
        finally:
            self._book.add(EMBED_STAGE, tally, (time.perf_counter() - started) * 1000)

    # -- private layers -------------------------------------------------

    def _embed_request(self, texts: Sequence[str]) -> dict[str, Any]:
        cfg = self._config
        request: dict[str, Any] = {"model": cfg.model, "input": list(texts), "timeout": cfg.timeout_s,
                                   "max_retries": _NO_RETRIES, "extra_headers": {STAGE_HEADER: EMBED_STAGE}}
        if cfg.api_base:
            request["api_base"] = cfg.api_base
        if cfg.api_key:
            request["api_key"] = cfg.api_key
        return request

    def _vectors(self, reply: Any, expected: int, tally: Tally) -> list[list[float]]:
        tally.completion_tokens = None  # an embedding has no completion; litellm reports a 0 it never counted
        items = sorted(getattr(reply, "data", None) or [], key=lambda d: _field(d, "index") or 0)
        vectors = [[float(x) for x in (_field(d, "embedding") or [])] for d in items]
        if len(vectors) != expected or any(not v for v in vectors):
            tally.errors["parse"] += 1
            raise MalformedOutput(f"the provider sent {len(vectors)} embedding(s) for {expected} text(s)",
                                  model=self._config.model, error_class="parse")
        return vectors

    def _refuse_after_fatal(self) -> None:
        fatal = self._fatal
        if fatal is not None:
            raise type(fatal)(f"not sent, an earlier call failed for good: {fatal}", model=fatal.model,
                              status_code=fatal.status_code, error_class=fatal.error_class, body=fatal.body)

    def _parse(self, result: LLMResult, expect: Expect) -> LLMResult:
        try:
            parsed = parse_json(result.text, expect)
        except MalformedOutput as exc:
            exc.model = self._config.model
            if result.partial and exc.error_class == "parse":
                exc.error_class = "truncation"
            self._book.add(result.stage, Tally(errors=Counter({exc.error_class: 1})), 0.0, call=False)
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

    def _retrying_sync(self, tally: Tally, request: dict[str, Any], send: str = "completion") -> Any:
        def attempt() -> Any:
            with self._attempt(tally, embedding=send.endswith("embedding")):
                response = getattr(load_litellm(), send)(**request)
            tally.add_usage(response)
            return response

        with self._latching():
            return tenacity.Retrying(**self._retry_policy(tally))(attempt)

    async def _retrying_async(self, tally: Tally, request: dict[str, Any], send: str = "acompletion") -> Any:
        async def attempt() -> Any:
            with self._attempt(tally, embedding=send.endswith("embedding")):
                response = await asyncio.wait_for(getattr(load_litellm(), send)(**request), self._config.timeout_s)
            tally.add_usage(response)
            return response

        with self._latching():
            return await tenacity.AsyncRetrying(**self._retry_policy(tally))(attempt)

    @contextmanager
    def _latching(self) -> Iterator[None]:
        """Remembers the first fatal failure once retries are over (see :attr:`fatal`)."""
        try:
            yield
        except ModelError as exc:
            if exc.error_class in FATAL_CLASSES and self._fatal is None:
                self._fatal = exc
            raise

    @contextmanager
    def _attempt(self, tally: Tally, *, embedding: bool = False) -> Iterator[None]:
        """Counts one HTTP attempt and maps its failure to a classified ModelError."""
        tally.attempts += 1
        try:
            yield
        except Exception as exc:
            raise self._failed(tally, exc, embedding=embedding) from exc

    def _retry_policy(self, tally: Tally) -> dict[str, Any]:
        return {
            "stop": lambda state: self._stop(state, tally),
            "wait": self._wait,
            "retry": tenacity.retry_if_exception(_retryable),
            "reraise": True,
        }

    def _stop(self, state: tenacity.RetryCallState, tally: Tally) -> bool:
        if state.attempt_number >= self._config.max_attempts or self._fatal is not None:
            return True  # after another call's fatal failure a retry would only meet it again
        if _error_class(state) == "timeout":
            return tally.errors["timeout"] >= MAX_TIMEOUTS
        return _error_class(state) == "unreachable" and state.attempt_number >= 2

    def _wait(self, state: tenacity.RetryCallState) -> float:
        cfg = self._config
        ceiling = min(cfg.backoff_max_s, cfg.backoff_base_s * 2 ** (state.attempt_number - 1))
        delay = ceiling / 2 + random.uniform(0, ceiling / 2)
        if _error_class(state) == "unreachable":
            return min(delay, UNREACHABLE_RETRY_WAIT_S)
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = _retry_after(exc.__cause__ if exc is not None else None)
        if hinted is not None:
            delay = max(delay, min(hinted, cfg.backoff_max_s))
        return delay

    def _failed(self, tally: Tally, exc: BaseException, *, embedding: bool = False) -> ModelError:
        error = map_error(exc, model=self._config.model, api_base=self._config.api_base, embedding=embedding)
        tally.errors[error.error_class] += 1
        return error

    def _result(
        self, response: Any, stage: str, chunk: int | None, tally: Tally, partial: bool, started: float
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
        self.tally = Tally()
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


def _field(item: Any, name: str) -> Any:
    """A field of one embedding item (litellm gives dicts or objects, by provider)."""
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _error_class(state: tenacity.RetryCallState) -> str | None:
    exc = state.outcome.exception() if state.outcome is not None else None
    return exc.error_class if isinstance(exc, ModelError) else None


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
