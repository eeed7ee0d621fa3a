"""A hostile or broken server's replies, served by a real HTTP server on 127.0.0.1 (issue 30): the
key never shows in a message that quotes what the server sent (a body that echoes the request's
headers, an error's body, --raw, a note), and no reply shape makes the agent crash: a field of
the wrong kind ends the run (in --chat, the turn) in one line naming it, streamed or not. A
hypothesis fuzz serves arbitrary JSON in every field of a reply and of a stream's chunks.

Each attack failed on the code before its fix (the key printed, or a traceback)."""

from __future__ import annotations

import contextlib
import copy
import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import run_in_process, stub_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stub_server import POLL

KEY = "sk-7f3e9c2a4b1d8e6f0a5c"


class Serving:
    """A server on 127.0.0.1 whose answer to each POST is made by answer(request, headers):
    (status, content type, body bytes); a text/event-stream body is sent as it is."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle(self) -> None:
                # A client that leaves (the SDK giving up on a 5xx) is no error of the server's;
                # and this thread's traceback would land in the agent's caught stderr.
                with contextlib.suppress(ConnectionError):
                    super().handle()

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                owner.requests.append(request)
                status, kind, body = owner.answer(request, self.headers)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                if status >= 500:  # the SDK asks again at once: its back-off is not tested here
                    self.send_header("retry-after-ms", "1")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # no window endpoint
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.api_key = KEY

    def __enter__(self) -> Serving:
        threading.Thread(target=self.http.serve_forever, args=(POLL,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.http.shutdown()
        self.http.server_close()


def agent(server: Serving, workdir, *args: str, stdin: str = ""):
    env = stub_env(server, LLM_BASE_URL=f"{server.url}/v1", LLM_CONTEXT_TOKENS="100000")
    return run_in_process("--workdir", str(workdir), "--no-save", *args, env=env, stdin=stdin)


def completion(message: dict, **fields) -> dict:
    """A well-formed chat completion of message, DeepSeek's shape; fields replace its own."""
    calls = message.get("tool_calls")
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "deepseek-flash",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                  "prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 10},
        **fields,
    }  # fmt: skip


def events(reply: dict) -> bytes:
    """reply as a stream (see chunks)."""
    return stream_text(chunks(reply))


