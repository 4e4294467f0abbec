"""The model layer: wire headers, retries, fault classification, truncation and stats.

Cassette tests replay ``cassettes/test_llm/<test>.yaml``, recorded from the
stub script beside it (see tests/record_cassettes.md). Timeout tests talk to
a live stub on loopback: a cassette stores replies, not how late they came.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import pytest

from conftest import FAST_RETRY, ModelEndpoint
from tortoise_sdk.errors import ConfigError, MalformedOutput, ModelError, ModelTimeout
from tortoise_sdk.llm import CHUNK_HEADER, STAGE_HEADER, LLMClient, LLMConfig, map_error
from tortoise_sdk.llm.lazy import load_litellm
from tortoise_sdk.models import StageStats

LOOPBACK = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])

TRANSCRIPT = (
    "[D1:3] Caroline: I went to a LGBTQ support group yesterday and it was so powerful.\n"
    "[D1:4] Melanie: Wow, that's cool, Caroline! What happened that was so awesome?\n"
    "[D1:5] Caroline: The transgender stories were so inspiring! I'm looking into counseling now."
)


def prompt(task: str) -> list[dict[str, str]]:
    """Chat messages shaped like a pipeline stage's."""
    return [
        {"role": "system", "content": "You extract long-term memories from conversations. Answer with JSON only."},
        {"role": "user", "content": f"{task}\n\nConversation (7 May 2023):\n{TRANSCRIPT}"},
    ]


def wire(vcr: Any, endpoint: ModelEndpoint) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """The (headers, body) of every HTTP exchange the test made, recorded or replayed.

    Replay answers only requests equal in method, uri, body and stage/chunk
    headers to recorded ones, and each recorded answer once, so a fully
    played cassette is the exact wire.
    """
    if endpoint.stub is not None:
        return [(r.headers, r.body) for r in endpoint.stub.requests]
    assert vcr.play_count == len(vcr.requests), f"played {vcr.play_count} of {len(vcr.requests)} recorded exchanges"
    return [({k.lower(): v for k, v in r.headers.items()}, json.loads(r.body)) for r in vcr.requests]


def stage_stats(client: LLMClient, stage: str) -> dict[str, Any]:
    return client.stats[stage].model_dump(exclude={"wall_ms", "prompt_hash"})


# -- cassette tests ----------------------------------------------------------


