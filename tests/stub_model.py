"""A scripted, OpenAI-compatible chat-completions server on 127.0.0.1.

It answers ``POST /v1/chat/completions`` (and ``/chat/completions``) from a
script, and ``POST /v1/embeddings`` with deterministic ``toy_embedding`` vectors
(unless a route matching ``stage: embed`` scripts a fault or a delay), so the SDK's real HTTP path (litellm's ``openai/<name>`` route with
``api_base`` pointing here) can be exercised, recorded into cassettes, and
benchmarked without a provider.

A script is a JSON file, or the same shape as a Python object::

    {
      "routes": [
        {"stage": "s1", "chunk": 0, "contains": "Caroline",
         "replies": [
           {"status": 429, "retry_after": 1},
           {"content": "{\\"entities\\": []}", "usage": {"prompt_tokens": 90, "completion_tokens": 7}}
         ]},
        {"replies": [{"content": {"items": []}}], "cycle": true}
      ]
    }

A bare list is shorthand for one catch-all route. A route matches a request
when every matcher it names agrees: ``stage`` (the ``X-Tortoise-Stage``
header), ``chunk`` (``X-Tortoise-Chunk``), ``model``, and ``contains`` (a
substring, or a list of substrings, of the prompt). The first matching route
with a reply left answers and consumes it; ``"cycle": true`` replays its list
forever. A request that no route can answer gets HTTP 400 ``stub script
exhausted`` (fatal for the client, so a short script fails loudly) and is
kept in ``unanswered``.

A reply is one of:

- content: ``{"content": str | JSON value, "finish_reason": "stop" | "length",
  "usage": {...} | null}``; a non-string content is sent as its JSON text;
  usage defaults to an estimate, ``null`` leaves it out.
- fault: ``{"status": 429 | 500 | 503 | 400 | 401 | ..., "error": str,
  "code": str, "retry_after": seconds}`` (an OpenAI-style error body).
- raw body: ``{"raw": str, "status": 200}``, e.g. a truncated JSON document.
- dropped connection: ``{"drop": true}``, the connection is closed with no response at all
  (a transport failure mid-request, not a refused connection).

Any reply may add ``"delay": seconds`` (e.g. longer than the client's
timeout) and ``"headers": {...}``. ``--delay`` / ``delay=`` adds a fixed
latency to every request (benchmarks).

``responder=`` (Python only) answers what no route can: a function of the
``StubRequest`` returning a reply as above, or None for ``stub script
exhausted``. It serves conversations too long to script by hand (a 300-turn
chat replayed exchange by exchange, ``tests/reading_model.py``).

Usage::

    with StubModel(script) as stub:
        litellm.completion(model="openai/stub-model", api_base=stub.base_url, ...)
        assert stub.requests[0].headers["x-tortoise-stage"] == "s1"

or from a shell: ``python tests/stub_model.py --script FILE --port 8765 [--delay 0.2]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ("DEFAULT_STUB_MODEL", "EMBED_DIMS", "StubModel", "StubRequest", "load_script", "main", "toy_embedding")

DEFAULT_STUB_MODEL = "stub-model"
_PATHS = ("/v1/chat/completions", "/chat/completions")
_EMBED_PATHS = ("/v1/embeddings", "/embeddings")
#: Dimensions of the stub's embeddings (``toy_embedding``).
EMBED_DIMS = 32
#: Words the toy embedder maps to one shared direction each: a stand-in for meaning in tests, not a model.
TOY_CONCEPTS = (
    ("peanut", "peanuts", "allergic", "allergy", "snack", "snacks", "avoid", "nuts"),
    ("birthday", "born", "turns", "anniversary"),
    ("dog", "puppy", "pet", "walk"),
)
_log = logging.getLogger("tortoise.stub_model")


@dataclass(frozen=True)
class StubRequest:
    """One request the stub received, as it arrived on the wire."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes
    route: int | None
    received_at: float = field(default_factory=time.monotonic)

    @property
    def stage(self) -> str | None:
        """The ``X-Tortoise-Stage`` header, if sent."""
        return self.headers.get("x-tortoise-stage")

    @property
    def chunk(self) -> str | None:
        """The ``X-Tortoise-Chunk`` header, if sent."""
        return self.headers.get("x-tortoise-chunk")

    @property
    def prompt(self) -> str:
        """All message contents of the request, joined by newlines."""
        return _prompt_text(self.body)