def chunks(reply: dict) -> list[dict]:
    """reply as the chunks of a stream: each choice's message in one delta (its tool calls
    indexed), a finish chunk, then the usage in a chunk without choices."""
    top = {name: reply[name] for name in ("id", "created", "model") if name in reply}
    top["object"] = "chat.completion.chunk"
    pieces = []
    for choice in reply.get("choices") or []:
        delta = copy.deepcopy(choice.get("message")) if isinstance(choice, dict) else choice
        if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), list):
            for number, call in enumerate(delta["tool_calls"]):
                if isinstance(call, dict):
                    call.setdefault("index", number)
        finish = choice.get("finish_reason") if isinstance(choice, dict) else "stop"
        pieces.append({**top, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        pieces.append({**top, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return [*pieces, {**top, "choices": [], "usage": reply.get("usage")}]


def stream_text(pieces: list) -> bytes:
    text = "".join(f"data: {json.dumps(piece)}\n\n" for piece in pieces) + "data: [DONE]\n\n"
    return text.encode()


def served(replies: list, after: dict | None = None):
    """An answer function: each request gets the next of replies (a dict as JSON, or as a
    stream when the request asks for one; a tuple (status, body) as an error), then after."""
    queue = list(replies)

    def answer(request: dict, headers: dict):
        item = (
            queue.pop(0) if queue else after or completion({"role": "assistant", "content": "ok"})
        )
        if callable(item):
            item = item(request, headers)
        if isinstance(item, tuple):
            return item[0], "application/json", json.dumps(item[1]).encode()
        if request.get("stream"):
            return 200, "text/event-stream", events(item)
        return 200, "application/json", json.dumps(item).encode()

    return answer


def leaked(text: str) -> list[str]:
    """Every piece of the key, 8 characters or longer, found in text (a key cut in two by a
    message's shortening still leaks its first half)."""
    return [KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8] in text]


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error")]


STREAM = ["--no-stream", "--stream"]


# --- The key never shows in what the agent quotes of a server ----------------------------------


def echo(status: int, padding: int):
    """A server that answers with the request's headers (the key in Authorization) after
    padding characters, as a debugging proxy or a misrouted echo endpoint does."""

    def answer(request: dict, headers: dict):
        return status, {"pad": "x" * padding, "authorization": headers["Authorization"]}

    return answer


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("status", [200, 401, 503])  # each way a body is quoted
@pytest.mark.parametrize("padding", [0, 70, 150])  # whole; cut in two at 120, at 200
def test_a_body_echoing_the_request_headers_never_shows_the_key(workdir, stream, status, padding):
    with Serving(served([echo(status, padding)] * 3)) as server:
        done = agent(server, workdir, stream, "Hi.")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    [line] = errors(done.stderr)
    assert leaked(done.stderr + done.stdout) == [], line


@pytest.mark.parametrize("stream", STREAM)
def test_raw_output_and_notes_never_show_the_key(workdir, stream):
    """--raw prints what came back, and a note names the model the server answered as: the key
    in either is replaced."""
    message = {"role": "assistant", "content": "Done."}
    reply = completion(message, model=f"proxy-for Bearer {KEY}", system_fingerprint=KEY)
    with Serving(served([reply])) as server:
        done = agent(server, workdir, stream, "--raw", "Hi.")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Done.\n"
    assert leaked(done.stderr) == []
    assert "the server answered as proxy-for Bearer ***" in done.stderr
    assert "Traceback" not in done.stderr and "serializer warnings" not in done.stderr


def test_a_reply_without_choices_that_quotes_the_key_in_its_error_never_shows_it(workdir):
    reply = {"object": "chat.completion", "choices": [], "error": {"message": "x" * 170 + KEY}}
    with Serving(served([reply])) as server:
        done = agent(server, workdir, "--no-stream", "Hi.")
    assert done.returncode == 1
    [line] = errors(done.stderr)
    assert "has no choices" in line and leaked(done.stderr) == []


def test_an_error_event_in_a_stream_quoting_the_key_never_shows_it(workdir):
    error = {"error": {"message": "x" * 170 + f"Authorization: Bearer {KEY}"}}
    text = f"data: {json.dumps(error)}\n\n".encode()
    with Serving(lambda request, headers: (200, "text/event-stream", text)) as server:
        done = agent(server, workdir, "--stream", "Hi.")
    assert done.returncode == 1
    assert "the server reported an error in the middle of the reply" in done.stderr
    assert leaked(done.stderr) == []


# --- No reply shape crashes the agent -----------------------------------------------------------

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}  # fmt: skip
ATTACKS = {  # the replies, each a traceback before: (the reply, the field named)
    "tool_calls as an object": (
        completion({"role": "assistant", "content": None, "tool_calls": {"0": CALL}}),
        "choices[0].message.tool_calls",
    ),
    "a call without function": (
        completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function"}],
            }
        ),  # fmt: skip
        "choices[0].message.tool_calls[0].function",
    ),
    "a name that is an object": (
        completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{**CALL, "function": {"name": {"x": 1}, "arguments": "{}"}}],
            }
        ),  # fmt: skip
        "choices[0].message.tool_calls[0].function.name",
    ),
    "content an int": (
        completion({"role": "assistant", "content": 7}),
        "choices[0].message.content",
    ),
    "content a list": (
        completion({"role": "assistant", "content": [{"type": "text", "text": "hi"}]}),
        "choices[0].message.content",
    ),
    "created 10**30": (
        completion({"role": "assistant", "content": "Done."}, created=10**30),
        "created",
    ),
    "model an int": (completion({"role": "assistant", "content": "Done."}, model=7), "model"),
}


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_reply_of_the_wrong_shape_ends_the_run_in_one_line_naming_the_field(
    workdir, attack, stream
):
    reply, field = ATTACKS[attack]
    if stream == "--stream":  # found in its chunk
        field = field.replace("message", "delta")
    with Serving(served([reply])) as server:
        done = agent(server, workdir, stream, "Hi.")
    assert "Traceback" not in done.stderr and "bug in the agent" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    [line] = errors(done.stderr)
    assert f" {field} is " in line, line
    assert done.stdout == ""


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_in_a_chat_a_reply_of_the_wrong_shape_ends_only_its_turn(workdir, attack, stream):
    reply, field = ATTACKS[attack]
    if stream == "--stream":
        field = field.replace("message", "delta")
    good = completion({"role": "assistant", "content": "Fine now."})
    with Serving(served([reply], after=good)) as server:
        done = agent(server, workdir, stream, "--chat", stdin="Hi.\nAgain.\n")
    assert "Traceback" not in done.stderr and "bug in the agent" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    [line] = errors(done.stderr)
    assert f" {field} is " in line and "the turn ended" in line
    assert "Fine now." in done.stdout
    assert "turns 1 (and 1 failed)" in done.stderr


