"""An OpenAI-compatible Chat Completions server on 127.0.0.1 that serves scripted replies.

It shapes replies the way DeepSeek does (ids, finish_reason, usage with prompt_cache_hit_tokens,
reasoning_content) and checks every request it receives the way a strict provider would: the
messages validate against the SDK's own ChatCompletionMessageParam, every assistant message with
tool calls is followed by exactly one tool message per id, reasoning_content comes back wherever
a reply carried it, each request's messages begin with the previous request's messages byte for
byte (append only, across --chat turns and --continue runs too: a prefix cache compares the bytes
sent), and the Authorization header carries the expected key. What it finds wrong is kept in
`problems` and answered with a 400, as DeepSeek would answer it.

A request with `"stream": true` gets the same reply as server-sent events, shaped like
DeepSeek's stream (reasoning deltas, content deltas, tool-call deltas split over several chunks,
usage in a last chunk without choices, `data: [DONE]`); a `Streamed` script item picks one of
the quirky shapes other servers send, or holds, cuts or breaks the stream. The checks above run
for streamed requests alike. A `Billed` script item stamps a reply with a chosen time and token
counts, so a test knows to the token what the reply cost.

With a window (window=N tokens) it plays each server's context window: it answers the server's
own window endpoint (llama.cpp's GET /props, Ollama's POST /api/show, vLLM's GET /v1/models,
LM Studio's GET /api/v0/models), and a request whose tokens (counted as for usage: a quarter of
its bytes) exceed the window gets that server's overflow error, or, from Ollama, is cut silently
as Ollama cuts it. With compactions_allowed, a request may start a new prefix (a compacted
conversation, keeping the system prompt) and later ones must extend that; a request without
tools is then a side request (the compaction's summary) outside the conversation.

Used by the tests, tests/benchmark.py and tests/make_example.py; standard library plus pydantic
(which the openai SDK brings).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fake_model import reply, tool_call
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter, ValidationError

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
REASONING_FIELDS = ("reasoning_content", "reasoning")  # DeepSeek's name, vLLM's and Ollama's


@dataclass
class Fail:
    """A scripted error answer instead of a reply."""

    status: int
    message: str = "scripted failure"
    headers: dict = field(default_factory=dict)


@dataclass
class Streamed:
    """A scripted reply, streamed in a given shape when the request asks for a stream.

    shape: "deepseek" (the default for any reply), "no_index" (tool-call deltas without index:
    whole calls in one chunk, as Gemini sends them), "fragments_no_index" (fragments without
    index, only the first with an id, as old Ollama sends them), "repeated" (id, type and name
    repeated on every delta, as some proxies do), "usage_on_finish" (usage rides on the finish
    chunk, no usage-only chunk).
    hold: the stream waits for this event after the first reasoning chunk (or the first chunk).
    keepalive: a ": keep-alive" comment line between chunks.
    end: "done" (finish_reason, usage, [DONE]), "error" (an {"error": ...} event after the
    first chunk), "cut" ([DONE] without any finish_reason), "drop" (the connection closes in
    the middle of the chunked body), "stall" (nothing more; held open until stall is set).
    """

    message: dict
    shape: str = "deepseek"
    hold: threading.Event | None = None
    keepalive: bool = False
    end: str = "done"
    stall: threading.Event = field(default_factory=threading.Event)


@dataclass
class Billed:
    """A scripted reply (a message dict, a function of the request, or a Streamed) with what a
    bill is made from: the time stamped on it (`created`, Unix seconds, UTC) and its usage's
    cache-hit, cache-miss and completion tokens, whatever the request's size (prompt_tokens is
    hit + miss). Without it, a reply is stamped now and counted from the request."""

    item: object
    created: int
    hit: int = 0
    miss: int = 0
    completion: int = 0

    def stamp(self, completion: dict) -> dict:
        """completion with this time and these counts, in DeepSeek's usage shape."""
        completion["created"] = self.created
        completion["usage"] = {
            "prompt_tokens": self.hit + self.miss,
            "completion_tokens": self.completion,
            "total_tokens": self.hit + self.miss + self.completion,
            "prompt_cache_hit_tokens": self.hit,
            "prompt_cache_miss_tokens": self.miss,
        }
        return completion