@pytest.mark.vcr
@pytest.mark.stub_only
def test_s1_reply_carries_stage_and_chunk_headers(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client()
    result = client.complete_json("s1", prompt("Narrate this chunk."), chunk=0)

    assert result.parsed is not None and result.parsed.steps == ["strict"]
    assert result.parsed.value["entities"][0] == {"name": "Caroline", "kind": "person"}
    assert (result.finish_reason, result.partial, result.attempts) == ("stop", False, 1)
    assert (result.prompt_tokens, result.completion_tokens) == (412, 96)
    assert result.cost_usd is None  # litellm has no price for stub-model
    [(headers, body)] = wire(vcr, model_endpoint)
    assert headers["x-tortoise-stage"] == "s1"
    assert headers["x-tortoise-chunk"] == "0"
    assert body["response_format"] == {"type": "json_object"}
    assert body["max_tokens"] == 4096
    assert stage_stats(client, "s1") == {
        "calls": 1,
        "retries": 0,
        "prompt_tokens": 412,
        "completion_tokens": 96,
        "cost_usd": None,
        "errors": {},
    }


@pytest.mark.vcr
@pytest.mark.stub_only
def test_rate_limit_then_success(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client()
    result = client.complete_json("s2", prompt("List the dated events."))

    assert result.attempts == 2
    assert result.parsed is not None and result.parsed.value["events"][0]["when"] == "2023-05-07"
    assert len(wire(vcr, model_endpoint)) == 2
    assert stage_stats(client, "s2") == {
        "calls": 1,
        "retries": 1,
        "prompt_tokens": 530,
        "completion_tokens": 41,
        "cost_usd": None,
        "errors": {"rate_limit": 1},
    }


@pytest.mark.vcr
@pytest.mark.stub_only
def test_server_errors_exhaust_attempts(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client(max_attempts=3)
    with pytest.raises(ModelError) as caught:
        client.complete("vet", prompt("Keep only the facts the turns state."))

    assert caught.value.error_class == "server"
    assert caught.value.status_code == 500
    assert caught.value.model == "openai/stub-model"
    assert not isinstance(caught.value, ModelTimeout)
    assert len(wire(vcr, model_endpoint)) == 3
    assert stage_stats(client, "vet") == {
        "calls": 1,
        "retries": 2,
        "prompt_tokens": None,
        "completion_tokens": None,
        "cost_usd": None,
        "errors": {"server": 3},
    }


@pytest.mark.vcr
@pytest.mark.stub_only
def test_auth_error_is_fatal(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client()
    with pytest.raises(ModelError) as caught:
        client.complete("s1", prompt("Narrate this chunk."), chunk=2)

    assert (caught.value.error_class, caught.value.status_code) == ("auth", 401)
    assert "api_key" in str(caught.value)  # the message says what to do
    # The server checked the key it was sent: a dummy key for a keyless server is not the advice.
    assert "refused the key it was sent" in str(caught.value) and "--api-key x" not in str(caught.value)
    assert len(wire(vcr, model_endpoint)) == 1
    assert stage_stats(client, "s1")["errors"] == {"auth": 1}
    assert stage_stats(client, "s1")["retries"] == 0


@pytest.mark.vcr
@pytest.mark.stub_only
def test_billing_quota_is_fatal(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client()
    with pytest.raises(ModelError) as caught:
        client.complete("s4", prompt("Summarise each entity."))

    assert (caught.value.error_class, caught.value.status_code) == ("billing", 429)
    assert len(wire(vcr, model_endpoint)) == 1


@pytest.mark.vcr
@pytest.mark.stub_only
def test_length_then_larger_cap(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client()
    result = client.complete_json("s2", prompt("List the points."), max_tokens=64)

    assert (result.attempts, result.partial, result.finish_reason) == (2, False, "stop")
    assert result.parsed is not None and not result.parsed.partial
    assert len(result.parsed.value["points"]) == 2
    assert [body["max_tokens"] for _, body in wire(vcr, model_endpoint)] == [64, 128]
    assert stage_stats(client, "s2") == {
        "calls": 1,
        "retries": 1,
        "prompt_tokens": 600,
        "completion_tokens": 165,
        "cost_usd": None,
        "errors": {"truncation": 1},
    }


@pytest.mark.vcr
@pytest.mark.stub_only
def test_length_twice_is_partial(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client()
    result = client.complete_json(
        "s4", prompt('Summarise each entity as {"items": [...]}.'), expect="list", max_tokens=32
    )

    assert result.partial and result.attempts == 2
    assert result.parsed is not None and result.parsed.partial
    assert [item["name"] for item in result.parsed.value] == ["Caroline", "Melanie", "LGBTQ support group"]
    assert result.parsed.steps == ["kept_complete_items", "unwrapped"]
    assert [body["max_tokens"] for _, body in wire(vcr, model_endpoint)] == [32, 64]
    assert stage_stats(client, "s4")["errors"] == {"truncation": 2}


@pytest.mark.vcr
@pytest.mark.stub_only
def test_malformed_reply_raises_parse(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client()
    with pytest.raises(MalformedOutput) as caught:
        client.complete_json("resolve", prompt("Which names are the same entity?"))

    assert caught.value.error_class == "parse"
    assert caught.value.model == "openai/stub-model"
    assert "I'm sorry" in caught.value.body
    assert len(wire(vcr, model_endpoint)) == 1  # a reply that is not JSON is not re-asked
    assert stage_stats(client, "resolve")["errors"] == {"parse": 1}
    assert stage_stats(client, "resolve")["calls"] == 1


@pytest.mark.vcr
@pytest.mark.stub_only
def test_fenced_reply_is_unwrapped(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    result = model_endpoint.client().complete_json("resolve", prompt("Which names are the same entity?"))

    assert result.parsed is not None
    assert result.parsed.value == {"same": [["Mel", "Melanie"]], "different": [["Caroline", "Carol"]]}
    assert result.parsed.steps == ["stripped_fences"]
    assert len(wire(vcr, model_endpoint)) == 1


@pytest.mark.vcr
@pytest.mark.stub_only
def test_concurrent_s1_chunks(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client()

    async def narrate_all() -> list[Any]:
        calls = [client.acomplete_json("s1", prompt(f"Narrate chunk {n}."), chunk=n) for n in range(4)]
        return await asyncio.gather(*calls)

    results = asyncio.run(narrate_all())

    assert [r.chunk for r in results] == [0, 1, 2, 3]
    assert "support group" in results[0].parsed.value["narrative"]
    assert "painted a lake" in results[2].parsed.value["narrative"]
    exchanges = wire(vcr, model_endpoint)
    assert sorted(h["x-tortoise-chunk"] for h, _ in exchanges) == ["0", "1", "2", "3"]
    for headers, body in exchanges:
        assert f"Narrate chunk {headers['x-tortoise-chunk']}." in body["messages"][1]["content"]
    assert stage_stats(client, "s1")["calls"] == 4


@pytest.mark.vcr
@pytest.mark.stub_only
def test_garbled_body_is_retried(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client()
    result = client.complete_json("vet", prompt("Keep only the facts the turns state."))

    assert result.attempts == 2
    assert result.parsed is not None and result.parsed.value["keep"] == [0, 2]
    assert len(wire(vcr, model_endpoint)) == 2
    assert stage_stats(client, "vet")["errors"] == {"network": 1}  # a 200 whose body was garbled: no 500 was sent


@pytest.mark.vcr
@pytest.mark.stub_only
def test_known_model_reports_cost(vcr: Any, model_endpoint: ModelEndpoint) -> None:
    client = model_endpoint.client(model="openai/gpt-4o-mini")
    result = client.complete("s2", prompt("List the dated events."))

    assert result.cost_usd is not None and result.cost_usd > 0
    assert client.stats["s2"].cost_usd == pytest.approx(result.cost_usd)
    assert [body["model"] for _, body in wire(vcr, model_endpoint)] == ["gpt-4o-mini"]


@pytest.mark.vcr
@pytest.mark.stub_only
def test_replay_never_touches_the_network(
    vcr: Any, model_endpoint: ModelEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[Any] = []
    if not model_endpoint.recording:
        real_connect = socket.socket.connect

        def spy(sock: socket.socket, address: Any) -> Any:
            attempts.append(address)
            return real_connect(sock, address)

        monkeypatch.setattr(socket.socket, "connect", spy)

    client = model_endpoint.client()
    sync = client.complete("s1", prompt("Narrate chunk 0."), chunk=0)
    in_async = asyncio.run(client.acomplete("s1", prompt("Narrate chunk 1."), chunk=1))

    assert json.loads(sync.text) == {"ok": "sync"}
    assert json.loads(in_async.text) == {"ok": "async"}
    assert attempts == []
    assert len(wire(vcr, model_endpoint)) == 2


# -- live stub on loopback ---------------------------------------------------


@LOOPBACK
def test_headers_reach_the_wire(stub_model: Any) -> None:
    stub = stub_model({"routes": [{"replies": [{"content": "ok"}], "cycle": True}]})
    client = LLMClient(LLMConfig(model="openai/stub-model", api_base=stub.base_url, api_key="sk-test", **FAST_RETRY))

    client.complete("vet", prompt("Check."))
    asyncio.run(client.acomplete("s1", prompt("Narrate."), chunk=7))

    first, second = stub.requests
    assert (first.stage, first.chunk) == ("vet", None)
    assert (second.stage, second.chunk) == ("s1", "7")
    assert first.headers["authorization"] == "Bearer sk-test"
    assert STAGE_HEADER.lower() in second.headers and CHUNK_HEADER.lower() in second.headers


@LOOPBACK
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_timeout_then_success(stub_model: Any, mode: str) -> None:
    stub = stub_model(
        {"routes": [{"stage": "s2", "replies": [{"delay": 2.0, "content": "too late"}, {"content": '{"events": []}'}]}]}
    )
    client = LLMClient(
        LLMConfig(model="openai/stub-model", api_base=stub.base_url, api_key="sk-test", timeout_s=0.3, **FAST_RETRY)
    )

    call = (
        client.complete("s2", prompt("Events?"))
        if mode == "sync"
        else asyncio.run(client.acomplete("s2", prompt("Events?")))
    )

    assert call.text == '{"events": []}'
    assert call.attempts == 2
    assert len(stub.requests) == 2
    assert client.stats["s2"].errors == {"timeout": 1}
    assert client.stats["s2"].retries == 1
    slow, fast = stub.requests
    assert fast.received_at - slow.received_at < 1.5  # the 2 s reply was abandoned, not awaited


@LOOPBACK
def test_timeouts_exhaust_attempts(stub_model: Any) -> None:
    stub = stub_model([{"delay": 2.0, "content": "late"}] * 2)
    client = LLMClient(
        LLMConfig(
            model="openai/stub-model",
            api_base=stub.base_url,
            api_key="sk-test",
            # 0.2 s let a loaded machine time the second attempt out before its request reached the stub (1 of 2
            # seen, twice in a fresh clone's run); the stub's 2 s reply still outlasts both attempts.
            timeout_s=0.6,
            max_attempts=2,
            **FAST_RETRY,
        )
    )
    with pytest.raises(ModelTimeout) as caught:
        asyncio.run(client.acomplete("s4", prompt("Summaries?")))

    assert caught.value.error_class == "timeout"
    assert len(stub.requests) == 2
    assert client.stats["s4"].errors == {"timeout": 2}


@LOOPBACK
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_timed_out_request_is_retried_once_then_the_client_sends_nothing_more(stub_model: Any, mode: str) -> None:
    # Timeouts are counted, not attempts: a server error between them does not use up the one retry.
    stub = stub_model([{"delay": 3600, "content": "late"}, {"status": 500}, {"delay": 3600, "content": "late"},
                       {"content": "never asked"}])
    client = LLMClient(LLMConfig(model="openai/stub-model", api_base=stub.base_url, api_key="sk-test",
                                 timeout_s=0.3, max_attempts=4, **FAST_RETRY))
    story = prompt("Story?")
    with pytest.raises(ModelTimeout) as caught:
        client.complete("s1", story) if mode == "sync" else asyncio.run(client.acomplete("s1", story))
    assert caught.value.error_class == "timeout"
    assert client.stats["s1"].errors == {"timeout": 2, "server": 1} and client.stats["s1"].retries == 2
    # Fatal: a provider that hung twice is not asked again by this client.
    assert client.fatal is caught.value
    with pytest.raises(ModelTimeout, match="not sent"):
        client.complete("s2", prompt("Events?"))
    assert "s2" not in client.stats


def _refused_base() -> tuple[socket.socket, str]:
    """A loopback port that is bound and never listens: every connection to it is refused."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    return probe, f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


@LOOPBACK
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_refused_connection_is_unreachable_retried_once(mode: str) -> None:
    probe, base = _refused_base()
    with probe:
        # max_attempts=4 would give a 5xx four tries; a refused connection gets two, quickly.
        client = LLMClient(LLMConfig(model="openai/stub-model", api_base=base, api_key="k", max_attempts=4,
                                     backoff_base_s=5.0, backoff_max_s=30.0))
        load_litellm()  # its one-off import is not the retry's time
        started = time.perf_counter()
        with pytest.raises(ModelError) as caught:
            if mode == "sync":
                client.complete("s1", prompt("Narrate."), chunk=0)
            else:
                asyncio.run(client.acomplete("s1", prompt("Narrate."), chunk=0))
        took = time.perf_counter() - started

    assert caught.value.error_class == "unreachable" and caught.value.status_code is None
    assert base in str(caught.value) and "[Errno 111]" in str(caught.value)  # the refusal itself
    assert client.stats["s1"].errors == {"unreachable": 2}
    assert (client.stats["s1"].calls, client.stats["s1"].retries) == (1, 1)
    assert took < 2.0  # the retry waited at most UNREACHABLE_RETRY_WAIT_S, not the 5 s backoff
    # Fatal: the client sends nothing more, and says so.
    assert client.fatal is caught.value
    with pytest.raises(ModelError) as again:
        client.complete("s2", prompt("Map."))
    assert again.value.error_class == "unreachable" and "not sent" in str(again.value)
    assert "s2" not in client.stats


@LOOPBACK
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_dropped_connection_is_network_and_retried(stub_model: Any, mode: str) -> None:
    # The server accepted the connection and closed it without answering: retried like a 5xx, not fatal.
    stub = stub_model([{"drop": True}, {"drop": True}, {"content": "{}"}])
    client = LLMClient(LLMConfig(model="openai/stub-model", api_base=stub.base_url, api_key="k", max_attempts=4,
                                 **FAST_RETRY))
    if mode == "sync":
        result = client.complete("s2", prompt("Map."))
    else:
        result = asyncio.run(client.acomplete("s2", prompt("Map.")))

    assert (result.text, result.attempts) == ("{}", 3)
    assert client.stats["s2"].errors == {"network": 2}
    assert client.fatal is None and len(stub.requests) == 3


def test_missing_key_is_auth_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing is sent: litellm refuses before any connection (it reports this as a 500).
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("TORTOISE_API_KEY", raising=False)
    client = LLMClient(LLMConfig(model="openai/gpt-4o-mini", max_attempts=4))
    with pytest.raises(ModelError) as caught:
        client.complete("s1", prompt("Narrate."), chunk=0)

    assert (caught.value.error_class, caught.value.status_code) == ("auth", None)
    assert "OPENAI_API_KEY" in str(caught.value) and "api_key=" in str(caught.value)
    assert "--api-key" in str(caught.value) and "refused the key it was sent" not in str(caught.value)
    assert client.stats["s1"].errors == {"auth": 1} and client.stats["s1"].retries == 0


def test_a_model_name_without_its_provider_is_model_not_found_and_fatal() -> None:
    # `--model llama3` for a local server (not openai/llama3): litellm refuses before sending anything,
    # and every later stage would be refused the same way, so it is fatal, not a bad_request S2 and S4 repeat.
    client = LLMClient(LLMConfig(model="llama3-local", api_base="http://127.0.0.1:9/v1", api_key="x", max_attempts=4))
    with pytest.raises(ModelError) as caught:
        client.complete("s1", prompt("Narrate."), chunk=0)

    assert (caught.value.error_class, caught.value.status_code) == ("model_not_found", None)
    assert "provider/model" in str(caught.value) and client.fatal is caught.value
    assert client.stats["s1"].errors == {"model_not_found": 1} and client.stats["s1"].retries == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_api_base_that_is_not_http_is_unreachable(mode: str) -> None:
    # httpx (sync) and aiohttp (async, the pipeline's path) refuse the scheme before connecting: no request
    # can ever be sent there (it was `network`, retried 4x in each of S1, S2 and S4: 20 s a capture).
    client = LLMClient(LLMConfig(model="openai/gpt-4o-mini", api_base="ftp://127.0.0.1:9/v1", api_key="x",
                                 max_attempts=4, backoff_base_s=0.01))
    with pytest.raises(ModelError) as caught:
        if mode == "sync":
            client.complete("s1", prompt("Narrate."), chunk=0)
        else:
            asyncio.run(client.acomplete("s1", prompt("Narrate."), chunk=0))

    assert caught.value.error_class == "unreachable" and "ftp://127.0.0.1:9/v1" in str(caught.value)
    assert client.fatal is caught.value and client.stats["s1"].retries <= 1


@LOOPBACK
def test_stats_are_thread_safe(stub_model: Any) -> None:
    stub = stub_model(
        {
            "routes": [
                {"replies": [{"content": "ok", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}], "cycle": True}
            ]
        }
    )
    client = LLMClient(LLMConfig(model="openai/stub-model", api_base=stub.base_url, api_key="sk-test", **FAST_RETRY))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda n: client.complete("s1", prompt(f"chunk {n}"), chunk=n), range(24)))

    s1 = client.stats["s1"]
    assert (s1.calls, s1.retries, s1.prompt_tokens, s1.completion_tokens) == (24, 0, 72, 48)
    assert len(stub.requests) == 24


@LOOPBACK
def test_unreported_usage_stays_none(stub_model: Any) -> None:
    stub = stub_model([{"content": "ok", "usage": None}])
    client = LLMClient(LLMConfig(model="openai/stub-model", api_base=stub.base_url, api_key="sk-test", **FAST_RETRY))

    result = client.complete("vet", prompt("Check."))

    assert (result.prompt_tokens, result.completion_tokens) == (None, None)
    assert client.stats["vet"].prompt_tokens is None
    assert client.stats["vet"].calls == 1


@LOOPBACK
def test_a_count_the_provider_leaves_out_stays_none(stub_model: Any) -> None:
    """A reviewer's: a usage block with the prompt's count alone gave completion_tokens 0 on the receipt."""
    stub = stub_model([{"content": "ok", "usage": {"prompt_tokens": 42}}])
    client = LLMClient(LLMConfig(model="openai/stub-model", api_base=stub.base_url, api_key="sk-test", **FAST_RETRY))

    client.complete("vet", prompt("Check."))

    assert (client.stats["vet"].prompt_tokens, client.stats["vet"].completion_tokens) == (42, None)


# -- no network ---------------------------------------------------------------


def test_importing_llm_does_not_import_litellm() -> None:
    code = "import sys, tortoise_sdk.llm; sys.exit('litellm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_config_resolves_model_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="TORTOISE_MODEL"):
        LLMConfig.resolve()
    monkeypatch.setenv("TORTOISE_MODEL", "openai/gpt-4o-mini")
    assert LLMConfig.resolve().model == "openai/gpt-4o-mini"
    assert LLMConfig.resolve("anthropic/claude-3-5-haiku-latest").model == "anthropic/claude-3-5-haiku-latest"
    with pytest.raises(ConfigError, match="max_attempts"):
        LLMConfig.resolve(max_attempts=0)
    assert "sk-secret" not in repr(LLMConfig(model="m", api_key="sk-secret"))


def test_reset_stats_returns_and_clears() -> None:
    client = LLMClient(LLMConfig(model="m"))
    client._book.add("s1", _tally(attempts=3, errors={"rate_limit": 2}), 12.5)
    snapshot = client.stats
    snapshot["s1"].calls = 99  # a snapshot is a copy

    taken = client.reset_stats()

    assert taken["s1"] == StageStats(calls=1, retries=2, wall_ms=12.5, errors={"rate_limit": 2})
    assert client.stats == {}


def _tally(**kwargs: Any) -> Any:
    from collections import Counter

    from tortoise_sdk.llm.usage import Tally as _Tally

    errors = Counter(kwargs.pop("errors", {}))
    return _Tally(errors=errors, **kwargs)


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (400, "Invalid value for 'response_format'", "bad_request"),
        (401, "Incorrect API key provided", "auth"),
        (402, "Payment required", "billing"),
        (403, "Not allowed", "auth"),
        (404, "The model does not exist", "model_not_found"),
        (400, "The model `gpt-5o` does not exist or you do not have access to it.", "model_not_found"),
        (500, "Missing credentials. Please pass an `api_key`", "auth"),
        (400, "LLM Provider NOT provided. Pass in the LLM provider you are trying to call. You passed "
              "model=llama3", "model_not_found"),
        (429, "Rate limit reached", "rate_limit"),
        (429, "You exceeded your current quota, please check your plan and billing details", "billing"),
        (500, "The server had an error", "server"),
        (503, "Overloaded", "server"),
    ],
)
def test_map_error_classifies_statuses(status: int, message: str, expected: str) -> None:
    import litellm

    exc = litellm.APIError(status_code=status, message=message, llm_provider="openai", model="gpt-4o-mini")
    error = map_error(exc, model="openai/gpt-4o-mini")

    assert (error.error_class, error.model) == (expected, "openai/gpt-4o-mini")
    assert error.status_code == (None if "Missing credentials" in message or "NOT provided" in message else status)


def test_map_error_classifies_transport_failures() -> None:
    import litellm

    assert isinstance(map_error(litellm.Timeout(message="slow", model="m", llm_provider="openai")), ModelTimeout)
    assert (
        map_error(litellm.APIConnectionError(message="refused", llm_provider="openai", model="m")).error_class
        == "unreachable"
    )
    assert map_error(ConnectionRefusedError(111, "Connection refused")).error_class == "unreachable"
    assert map_error(ConnectionResetError(104, "reset")).error_class == "network"
    assert map_error(TimeoutError()).error_class == "timeout"
    assert map_error(RuntimeError("boom")).error_class == "unknown"
    # Reviewer: a 200 whose body was cut was reported as "(server, HTTP 500)"; no 500 was sent.
    cut = litellm.InternalServerError(message="OpenAIException - error - Unterminated string starting at: line 1 "
                                      "column 49 (char 48), Received response - <APIResponse [200 OK] type=<class "
                                      "'openai.types.chat.chat_completion.ChatCompletion'>>", llm_provider="openai",
                                      model="m")
    error = map_error(cut, model="openai/m")
    assert (error.error_class, error.status_code) == ("network", None) and "HTTP 500" not in str(error)


def test_backoff_honours_retry_after_up_to_the_cap() -> None:
    import tenacity

    client = LLMClient(LLMConfig(model="m", backoff_base_s=0.1, backoff_max_s=2.0))

    class Limited(Exception):
        litellm_response_headers: ClassVar[dict[str, str]] = {"retry-after": "1.5"}

    def wait_after(attempt: int, cause: BaseException | None) -> float:
        error = ModelError("x", error_class="rate_limit")
        error.__cause__ = cause
        state = tenacity.RetryCallState(None, None, (), {})
        state.attempt_number = attempt
        state.set_exception((ModelError, error, None))
        return client._wait(state)

    assert 0.05 <= wait_after(1, None) <= 0.1
    assert 0.2 <= wait_after(3, None) <= 0.4
    assert 1.0 <= wait_after(9, None) <= 2.0
    assert wait_after(1, Limited()) == 1.5
    Limited.litellm_response_headers = {"retry-after": "60"}
    assert wait_after(1, Limited()) == 2.0


def test_threads_share_one_import() -> None:
    from tortoise_sdk.llm.lazy import load_litellm as _litellm

    seen: list[Any] = []
    threads = [threading.Thread(target=lambda: seen.append(_litellm())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(m) for m in seen}) == 1