@dataclass
class _Route:
    replies: list[dict[str, Any]]
    stage: str | None = None
    chunk: str | None = None
    model: str | None = None
    contains: tuple[str, ...] = ()
    cycle: bool = False
    served: int = 0

    def matches(self, headers: dict[str, str], body: Any) -> bool:
        if self.stage is not None and headers.get("x-tortoise-stage") != self.stage:
            return False
        if self.chunk is not None and headers.get("x-tortoise-chunk") != self.chunk:
            return False
        if self.model is not None and (body or {}).get("model") != self.model:
            return False
        prompt = _prompt_text(body)
        return all(s in prompt for s in self.contains)

    def take(self) -> dict[str, Any] | None:
        if not self.replies:
            return None
        if self.served >= len(self.replies) and not self.cycle:
            return None
        reply = self.replies[self.served % len(self.replies)]
        self.served += 1
        return reply


def load_script(script: str | Path | list[Any] | dict[str, Any]) -> dict[str, Any]:
    """Read a script from a JSON file path, a list of replies, or a dict; normalised to ``{"routes": [...]}``."""
    if isinstance(script, (str, Path)):
        script = json.loads(Path(script).read_text(encoding="utf-8"))
    if isinstance(script, list):
        script = {"routes": [{"replies": script}]}
    if not isinstance(script, dict) or not isinstance(script.get("routes"), list):
        raise ValueError("a stub script is a list of replies or a dict with a 'routes' list")
    return script


def _build_routes(script: dict[str, Any]) -> list[_Route]:
    routes = []
    for spec in script["routes"]:
        contains = spec.get("contains", ())
        routes.append(
            _Route(
                replies=list(spec.get("replies", [])),
                stage=spec.get("stage"),
                chunk=None if spec.get("chunk") is None else str(spec["chunk"]),
                model=spec.get("model"),
                contains=(contains,) if isinstance(contains, str) else tuple(contains),
                cycle=bool(spec.get("cycle", False)),
            )
        )
    return routes