def test_a_reply_that_other_servers_send_still_works(workdir):
    """What the agent repairs stays repaired: a call without id, arguments as an object,
    usage without DeepSeek's fields, created and usage left out."""
    call = {"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.txt"}}}
    first = completion({"role": "assistant", "content": None, "tool_calls": [call]})
    del first["created"]
    first["usage"] = {"prompt_tokens": 10, "completion_tokens": 5,
                      "prompt_tokens_details": {"cached_tokens": 4}}  # fmt: skip
    (workdir / "a.txt").write_text("hello")
    with Serving(served([first])) as server:
        done = agent(server, workdir, "--no-stream", "Read a.txt.")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"
    assert server.requests[1]["messages"][-1]["content"] == "hello"


# --- Any depth, any size: nesting, long strings, huge numbers, duplicate keys (issue 35) ------

DEEP = 10_000  # levels of nesting, far past Python's recursion limit


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


PLACEHOLDER = "@@EXTREME@@"
EXTREMES = {  # JSON text put in place of a field's value, as the server sends it
    "nested 260 deep": nested(260),
    "nested 10,000 deep": nested(DEEP),
    "objects nested 10,000 deep": '{"a":' * DEEP + "1" + "}" * DEEP,
    "a 10 MB string": json.dumps("x" * 10_000_000),
    "a 5,000-digit integer": "9" * 5000,
    "a 100,000-digit integer": "9" * 100_000,
    "1e999": "1e999",
}

# --- Fuzz: arbitrary JSON in every field of a reply, streamed and not ---------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.text(max_size=20) | st.integers()
    | st.sampled_from([-1, 0, 2**53 + 1, 2**63, 10**30, 10**400]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
) | st.sampled_from([f"@@{name}@@" for name in EXTREMES])  # fmt: skip
FIRST = completion(
    {"role": "assistant", "content": "", "reasoning_content": "Read it.", "tool_calls": [CALL]}
)
DONE = completion({"role": "assistant", "content": "Done."})


def paths(value: object, path: tuple = ()) -> list[tuple]:
    """Every place in a JSON document: each object's fields and each array's items, nested."""
    places = [path]
    if isinstance(value, dict):
        for name, inner in value.items():
            places += paths(inner, (*path, name))
    elif isinstance(value, list):
        for number, inner in enumerate(value):
            places += paths(inner, (*path, number))
    return places


def with_value(document: object, path: tuple, value: object) -> object:
    """A copy of document with value at path (the whole document for the empty path)."""
    if not path:
        return value
    changed = copy.deepcopy(document)
    place = changed
    for step in path[:-1]:
        place = place[step]
    place[path[-1]] = value
    return changed


class Mutable:
    """The answer of a server whose first reply of each run is set by the test."""

    def __init__(self) -> None:
        self.first: bytes | None = None
        self.kind = "application/json"

    def __call__(self, request: dict, headers) -> tuple:
        if self.first is not None:
            first, self.first = self.first, None
            return 200, self.kind, first
        if request.get("stream"):
            return 200, "text/event-stream", events(DONE)
        return 200, "application/json", json.dumps(DONE).encode()


@pytest.fixture(scope="module")
def fuzzed():
    answer = Mutable()
    with Serving(answer) as server:
        yield server, answer


def mutations(document: object):
    return st.lists(
        st.tuples(st.sampled_from(paths(document)), json_values), min_size=1, max_size=3
    )


def run_mutated(server: Serving, answer: Mutable, document: object, changes, stream: str):
    for path, value in changes:
        try:
            document = with_value(document, path, value)
        except (KeyError, IndexError, TypeError):  # an earlier change took that place away
            pass
    if stream == "--stream":
        answer.kind = "text/event-stream"
        answer.first = stream_text(document if isinstance(document, list) else [document])
    else:
        answer.kind = "application/json"
        answer.first = json.dumps(document).encode()
    for name, text in EXTREMES.items():  # drawn as a marker, sent as the JSON text itself
        answer.first = answer.first.replace(json.dumps(f"@@{name}@@").encode(), text.encode())
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "a.txt").write_text("hello")
        done = agent(server, folder, stream, "--max-steps", "3", "Read a.txt.")
    assert "Traceback" not in done.stderr, done.stderr
    assert "bug in the agent" not in done.stderr, done.stderr
    assert done.returncode in (0, 1, 4), done.stderr  # finished, one error, an empty answer
    if done.returncode == 1:
        assert len(errors(done.stderr)) == 1, done.stderr
    assert leaked(done.stderr + done.stdout) == []


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(changes=mutations(FIRST))
def test_any_json_in_any_field_of_a_reply_never_crashes_the_agent(fuzzed, changes):
    run_mutated(*fuzzed, FIRST, changes, "--no-stream")


@FUZZ
@given(changes=mutations(chunks(FIRST)))
def test_any_json_in_any_field_of_a_streams_chunks_never_crashes_the_agent(fuzzed, changes):
    run_mutated(*fuzzed, chunks(FIRST), changes, "--stream")


