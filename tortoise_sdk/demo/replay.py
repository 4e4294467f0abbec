"""A tiny OpenAI-compatible server on 127.0.0.1 that serves recorded replies (for ``tortoise demo``).

It lets the demo run the real extraction path (litellm's ``openai/<name>`` route
over HTTP) with no provider and no network. Replies are chosen by the request's
``X-Tortoise-Stage`` / ``X-Tortoise-Chunk`` headers and a substring of the
prompt, in the script format of ``tests/stub_model.py``::

    {"routes": [{"stage": "s2", "contains": "Northwind", "replies": [{"content": {...}}]}]}

Only content replies are served here (faults are for tests).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ("ReplayServer",)


class ReplayServer:
    """Serve recorded chat-completion replies until stopped; use as a context manager.

    Args:
        script: ``{"routes": [...]}``; each route may name ``stage``, ``chunk``,
            ``contains`` (str or list) and holds ``replies`` served in order.
    """

    def __init__(self, script: dict[str, Any], *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._routes = [dict(r, served=0) for r in script["routes"]]
        self._lock = threading.Lock()
        self.requests = 0
        self.unanswered = 0
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The ``api_base`` for litellm."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ReplayServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="tortoise-replay", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The reply for one request: ``(status, JSON payload)``."""
        prompt = "\n".join(m.get("content") or "" for m in body.get("messages", []) if isinstance(m, dict))
        with self._lock:
            self.requests += 1
            for route in self._routes:
                contains = route.get("contains", ())
                contains = [contains] if isinstance(contains, str) else contains
                if route.get("stage") not in (None, headers.get("x-tortoise-stage")):
                    continue
                if route.get("chunk") is not None and str(route["chunk"]) != headers.get("x-tortoise-chunk"):
                    continue
                if not all(c in prompt for c in contains) or route["served"] >= len(route["replies"]):
                    continue
                reply = route["replies"][route["served"]]
                route["served"] += 1
                break
            else:
                self.unanswered += 1
                return 400, {"error": {"message": "no recorded reply for this request (the prompt changed?)",
                                       "type": "invalid_request_error", "code": "no_recording"}}
        content = reply.get("content", "")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        usage = reply.get("usage") or {"prompt_tokens": max(1, len(prompt) // 4),
                                       "completion_tokens": max(1, len(content) // 4)}
        usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
        return 200, {
            "id": f"chatcmpl-replay-{self.requests}", "object": "chat.completion", "created": 1_700_000_000,
            "model": body.get("model", "recorded"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": reply.get("finish_reason", "stop")}],
            "usage": usage,
        }


def _handler(server: ReplayServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            status, payload = server.answer({k.lower(): v for k, v in self.headers.items()}, body)
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

    return Handler