def _prompt_text(body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    parts = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


class StubModel:
    """A threaded HTTP server answering chat completions from a script.

    Args:
        script: a JSON file path, a list of replies, or a ``{"routes": [...]}`` dict.
        port: 0 picks a free port; recording cassettes uses a fixed one.
        host: the loopback address to bind.
        delay: seconds added before every reply (benchmarks).
        responder: answers a request no route has a reply for (see the module docstring).
    """

    def __init__(
        self,
        script: str | Path | list[Any] | dict[str, Any],
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        delay: float = 0.0,
        responder: Callable[[StubRequest], dict[str, Any] | None] | None = None,
    ) -> None:
        self._routes = _build_routes(load_script(script))
        self.responder = responder
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[StubRequest] = []
        self._unanswered: list[StubRequest] = []
        self.delay = delay
        self._server = ThreadingHTTPServer((host, port), _make_handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._counter = 0

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The ``api_base`` to hand litellm: ``http://127.0.0.1:<port>/v1``."""
        return f"http://{self._server.server_address[0]}:{self.port}/v1"

    @property
    def requests(self) -> list[StubRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def unanswered(self) -> list[StubRequest]:
        """Requests that no route had a reply left for."""
        with self._lock:
            return list(self._unanswered)

    def remaining(self) -> int:
        """Replies not yet served by non-cycling routes."""
        with self._lock:
            return sum(max(0, len(r.replies) - r.served) for r in self._routes if not r.cycle)

    def start(self) -> StubModel:
        """Serve in a background thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="stub-model", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake delayed replies, and release the port."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> StubModel:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted."""
        self._server.serve_forever()

    def _answer(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            index, reply = None, None
            for i, route in enumerate(self._routes):
                if route.matches(headers, body):
                    reply = route.take()
                    if reply is not None:
                        index = i
                        break
            request = StubRequest(method, path, headers, body, raw, index)
            self._requests.append(request)
            if reply is None and self.responder is not None:
                reply = self.responder(request)
            if reply is None:
                self._unanswered.append(request)
            self._counter += 1
            serial = self._counter
        if path in _EMBED_PATHS:
            wait = self.delay + float((reply or {}).get("delay", 0.0))
            if wait > 0:
                self._stopping.wait(wait)
            return _embeddings(reply, body)
        if reply is None:
            _log.warning("stub script exhausted: stage=%s chunk=%s", request.stage, request.chunk)
            return _error(400, "stub script exhausted: no reply left for this request", "invalid_request_error")
        wait = self.delay + float(reply.get("delay", 0.0))
        if wait > 0:
            self._stopping.wait(wait)
        if reply.get("drop"):
            return _DROP, {}, b""
        return _render(reply, body, serial)


def toy_embedding(text: str, dims: int = EMBED_DIMS) -> list[float]:
    """A deterministic unit vector: each ``TOY_CONCEPTS`` word adds to its concept's axis, other words hash.

    Texts sharing a concept (``snacks`` and ``peanuts``) come out close with no word in common.
    """
    import hashlib
    import math
    import re

    vector = [0.0] * dims
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        axis = next((i for i, words in enumerate(TOY_CONCEPTS) if word in words), None)
        if axis is None:
            axis = len(TOY_CONCEPTS) + int(hashlib.sha256(word.encode()).hexdigest(), 16) % (dims - len(TOY_CONCEPTS))
            vector[axis] += 0.3
        else:
            vector[axis] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [round(x / norm, 6) for x in vector] if any(vector) else [1.0] + [0.0] * (dims - 1)


def _embeddings(reply: dict[str, Any] | None, body: Any) -> tuple[int, dict[str, str], bytes]:
    """An OpenAI embeddings reply: a scripted fault, or ``toy_embedding`` of each input."""
    if reply is not None and "status" in reply:
        return _render(reply, body, 0)
    texts = (body or {}).get("input") or []
    texts = [texts] if isinstance(texts, str) else texts
    data = [{"object": "embedding", "index": i, "embedding": toy_embedding(str(t))} for i, t in enumerate(texts)]
    tokens = sum(max(1, len(str(t)) // 4) for t in texts)
    payload = {"object": "list", "data": data, "model": (body or {}).get("model", DEFAULT_STUB_MODEL),
               "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    return 200, {"Content-Type": "application/json"}, json.dumps(payload).encode()


def _error(
    status: int, message: str, kind: str, extra: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    payload = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    headers = {"Content-Type": "application/json", **(extra or {})}
    return status, headers, json.dumps(payload).encode()


#: The status ``_answer`` gives a ``{"drop": true}`` reply: the handler closes the connection, answering nothing.
_DROP = 0

_ERROR_TYPES = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("invalid_api_key", "Incorrect API key provided."),
    402: ("insufficient_quota", "You exceeded your current quota, please check your plan and billing details."),
    403: ("permission_denied", "You are not allowed to use this model."),
    404: ("model_not_found", "The model does not exist or you do not have access to it."),
    429: ("rate_limit_exceeded", "Rate limit reached for requests. Please try again shortly."),
    500: ("server_error", "The server had an error while processing your request."),
    502: ("server_error", "Bad gateway."),
    503: ("server_error", "The engine is currently overloaded, please try again later."),
}


def _render(reply: dict[str, Any], body: Any, serial: int) -> tuple[int, dict[str, str], bytes]:
    status = int(reply.get("status", 200))
    extra = {str(k): str(v) for k, v in (reply.get("headers") or {}).items()}
    if "raw" in reply:
        return status, {"Content-Type": "application/json", **extra}, str(reply["raw"]).encode()
    if status != 200:
        kind, message = _ERROR_TYPES.get(status, ("server_error", f"HTTP {status}"))
        if "retry_after" in reply:
            extra["Retry-After"] = str(reply["retry_after"])
        return _error(status, str(reply.get("error", message)), str(reply.get("code", kind)), extra)
    content = reply.get("content", "")
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    model = (body or {}).get("model") or DEFAULT_STUB_MODEL
    payload: dict[str, Any] = {
        "id": f"chatcmpl-stub-{serial}",
        "object": "chat.completion",
        "created": 1_700_000_000 + serial,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": reply.get("finish_reason", "stop"),
            }
        ],
    }
    if "usage" not in reply:
        prompt_tokens = max(1, len(_prompt_text(body)) // 4)
        completion_tokens = max(1, len(content) // 4)
        payload["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    elif reply["usage"] is not None:
        usage = dict(reply["usage"])
        usage.setdefault("total_tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
        payload["usage"] = usage
    return 200, {"Content-Type": "application/json", **extra}, json.dumps(payload, ensure_ascii=False).encode()


def _make_handler(stub: StubModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "tortoise-stub/1"
        sys_version = ""

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0]
            headers = {k.lower(): v for k, v in self.headers.items()}
            if path not in _PATHS + _EMBED_PATHS:
                self._send(*_error(404, f"no route {path}; use POST /v1/chat/completions", "not_found"))
                return
            self._send(*stub._answer("POST", path, headers, raw))

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                payload = {"object": "list", "data": [{"id": DEFAULT_STUB_MODEL, "object": "model"}]}
                self._send(200, {"Content-Type": "application/json"}, json.dumps(payload).encode())
                return
            self._send(*_error(404, f"no route {self.path}", "not_found"))

        def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
            if status == _DROP:
                self.close_connection = True
                return
            try:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                _log.debug("client went away before the reply (timeout fault)")

        def log_message(self, format: str, *args: Any) -> None:
            _log.debug("%s " + format, self.address_string(), *args)

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Run the stub in the foreground: ``python tests/stub_model.py --script FILE --port N``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", required=True, help="JSON script file")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds added to every reply")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    stub = StubModel(args.script, port=args.port, host=args.host, delay=args.delay)
    _log.info("stub model serving %s (script %s)", stub.base_url, args.script)
    try:
        stub.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stub._server.server_close()


if __name__ == "__main__":
    main()
