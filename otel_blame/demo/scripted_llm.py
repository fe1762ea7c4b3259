"""A scripted OpenAI-compatible server on loopback: chat completions, and the Responses API.

No LLM is reachable in tests or in the offline demo, so this stands in for the provider: the
real ``openai`` client (and every framework built on it) talks HTTP to it exactly as to a real
endpoint. Each request is answered by a *script*: a list of replies consumed in order, or a
function of the request. A reply is text, a :class:`Reply` (text, tool calls, HTTP status,
delay, raw body) or an exception-like HTTP error.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer. ``status`` other than 200 answers with an OpenAI-style error."""

    content: str | None = ""
    tool_calls: list[dict[str, Any]] | None = None
    status: int = 200
    delay_seconds: float = 0.0
    raw_body: bytes | None = None  # sent as is, for malformed-response tests
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


Script = Callable[[dict[str, Any]], "Reply | str"]


class _QuietServer(ThreadingHTTPServer):
    """A client that gave up (a timeout test) closes the socket mid-reply; that is not an error here."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _count_tokens(text: str) -> int:
    """A rough, deterministic token count (about four characters a token)."""
    return max(1, len(text) // 4)


def _prompt_text(request: dict[str, Any]) -> str:
    """The request's text: chat completions' ``messages``, or the Responses API's ``input``."""
    parts: list[str] = []
    items = request.get("messages") or request.get("input") or []
    if isinstance(items, str):
        items = [{"content": items}]
    for message in items:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


def _arguments_json(call: dict[str, Any]) -> str:
    arguments = call["arguments"]
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


class ScriptedLLM:
    """Run with ``with ScriptedLLM(replies) as llm:``; point clients at ``llm.base_url``."""

    def __init__(
        self,
        script: Iterable[Reply | str] | Script,
        model: str = "scripted-model",
        host: str = "127.0.0.1",
        port: int = 0,
        default: Reply | str | None = None,
    ) -> None:
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._default = default
        if callable(script):
            self._script: Script | None = script
            self._queue: list[Reply | str] = []
        else:
            self._script = None
            self._queue = list(script)
        self._server = _QuietServer((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ScriptedLLM:
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting -----------------------------------------------------------------------
    def push(self, *replies: Reply | str) -> None:
        with self._lock:
            self._queue.extend(replies)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._script is not None:
                reply: Reply | str | None = self._script(request)
            elif self._queue:
                reply = self._queue.pop(0)
            else:
                reply = self._default
        if reply is None:
            return Reply(status=500, content="scripted LLM: script exhausted")
        return Reply(content=reply) if isinstance(reply, str) else reply

    def _completion_body(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        finish_reason = "stop"
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.get("id", f"call_{uuid.uuid4().hex[:12]}"),
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": _arguments_json(call),
                    },
                }
                for call in reply.tool_calls
            ]
            finish_reason = "tool_calls"
        prompt_tokens = reply.prompt_tokens or _count_tokens(_prompt_text(request))
        completion_tokens = reply.completion_tokens or _count_tokens(reply.content or "")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _response_body(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """The same reply as a Responses API ``response`` object (``POST /responses``)."""
        output: list[dict[str, Any]] = []
        if reply.content:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{uuid.uuid4().hex}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.content, "annotations": []}],
                }
            )
        for call in reply.tool_calls or []:
            call_id = call.get("id", f"call_{uuid.uuid4().hex[:12]}")
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{call_id}",
                    "call_id": call_id,
                    "name": call["name"],
                    "arguments": _arguments_json(call),
                    "status": "completed",
                }
            )
        input_tokens = reply.prompt_tokens or _count_tokens(_prompt_text(request))
        output_tokens = reply.completion_tokens or _count_tokens(reply.content or "")
        return {
            "id": f"resp_{uuid.uuid4().hex}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": request.get("model") or self.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": request.get("tools", []),
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        }

    def _stream_chunks(self, body: dict[str, Any]) -> Iterable[bytes]:
        choice = body["choices"][0]
        base = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        delta = {"role": "assistant", "content": choice["message"]["content"]}
        if "tool_calls" in choice["message"]:
            delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(choice["message"]["tool_calls"])]
        first = base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        last = base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}
        last["usage"] = body["usage"]
        for chunk in (first, last):
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes; without TCP_NODELAY, Nagle plus the
            # client's delayed ACK stall every response by ~40 ms.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence
                return

            def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                if self.path.rstrip("/").endswith("/models"):
                    body = {
                        "object": "list",
                        "data": [{"id": llm.model, "object": "model", "owned_by": "otel-blame"}],
                    }
                    self._send(200, json.dumps(body).encode())
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                path = self.path.rstrip("/")
                responses_api = path.endswith("/responses")
                if not (responses_api or path.endswith("/chat/completions")):
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                try:
                    request = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, b'{"error": {"message": "invalid JSON body"}}')
                    return
                if responses_api and request.get("stream"):
                    self._send(400, b'{"error": {"message": "scripted LLM: no streamed Responses API"}}')
                    return
                reply = llm._next_reply(request)
                if reply.delay_seconds:
                    time.sleep(reply.delay_seconds)
                if reply.raw_body is not None:
                    self._send(reply.status, reply.raw_body, reply.headers)
                    return
                if reply.status != 200:
                    error = {
                        "error": {
                            "message": reply.content or "scripted error",
                            "type": "scripted",
                            "code": reply.status,
                        }
                    }
                    self._send(reply.status, json.dumps(error).encode(), reply.headers)
                    return
                if responses_api:
                    self._send(200, json.dumps(llm._response_body(request, reply)).encode(), reply.headers)
                    return
                body = llm._completion_body(request, reply)
                if request.get("stream"):
                    payload = b"".join(llm._stream_chunks(body))
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self._send(200, json.dumps(body).encode(), reply.headers)

        return Handler