def sent_messages(body: bytes) -> bytes:
    """The bytes of a request body's messages array, exactly as they were sent."""
    text = body.decode("utf-8")
    if '"messages":' not in text:
        return b""
    start = text.index('"messages":') + len('"messages":')
    start += len(text[start:]) - len(text[start:].lstrip())
    _, end = json.JSONDecoder().raw_decode(text, start)
    return text[start:end].encode("utf-8")


def extends(messages: bytes, previous: bytes) -> bool:
    """Whether a messages array (as sent) begins with all of an earlier one's messages."""
    if previous == b"[]":
        return True
    head = previous[:-1]  # without its closing "]"
    return messages.startswith(head) and messages[len(head) : len(head) + 1] in (b",", b"]")


def check_messages(messages: object, served: list[dict], previous: list | None) -> list[str]:
    """What a strict provider would reject in a request's messages (empty list: nothing)."""
    problems = check_arguments(messages) if isinstance(messages, list) else []
    try:
        for message in MESSAGES.validate_python(messages):
            list(message.get("tool_calls") or [])  # nested tool calls validate only when iterated
    except ValidationError as error:
        return [f"messages do not validate: {error}"]
    if previous is not None and messages[: len(previous)] != previous:
        problems.append("the history was rewritten: this request does not extend the last one")
    pending: list[str] = []
    assistants = 0
    for index, message in enumerate(messages):
        role = message["role"]
        if pending and role != "tool":
            problems.append(f"message {index}: tool calls {pending} were not answered before it")
            pending = []
        if role == "tool":
            if not pending or message["tool_call_id"] != pending[0]:
                problems.append(
                    f"message {index}: Messages with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls' (expected {pending[:1]})"
                )
            else:
                pending.pop(0)
        if role == "assistant":
            if "content" not in message:
                problems.append(f"message {index}: assistant message without 'content'")
            ids = [call["id"] for call in message.get("tool_calls") or []]
            if len(set(ids)) != len(ids):
                problems.append(f"message {index}: duplicate tool call ids {ids}")
            pending = ids
            # A reply the server served comes back with its text; a note the agent wrote
            # itself (a turn that got no reply) is no served reply, and is passed over.
            if assistants < len(served) and same_text(message, served[assistants]):
                sent_back = served[assistants]
                for name in ("reasoning_content", "reasoning"):  # DeepSeek's name, vLLM's name
                    if name in sent_back and message.get(name) != sent_back[name]:
                        problems.append(
                            f"Missing `{name}` field in the assistant message at message "
                            f"index {index} (it must be passed back as it was sent)"
                        )
                assistants += 1
            elif assistants >= len(served):
                assistants += 1
    if pending:
        problems.append(f"the last tool calls {pending} were not answered")
    return problems


def same_text(message: dict, served: dict) -> bool:
    """Whether an assistant message of a request is the served reply (its text, "" for null)."""
    return (message.get("content") or "") == (served.get("content") or "")


def alternation_problems(messages: object) -> list[str]:
    """What a server with strict turns (Gemma's chat template) refuses: two user messages in a
    row."""
    if not isinstance(messages, list):
        return []
    roles = [message.get("role") for message in messages if isinstance(message, dict)]
    return [
        f"message {index}: Conversation roles must alternate user/assistant/user/assistant/..."
        for index in range(1, len(roles))
        if roles[index] == roles[index - 1] == "user"
    ]


def check_arguments(messages: list) -> list[str]:
    """llama.cpp parses the history's tool-call arguments: each must be a JSON object's text."""
    problems = []
    for index, message in enumerate(messages):
        for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
            arguments = call.get("function", {}).get("arguments")
            try:
                parsed = json.loads(arguments) if isinstance(arguments, str) else None
            except json.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                problems.append(
                    f"message {index}: Failed to parse tool call arguments as JSON: {arguments!r}"
                )
    return problems


# How each kind of server differs from DeepSeek (see the README's table of servers):
# "llamacpp" answers a bad history with 500, names its own model whatever was asked for, and
# (with Mistral templates) accepts only tool-call ids of 9 letters and digits; "ollama"
# rejects assistant content null with a 400.
SERVERS = ("deepseek", "llamacpp", "ollama", "vllm", "lmstudio")
NINE_LETTERS_AND_DIGITS = re.compile(r"[A-Za-z0-9]{9}")


