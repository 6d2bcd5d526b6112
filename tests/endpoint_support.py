"""A small OpenAI-compatible HTTP server for the endpoint engine's tests: deterministic answers
(a hash of the prompt, like the fake engine) and scripted faults, one per request as they come.

Faults: "429" (with Retry-After), "400" (a field the server refuses), "500", "timeout" (answers
only after `hang_s`), "truncated" (a body shorter than its Content-Length, then the connection
closes), "drop" (the connection closes without an answer), "garbage" (HTTP 200 with a body that
is not JSON). `down = True`
answers 503 to every request until set back. With `context_words`, a prompt of more words than
that is refused as vLLM's server refuses a prompt longer than its context (HTTP 400).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def answer(text: str) -> str:
    """The completion this server gives for a prompt text."""
    return "The answer is " + str(int(hashlib.sha256(text.encode()).hexdigest()[:6], 16) % 97)


def prompt_key(body: dict[str, Any]) -> str:
    if "messages" in body:
        return "\n".join(m["content"] for m in body["messages"])
    return json.dumps(body.get("prompt"))


def token_logprob(ids: list[int], position: int) -> float:
    digest = hashlib.sha256(json.dumps(ids[: position + 1]).encode()).hexdigest()
    return -(1 + int(digest[:6], 16) % 500) / 100


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default 5 drops the SYNs of a burst of connections


class FaultServer:
    """Serves /v1/models, /v1/chat/completions and /v1/completions on a loopback port."""

    def __init__(
        self,
        *,
        model: str = "tiny-random-llama",
        faults: Iterable[str] = (),
        retry_after: str = "1",
        hang_s: float = 3.0,
        delay_s: float = 0.0,
        api_key: str | None = None,
        echo_logprobs: bool = True,
        script: dict[str, str] | None = None,
        reasoning_field: str | None = None,
        context_words: int | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> None:
        self.model = model
        self.context_words = context_words
        self.faults = deque(faults)
        self.retry_after = retry_after
        self.hang_s = hang_s
        self.delay_s = delay_s
        self.api_key = api_key
        self.echo_logprobs = echo_logprobs
        # Scripted answers: the first entry whose key occurs in the prompt (a judge's verdicts).
        self.script = dict(script or {})
        # A server that keeps reasoning apart (vLLM's --reasoning-parser): a chat answer's
        # <think>…</think> goes to this message field; one never closed is cut off (no content,
        # finish_reason "length"). None: the content carries it.
        self.reasoning_field = reasoning_field
        # The message.tool_calls of every chat answer to a request that offers tools.
        self.tool_calls = tool_calls
        self.down = False
        self.bodies: list[dict[str, Any]] = []  # every generation/scoring request body
        self.outcomes: Counter[str] = Counter()  # fault name or "ok", per request
        self.answered: Counter[str] = Counter()  # prompt key → successful answers
        self.times: dict[str, list[float]] = {}  # prompt key → arrival times
        self.disconnects = 0  # answers that found the client gone
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next_fault(self) -> str:
        with self._lock:
            if self.down:
                return "down"
            return self.faults.popleft() if self.faults else "ok"

    def answer_for(self, key: str) -> str:
        return next((a for k, a in self.script.items() if k in key), None) or answer(key)

    def reply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        key = prompt_key(body)
        if path.endswith("/chat/completions"):
            choices = [self.chat_choice(i, self.answer_for(key)) for i in range(body.get("n", 1))]
            if body.get("tools") and self.tool_calls is not None:
                for choice in choices:
                    choice["message"] |= {"content": None, "tool_calls": self.tool_calls}
                    choice["finish_reason"] = "tool_calls"
        elif body.get("echo"):
            ids = body["prompt"]
            logprobs = None
            if self.echo_logprobs:
                values = [None] + [token_logprob(ids, p) for p in range(1, len(ids))]
                logprobs = {"token_logprobs": values, "tokens": [str(i) for i in ids]}
            choices = [{"index": 0, "text": "", "logprobs": logprobs}]
        else:
            choices = [{"index": i, "text": self.answer_for(key)} for i in range(body.get("n", 1))]
        words = len(self.answer_for(key).split())
        usage = {"prompt_tokens": len(key.split()), "completion_tokens": words * len(choices)}
        return {"object": "chat.completion", "choices": choices, "usage": usage}

    def chat_choice(self, index: int, text: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "stop"
        if self.reasoning_field is not None and text.startswith("<think>"):
            reasoning, closed, content = text.removeprefix("<think>").partition("</think>")
            message = {"role": "assistant", self.reasoning_field: reasoning}
            message["content"] = content if closed else None
            finish = "stop" if closed else "length"
        return {"index": index, "message": message, "finish_reason": finish}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _send(self, status: int, data: Any, headers: dict[str, str] | None = None):
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

            def _authorised(self) -> bool:
                if server.api_key is None:
                    return True
                if self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return True
                self._send(401, {"error": {"message": "Invalid API key"}})
                return False

            def do_GET(self) -> None:
                if not self._authorised():
                    return
                if self.path == "/v1/models":
                    self._send(200, {"data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "Not Found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                if not self._authorised():
                    return
                if body.get("model") != server.model:
                    self._send(
                        404,
                        {"error": {"message": f"The model `{body.get('model')}` does not exist."}},
                    )
                    return
                key = prompt_key(body)
                words = server.context_words
                fault = "context" if words and len(key.split()) > words else server._next_fault()
                with server._lock:
                    server.bodies.append(body)
                    server.outcomes[fault] += 1
                    server.times.setdefault(key, []).append(time.monotonic())
                try:
                    self._fault(fault, key, body)
                except (BrokenPipeError, ConnectionResetError):
                    with server._lock:
                        server.disconnects += 1

            def _fault(self, fault: str, key: str, body: dict[str, Any]) -> None:
                if fault == "down":
                    self._send(503, {"error": {"message": "Service Unavailable"}})
                elif fault == "429":
                    headers = {"Retry-After": server.retry_after}
                    self._send(429, {"error": {"message": "Too Many Requests"}}, headers)
                elif fault == "400":
                    self._send(400, {"error": {"message": "Unrecognized request argument: top_k"}})
                elif fault == "context":
                    message = (
                        f"This model's maximum context length is {server.context_words} tokens. "
                        f"However, your prompt contains {len(key.split())} input tokens, which "
                        "exceeds this limit even without any output tokens."
                    )
                    self._send(400, {"error": {"message": message, "type": "BadRequestError"}})
                elif fault == "500":
                    self._send(500, {"error": {"message": "Internal Server Error"}})
                elif fault == "drop":
                    self.close_connection = True
                elif fault == "truncated":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b'{"choices": [')
                    self.wfile.flush()
                    self.close_connection = True
                elif fault == "garbage":
                    raw = b"<html>proxy error</html>"
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                else:
                    time.sleep(server.hang_s if fault == "timeout" else server.delay_s)
                    self._send(200, server.reply(self.path, body))
                    if fault == "ok":
                        with server._lock:
                            server.answered[key] += 1

        return Handler