UNREAD = {"role": "assistant", "content": "Done.", "extra": PLACEHOLDER}
READ = {"role": "assistant", "content": PLACEHOLDER}  # content: a field the agent reads


def with_extreme(document: object, extreme: str) -> bytes:
    return json.dumps(document).replace(json.dumps(PLACEHOLDER), extreme).encode()


def extreme_answer(message: dict, extreme: str, top_level: bool = False):
    """A server whose first reply holds extreme where message (or the reply's own top level)
    says PLACEHOLDER; streamed as one chunk when the request asks for a stream."""
    reply = completion(message, **({"extra": PLACEHOLDER} if top_level else {}))
    calls = iter([0])

    def answer(request: dict, headers):
        if next(calls, None) is None:
            return served([])(request, headers)
        if request.get("stream"):
            pieces = chunks(reply)
            body = b"".join(b"data: " + with_extreme(p, extreme) + b"\n\n" for p in pieces)
            return 200, "text/event-stream", body + b"data: [DONE]\n\n"
        return 200, "application/json", with_extreme(reply, extreme)

    return answer


def duplicate_keys_answer(request: dict, headers):
    """A reply whose message, call and usage each name a field twice, the second of a wrong
    kind: JSON allows it, the last one counts."""
    body = json.dumps(completion({"role": "assistant", "content": "Done."}))
    body = body.replace('"content": "Done."', '"content": "Done.", "content": "Again."')
    body = body.replace('"prompt_tokens": 10', '"prompt_tokens": 10, "prompt_tokens": 11')
    body = body.replace('"model": "deepseek-flash"', '"model": "deepseek-flash", "model": {}')
    if request.get("stream"):
        return 200, "text/event-stream", b"data: " + body.encode() + b"\n\ndata: [DONE]\n\n"
    return 200, "application/json", body.encode()


def assert_clean_or_one_line(done, transcript: Path) -> None:
    """A clean run, or one error line; never a traceback; the transcript valid either way."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "bug in the agent" not in done.stderr, done.stderr[-3000:]
    assert done.returncode in (0, 1), done.stderr[-3000:]
    for line in transcript.read_text().splitlines():
        json.loads(line)
    if done.returncode == 1:
        assert len(errors(done.stderr)) == 1, done.stderr[-3000:]
        assert len(errors(done.stderr)[0]) < 400
        assert transcript.stat().st_size < 100_000  # nothing of the unusable reply was kept


def run_saved(server: Serving, workdir, *args: str):
    transcript = Path(workdir).parent / "saved.jsonl"
    env = stub_env(server, LLM_BASE_URL=f"{server.url}/v1", LLM_CONTEXT_TOKENS="100000")
    done = run_in_process(
        "--workdir", str(workdir), "--save", str(transcript), *args, env=env
    )  # fmt: skip
    return done, transcript


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("where", ["unread", "read", "top level"])
@pytest.mark.parametrize("extreme", list(EXTREMES))
def test_no_depth_or_size_of_a_reply_crashes_the_agent(workdir, extreme, where, stream):
    message = READ if where == "read" else UNREAD
    answer = extreme_answer(message, EXTREMES[extreme], top_level=where == "top level")
    with Serving(answer) as server:
        done, transcript = run_saved(server, workdir, stream, "Hi.")
    assert_clean_or_one_line(done, transcript)


@pytest.mark.parametrize("stream", STREAM)
def test_duplicate_keys_in_a_reply_never_crash_the_agent(workdir, stream):
    with Serving(duplicate_keys_answer) as server:
        done, transcript = run_saved(server, workdir, stream, "Hi.")
    assert_clean_or_one_line(done, transcript)


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("extreme", list(EXTREMES))
def test_a_calls_arguments_of_any_depth_or_size_never_crash_the_agent(workdir, extreme, stream):
    """The arguments string is JSON the agent itself reads: the extremes inside it."""
    arguments = json.dumps({"path": "a.txt", "extra": PLACEHOLDER})
    call = {**CALL, "function": {"name": "read_file", "arguments": arguments}}
    reply = completion({"role": "assistant", "content": None, "tool_calls": [call]})
    text = json.dumps(EXTREMES[extreme])[1:-1]  # inside the arguments' own string
    body = json.dumps(reply).replace(PLACEHOLDER.join(['\\"'] * 2), text).encode()

    def answer(request: dict, headers):
        if len(server.requests) > 1:
            return served([])(request, headers)
        if request.get("stream"):
            pieces = chunks(json.loads(body))
            return 200, "text/event-stream", stream_text(pieces)
        return 200, "application/json", body

    (workdir / "a.txt").write_text("hello")
    with Serving(answer) as server:
        done, transcript = run_saved(server, workdir, stream, "Read a.txt.")
    assert_clean_or_one_line(done, transcript)