class StubServer:
    """`with StubServer(script) as server:` serves on server.url until the block ends.

    A script item is an assistant message dict, a function of the request body returning one,
    a Streamed, a Billed or a Fail. After the script, every request gets a 500 and counts as a
    problem.
    """

    def __init__(
        self,
        script: list,
        api_key: str = "test-key",
        cache: bool = True,
        server: str = "deepseek",
        *,
        window: int | None = None,
        ollama_truncates: bool = True,
        num_ctx_in_parameters: bool = True,
        trained: int | None = None,
        compactions_allowed: bool = False,
        model: str = "deepseek-flash",
        strict_turns: bool = False,
    ) -> None:
        """window: the context window in tokens (None: no window, no window endpoint).
        ollama_truncates: Ollama cuts a long prompt silently (its default); False: it answers
        400, as with context shift off. num_ctx_in_parameters: Ollama's /api/show has num_ctx
        in its parameters (else only the trained length, which is then the window).
        trained: the trained length Ollama's /api/show gives in model_info (default: 4 x the
        window with num_ctx in the parameters, else the window); larger than the window
        without num_ctx, it plays Ollama run with its default window, which the agent cannot
        learn (the server then cuts the conversation silently).
        compactions_allowed: a request may start a new prefix (see the module's docstring).
        model: the id the model lists give (vLLM, LM Studio).
        strict_turns: refuse two user messages in a row, in the conversation and in side
        requests, as Gemma's chat template does (a problem: the agent must not send that)."""
        assert server in SERVERS, server
        self.server = server
        self.window = window
        self.ollama_truncates = ollama_truncates
        self.num_ctx_in_parameters = num_ctx_in_parameters
        self.trained = trained
        self.compactions_allowed = compactions_allowed
        self.model = model
        self.strict_turns = strict_turns
        self.probes: list[dict] = []  # every window-endpoint request: method, path, headers
        self.compactions: list[int] = []  # the numbers (from 1) of requests that began anew
        self.side_requests: list[dict] = []  # requests without tools (summaries), not in the
        # conversation's sequence
        self.truncated: list[int] = []  # Ollama: messages dropped from each request it cut
        self.served_from = 0  # served[served_from:] are the assistant messages of the current
        # prefix (after a compaction, the earlier ones are summarised away)
        self.rejected: list[str] = []  # what the server refused as that server does (not bugs)
        self.script = list(script)
        self.api_key = api_key
        self.requests: list[dict] = []  # every request body that passed the key check
        self.received: list[dict] = []  # every chat completion request body, side requests and
        # refused ones too, in the order they came
        self.answered: list[dict] = []  # every chat completion answered (before a stream's
        # chunks are made of it), in order
        self.sizes: list[int] = []  # every request body's size in bytes
        self.sent: list[bytes] = []  # every request's messages array, byte for byte
        self.problems: list[str] = []
        self.headers: list[dict] = []  # every request's headers, names in lower case
        self.served: list[dict] = []  # the assistant messages served, in order
        self.first_thinking_sent: list[float] = []  # perf_counter() as each stream's first
        # reasoning chunk left the server
        self.streams: list[Streamed] = []  # every stream being served, to release stalls
        self.lock = threading.Lock()
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.cache = cache

    def __enter__(self) -> StubServer:
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        for stream in self.streams:
            stream.stall.set()
            if stream.hold:
                stream.hold.set()
        self.http.shutdown()
        self.http.server_close()

    def answer(self, path: str, headers, body: bytes) -> tuple[int, dict, dict | Streamed]:
        """(status, headers, JSON body or the Streamed plan) for one request."""
        if path.rstrip("/").endswith("/api/show"):
            return self.window_endpoint("POST", path, headers, body)
        self.headers.append({name.lower(): value for name, value in headers.items()})
        if not path.endswith("/chat/completions"):
            return 404, {}, error_body(f"no route {path}", "not_found")
        if headers.get("Authorization") != f"Bearer {self.api_key}":
            message = "Authentication Fails, Your api key is invalid"
            return 401, {}, error_body(message, "authentication_error")
        with self.lock:
            request = json.loads(body)
            self.received.append(request)
            self.sizes.append(len(body))
            if self.compactions_allowed and not request.get("tools"):
                return self.side_request(request)
            previous = self.requests[-1]["messages"] if self.requests else None
            served_from = self.served_from
            restart = self.begins_anew(request.get("messages"), sent_messages(body))
            if restart:
                previous = None
            self.requests.append(request)
            served = self.served[self.served_from :]
            problems = check_messages(request.get("messages"), served, previous)
            if self.strict_turns:
                problems += alternation_problems(request.get("messages"))
            self.sent.append(sent_messages(body))
            if restart:
                problems += restart if isinstance(restart, list) else []
            elif len(self.sent) > 1 and not extends(self.sent[-1], self.sent[-2]):
                problems.append(
                    "this request's messages do not begin with the last request's messages byte "
                    "for byte (a prefix cache would miss)"
                )
            if not request.get("model") or not request.get("tools"):
                problems.append("the request has no model or no tools")
            if self.server == "llamacpp":
                problems += [
                    f"tool call id {call['id']!r} is not 9 letters and digits (Mistral templates)"
                    for message in request["messages"]
                    for call in message.get("tool_calls") or []
                    if not NINE_LETTERS_AND_DIGITS.fullmatch(call["id"])
                ]
            if problems:
                self.problems += problems
                status = 500 if self.server == "llamacpp" else 400
                return status, {}, error_body("; ".join(problems), "invalid_request_error")
            if self.server == "ollama" and any(
                m["role"] == "assistant" and m["content"] is None for m in request["messages"]
            ):
                self.refuse("content null", restart, served_from)  # as Ollama refuses it
                return 400, {}, error_body("invalid message content type: <nil>", "api_error")
            counted = prompt_tokens(request)
            if self.window and counted + self.completion_room(request) > self.window:
                if self.server == "ollama" and self.ollama_truncates:
                    counted = self.cut(request)
                else:
                    self.refuse("context overflow", restart, served_from)
                    return self.overflow(counted, request)
            late = f"request {len(self.requests)} came after the script's end"
            failed, message, billed, streamed = self.next_reply(request, late)
            if failed:
                return failed
            self.served.append(message)
            cached = len(json.dumps(previous)) // 4 if previous and self.cache else 0
            answer = chat_completion(message, len(self.requests), counted, cached)
            if billed:
                billed.stamp(answer)
            # llama.cpp in single-model mode answers as its own model, whatever was asked for.
            answer["model"] = "gemma-3-270m.gguf" if self.server == "llamacpp" else request["model"]
            self.answered.append(answer)
            if not request.get("stream"):
                return 200, {}, answer
            streamed.message = answer
            self.streams.append(streamed)
            return 200, {}, streamed

    def refuse(self, reason: str, restart: object, served_from: int) -> None:
        """A request refused as the server refuses it (no bug): the next one is not its sequel."""
        self.rejected.append(reason)
        self.requests.pop()
        self.sent.pop()
        if restart:  # nor did it begin a new prefix
            self.compactions.pop()
            self.served_from = served_from

    def begins_anew(self, messages: object, sent: bytes) -> bool | list[str]:
        """With compactions_allowed, whether a request starts a new prefix rather than extending
        the last request (False: it is judged as any other request): True, or the problems of a
        new prefix that drops the system prompt. The reasoning fields are then checked against
        the last replies served, as many as the request has assistant messages."""
        if not (self.compactions_allowed and self.sent and isinstance(messages, list)):
            return False
        if extends(sent, self.sent[-1]):
            return False
        self.compactions.append(len(self.requests) + 1)
        kept = sum(isinstance(m, dict) and m.get("role") == "assistant" for m in messages)
        self.served_from = max(0, len(self.served) - kept)
        first = self.requests[-1]["messages"][:1]
        if messages[:1] != first and first and first[0].get("role") == "system":
            return ["a compacted conversation must begin with the same system prompt"]
        return True

    def side_request(self, request: dict) -> tuple[int, dict, dict]:
        """A request without tools under compactions_allowed (a summary): checked and answered
        from the script, outside the conversation's sequence. Called with the lock held."""
        self.side_requests.append(request)
        problems = check_messages(request.get("messages"), [], None)
        if self.strict_turns:
            problems += alternation_problems(request.get("messages"))
        if not request.get("model"):
            problems.append("the request has no model")
        counted = prompt_tokens(request)
        if self.window and counted + self.completion_room(request) > self.window:
            problems.append(f"the summary request ({counted} tokens) does not fit the window")
        if problems:
            self.problems += problems
            return 400, {}, error_body("; ".join(problems), "invalid_request_error")
        late = "a side request came after the script's end"
        failed, message, billed, _ = self.next_reply(request, late)
        if failed:
            return failed
        answer = chat_completion(message, len(self.side_requests), counted, 0)
        answer["model"] = "gemma-3-270m.gguf" if self.server == "llamacpp" else request["model"]
        answer = billed.stamp(answer) if billed else answer
        self.answered.append(answer)
        return 200, {}, answer

    def next_reply(self, request: dict, late: str) -> tuple:
        """The script's next item for request: (the response for a scripted Fail, or for no item
        left, noting late as a problem; else None, then the reply's message, its Billed wrapper
        or None, and its Streamed shape)."""
        if not self.script:
            self.problems.append(late)
            return (500, {}, error_body("the script is over", "server_error")), None, None, None
        item = self.script.pop(0)
        billed = item if isinstance(item, Billed) else None
        item = billed.item if billed else item
        if isinstance(item, Fail):
            failed = item.status, item.headers, error_body(item.message, "scripted")
            return failed, None, None, None
        streamed = item if isinstance(item, Streamed) else Streamed(item)
        message = streamed.message
        return None, dict(message(request) if callable(message) else message), billed, streamed

    def completion_room(self, request: dict) -> int:
        """The tokens max_tokens takes from the window: DeepSeek and vLLM count it."""
        if self.server in ("deepseek", "vllm", "lmstudio"):
            return request.get("max_tokens") or 0
        return 0

    def overflow(self, counted: int, request: dict) -> tuple[int, dict, dict]:
        """Each server's answer to a request longer than the window."""
        window = self.window
        if self.server == "llamacpp":
            message = (
                f"request ({counted} tokens) exceeds the available context size ({window} "
                "tokens), try increasing it"
            )
            error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
            return 400, {}, {"error": {**error, "n_prompt_tokens": counted, "n_ctx": window}}
        if self.server == "ollama":
            message = (
                "the prompt is longer than the context length currently available to the "
                "model; reduce the prompt or increase num_ctx"
            )
            return 400, {}, error_body(message, "invalid_request_error")
        completion = request.get("max_tokens") or 0
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{counted + completion} tokens ({counted} in the messages, {completion} in the "
            "completion). Please reduce the length of the messages or completion."
        )
        if self.server == "vllm":
            body = {"object": "error", "message": message, "type": "BadRequestError"}
            return 400, {}, {**body, "param": None, "code": 400}
        return 400, {}, error_body(message, "invalid_request_error")

    def cut(self, request: dict) -> int:
        """Ollama's silent truncation: the oldest messages but the system prompt and the last
        message dropped until the prompt fits; returns its tokens."""
        messages = list(request["messages"])
        dropped = 0
        while prompt_tokens({**request, "messages": messages}) > self.window:
            index = next((i for i, m in enumerate(messages[:-1]) if m["role"] != "system"), None)
            if index is None:
                break
            del messages[index]
            dropped += 1
        self.truncated.append(dropped)
        return prompt_tokens({**request, "messages": messages})

    def window_endpoint(self, method: str, path: str, headers, body: bytes):
        """(status, headers, JSON body) for a server's window endpoint, as that server answers."""
        self.probes.append(
            {"method": method, "path": path, "headers": {k.lower(): v for k, v in headers.items()}}
        )
        path = path.split("?")[0].rstrip("/")
        kind = {
            ("GET", "/props"): "llamacpp",
            ("POST", "/api/show"): "ollama",
            ("GET", "/v1/models"): "vllm",
            ("GET", "/models"): "vllm",
            ("GET", "/api/v0/models"): "lmstudio",
        }.get((method, path))
        if not self.window or kind != self.server:
            return 404, {}, error_body(f"no route {path}", "not_found")
        if headers.get("Authorization") != f"Bearer {self.api_key}":
            return 401, {}, error_body("Invalid API Key", "authentication_error")
        window = self.window
        if kind == "llamacpp":
            settings = {"n_ctx": window, "temperature": 0.8, "n_predict": -1}
            return 200, {}, {"default_generation_settings": settings, "total_slots": 1}
        if kind == "ollama":
            asked = json.loads(body or b"{}").get("model")
            if not asked:
                return 400, {}, {"error": "model is required"}
            parameters = 'stop                           "<|im_end|>"'
            if self.num_ctx_in_parameters:
                parameters = f"num_ctx                        {window}\n{parameters}"
            trained = self.trained or (window * 4 if self.num_ctx_in_parameters else window)
            info = {"general.architecture": "qwen3", "qwen3.context_length": trained}
            return 200, {}, {"parameters": parameters, "model_info": info, "details": {}}
        entry = {"id": self.model, "object": "model", "owned_by": kind}
        if kind == "vllm":
            entry["max_model_len"] = window
        else:
            entry.update(state="loaded", max_context_length=window * 4)
            entry["loaded_context_length"] = window
        other = {"id": "other-model", "object": "model", "owned_by": kind, "state": "not-loaded"}
        return 200, {}, {"object": "list", "data": [other, entry]}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go out as two writes; without this, Nagle's algorithm and
                # delayed ACKs hold each response back about 40 ms.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def handle(self) -> None:
                # A client that leaves without closing its kept-alive connection is no error.
                with contextlib.suppress(ConnectionResetError):
                    super().handle()

            def do_GET(self) -> None:
                with server.lock:
                    status, headers, payload = server.window_endpoint(
                        "GET", self.path, self.headers, b""
                    )
                self.send_json(status, headers, payload)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, headers, payload = server.answer(self.path, self.headers, body)
                if isinstance(payload, Streamed):
                    self.send_stream(payload)
                    return
                self.send_json(status, headers, payload)

            def send_json(self, status: int, headers: dict, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def send_stream(self, plan: Streamed) -> None:
                if plan.end != "done":  # a reply that never arrives whole is not to come back
                    with server.lock:
                        message = plan.message["choices"][0]["message"]
                        server.served[:] = [m for m in server.served if m is not message]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunks = stream_chunks(plan.message, plan.shape)
                if plan.end == "cut":
                    chunks = [c for c in chunks if not c.get("usage")]
                    for chunk in chunks:
                        for choice in chunk["choices"]:
                            choice["finish_reason"] = None
                first_thinking = next((n for n, c in enumerate(chunks) if thinking_in(c)), 0)
                for number, chunk in enumerate(chunks):
                    if plan.keepalive:
                        self.send_piece(": keep-alive\n\n")
                    self.send_piece(f"data: {json.dumps(chunk)}\n\n")
                    if number == first_thinking:
                        if thinking_in(chunk):
                            server.first_thinking_sent.append(time.perf_counter())
                        if plan.hold:
                            plan.hold.wait(30)
                        if plan.end == "error":
                            error = error_body("upstream model failed", "server_error")
                            self.send_piece(f"data: {json.dumps(error)}\n\n")
                            break
                        if plan.end == "drop":
                            self.wfile.flush()  # and the connection closes, mid-body
                            self.close_connection = True
                            return
                        if plan.end == "stall":
                            plan.stall.wait(60)
                            self.close_connection = True
                            return
                else:
                    self.send_piece("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")  # the end of the chunked body

            def send_piece(self, text: str) -> None:
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

        return Handler


def prompt_tokens(request: dict) -> int:
    """A request's prompt tokens as the stub counts them: a quarter of its compact JSON's
    bytes, the stream options left out (the same count whether streamed or not)."""
    prompt = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    return len(json.dumps(prompt, ensure_ascii=False, separators=(",", ":")).encode()) // 4


def error_body(message: str, kind: str) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def chat_completion(message: dict, number: int, prompt_tokens: int, cached: int) -> dict:
    cached = min(cached, prompt_tokens)
    return {
        "id": f"stub-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "deepseek-flash",
        "system_fingerprint": "fp_stub",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": message.pop("finish_reason", None)
                or ("tool_calls" if message.get("tool_calls") else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 10,
            "total_tokens": prompt_tokens + 10,
            "prompt_cache_hit_tokens": cached,
            "prompt_cache_miss_tokens": prompt_tokens - cached,
        },
    }


def stream_chunks(completion: dict, shape: str = "deepseek") -> list[dict]:
    """The chat.completion.chunk objects a server streams for a completion, in a given shape.

    DeepSeek's shape: a first delta with the role (and reasoning_content "" when the reply has
    reasoning), reasoning pieces, content pieces, each tool call as a head (index, id, type,
    name, arguments "") and argument pieces, a finish chunk, then usage in a chunk without
    choices. Put back together, the deltas give exactly the message of the completion.
    """
    message = completion["choices"][0]["message"]
    base = {k: completion[k] for k in ("id", "object", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict, finish_reason: str | None = None, usage: dict | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**base, "choices": [choice], "usage": usage}

    head: dict = {"role": "assistant", "content": None}
    field = next((f for f in REASONING_FIELDS if f in message), None)  # vLLM: "reasoning"
    reasoning = message.get(field)
    if reasoning is not None:
        head[field] = ""
    chunks = [chunk(head)]
    for piece in pieces(reasoning or ""):
        chunks.append(chunk({"content": None, field: piece}))
    content = message.get("content")
    if content is not None:
        after_reasoning = {field: None} if reasoning is not None else {}
        for piece in pieces(content) or [""]:  # "" still arrives as "", not as null
            chunks.append(chunk({"content": piece, **after_reasoning}))
    calls = message.get("tool_calls") or []
    if shape == "no_index":
        whole = [{**call, "function": dict(call["function"])} for call in calls]
        if whole:
            chunks.append(chunk({"tool_calls": whole}))
    for index, call in enumerate(calls if shape != "no_index" else []):
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        first = {"index": index, "id": call["id"], "type": "function"}
        first["function"] = {"name": name, "arguments": ""}
        fragments = [first] + [
            {"index": index, "function": {"arguments": piece}} for piece in pieces(arguments, 8)
        ]
        for fragment in fragments:
            if shape == "repeated":
                fragment.update(id=call["id"], type="function")
                fragment["function"]["name"] = name
            if shape == "fragments_no_index":
                del fragment["index"]
            chunks.append(chunk({"tool_calls": [fragment]}))
    finish = completion["choices"][0]["finish_reason"]
    usage = completion["usage"]
    if shape == "usage_on_finish":
        return [*chunks, chunk({}, finish, usage)]
    return [*chunks, chunk({}, finish), {**base, "choices": [], "usage": usage}]


def pieces(text: str, size: int = 12) -> list[str]:
    """text cut into pieces of at most size characters (as a model streams tokens)."""
    return [text[start : start + size] for start in range(0, len(text), size)]


def thinking_in(chunk: dict) -> bool:
    return any(c["delta"].get(f) for c in chunk["choices"] for f in REASONING_FIELDS)


EDIT_DEMO_TASK = (
    "Create greet.py, a program that prints a greeting; then change its greeting to Good "
    "morning with edit_file, and check the change."
)


def edit_demo_script() -> list:
    """A run with the daily tools (LLM_DAILY_TOOLS=1): write a file, find a line with search,
    change it with edit_file (a line sent, not the file), read the lines back by number."""
    program = (
        'def greeting(name: str) -> str:\n    return f"Hello, {name}!"\n\n\n'
        'if __name__ == "__main__":\n    print(greeting("world"))\n'
    )
    write = tool_call("write_file", {"path": "greet.py", "content": program}, "call_1")
    find = tool_call("search", {"pattern": "Hello", "glob": "*.py"}, "call_2")
    change = {"path": "greet.py", "old_string": "Hello", "new_string": "Good morning"}
    edit = tool_call("edit_file", change, "call_3")
    check = tool_call("read_file", {"path": "greet.py", "offset": 1, "limit": 2}, "call_4")
    return [
        reply(None, write, reasoning=""),
        reply(None, find, reasoning="Find the line that holds the greeting."),
        reply(None, edit, reasoning="Line 2: change only that."),
        reply(None, check, reasoning="Check the function as it now reads."),
        reply('greet.py now greets with "Good morning, world!" (line 2).', reasoning=""),
    ]


def demo_script() -> list:
    """The lesson's demo task as a scripted model: write, read, run, then report what ran."""

    def report(request: dict) -> dict:
        output = request["messages"][-1]["content"]
        result = output.splitlines()[-1] if output.startswith("exit code 0") else output
        answer = f"tool_demo.py prints {result}: 17 * 23 = {result}."
        return reply(answer, reasoning="The command ran; its last line is the answer.")

    program = {"path": "tool_demo.py", "content": "print(17 * 23)\n"}
    write = tool_call("write_file", program, "call_1")
    read = tool_call("read_file", {"path": "tool_demo.py"}, "call_2")
    run = tool_call("run_shell", {"command": "python3 tool_demo.py"}, "call_3")
    return [
        reply(None, write, reasoning="Write the file first, then read it back and run it."),
        reply(None, read, reasoning="Check what was written."),
        reply(None, run, reasoning="Now run it."),
        report,
    ]
