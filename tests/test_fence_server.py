"""The fence against a hostile server, repository and model, beyond the commands and the terminal
(issue 24): the window probe never hands the key to another host; a budget the server gives no
usage for stops the run; compaction and a failed --chat turn keep strict turns; a reply that is
not a chat completion ends in one line; write_file and read_file cannot be raced out of the
workdir; AGENTS.md is read through the fence; a transcript in use is said to be in use; and a
full-context refusal is compacted and sent again once, not over and over.

Each test runs the agent as a user does (in this process or as a real one) against the stub
server, or calls the tools as the model does, and failed on the code before its fix.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ROOT, execute, run_agent, run_in_process, stub_env, use_workspace, wait_for
from fake_model import reply, tool_call
from stub_server import POLL, Fail, Streamed, StubServer

KEY = "sk-fence-test-key-0123456789"


def agent(stub, workdir: Path, *args: str, stdin: str = "", run=run_in_process, **settings):
    """The agent against the stub at its /v1, in this process unless run=run_agent."""
    env = stub_env(stub, **{"LLM_BASE_URL": f"{stub.url}/v1", **settings})
    return run("--workdir", str(workdir), *args, env=env, stdin=stdin)


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error")]


# --- 1. The window probe never carries the key to another origin --------------------------------


class Redirecting(StubServer):
    """A stub that serves the conversation but answers every window endpoint with a redirect
    to another server (another port of 127.0.0.1: another origin)."""

    def __init__(self, script: list, to: str, **options) -> None:
        super().__init__(script, **options)
        self.to = to

    def window_endpoint(self, method: str, path: str, headers, body: bytes):
        self.probes.append({"method": method, "path": path})
        return 302, {"Location": f"{self.to}{path}"}, {}


def test_the_window_probe_never_sends_the_key_to_another_origin(workdir):
    """The second server answers every endpoint of every kind of server with a window: had the
    probe followed a redirect there with the key, it would have got it."""
    with StubServer([], api_key=KEY, window=4_096, server="llamacpp") as elsewhere:
        with Redirecting([reply("Done.")], elsewhere.url, api_key=KEY) as local:
            done = agent(local, workdir, "--no-save", "--no-stream", "Say done.")
            wait_for(
                lambda: not any(t.name == "context window probe" for t in threading.enumerate()),
                "the window probe never ended",
            )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "Done.\n"
    assert len(local.probes) == 4  # each endpoint asked, each redirected
    assert [probe for probe in elsewhere.probes if KEY in json.dumps(probe)] == []
    assert elsewhere.probes == []  # another origin: not followed at all


def test_a_redirect_within_the_same_origin_is_still_followed():
    """A local server that moved its /props on its own origin still tells the window."""
    from minimal_agent.core.window_probe import probe_window

    class Moved(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/props":
                self.send_response(302)
                self.send_header("Location", "/moved/props")
                body = b""
            elif self.headers.get("Authorization") == f"Bearer {KEY}":
                self.send_response(200)
                body = json.dumps({"default_generation_settings": {"n_ctx": 4_096}}).encode()
            else:
                self.send_response(401)
                body = b""
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Moved)
    threading.Thread(target=http.serve_forever, args=(POLL,), daemon=True).start()
    try:
        assert probe_window(f"http://127.0.0.1:{http.server_address[1]}/v1", "m", KEY) == 4_096
    finally:
        http.shutdown()
        http.server_close()


# --- 2. A budget the server gives no usage for is not ignored -----------------------------------


class NoUsage(StubServer):
    """A stub whose replies carry no usage, streamed or not (as some servers' replies)."""

    def answer(self, path: str, headers, body: bytes):
        status, extra, payload = super().answer(path, headers, body)
        if isinstance(payload, Streamed):
            payload.message["usage"] = None
        elif isinstance(payload, dict):
            payload.pop("usage", None)
        return status, extra, payload


def two_steps() -> list:
    return [reply(None, tool_call("read_file", {"path": "notes.txt"}, "call_1")), reply("Read.")]


@pytest.mark.parametrize("stream", ["--no-stream", "--stream"])
def test_a_budget_without_usage_stops_the_run(workdir, stream):
    (workdir / "notes.txt").write_text("notes\n")
    with NoUsage(two_steps()) as stub:
        done = agent(stub, workdir, "--no-save", stream, "--max-cost", "1", "Read notes.txt.")

    assert done.returncode == 3, done.stderr
    assert len(stub.requests) == 1  # stopped before the second request
    lines = done.stderr.splitlines()
    stop = [line for line in lines if line.startswith("stopped:")]
    assert len(stop) == 1 and "reports no usage" in stop[0] and "cannot be kept" in stop[0]
    assert "$0.0000" not in done.stderr
    assert lines[-1].endswith("cost unknown (no usage reported for 1 reply)")


def test_a_budget_setting_without_usage_stops_the_run_too(workdir):
    (workdir / "notes.txt").write_text("notes\n")
    with NoUsage(two_steps()) as stub:
        done = agent(stub, workdir, "--no-save", "--no-stream", "Go.", LLM_MAX_COST="0.5")
    assert done.returncode == 3, done.stderr
    assert "reports no usage" in done.stderr


def test_without_a_budget_the_totals_say_the_cost_is_unknown(workdir):
    (workdir / "notes.txt").write_text("notes\n")
    with NoUsage(two_steps()) as stub:
        done = agent(stub, workdir, "--no-save", "--no-stream", "Read notes.txt.")
    assert done.returncode == 0, done.stderr
    assert "$0.0000" not in done.stderr
    assert done.stderr.splitlines()[-1].endswith(", cost unknown (no usage reported for 2 replies)")


# --- 3. Compaction keeps strict turns -----------------------------------------------------------

SUMMARY = "Summary: the user asked to read the part files; they were read one by one."


def reading_model(names: list[str]):
    """A model for the stub: each request with tools reads the next file, then answers; a
    request without tools (a summary) gets SUMMARY."""
    thinking = "Let me think about this part. " * 60  # long: notes cannot shorten it
    steps = [
        reply(None, tool_call("read_file", {"path": name}, f"call{n:05}"), reasoning=thinking)
        for n, name in enumerate(names, 1)
    ] + [reply("All parts are read.")]

    def model(request: dict) -> dict:
        return reply(SUMMARY) if not request.get("tools") else steps.pop(0)

    return model, steps


def part_files(folder: Path, count: int, chars: int) -> list[str]:
    names = []
    for number in range(1, count + 1):
        line = f"part{number}.txt: " + "lorem ipsum dolor sit amet " * 3 + "\n"
        (folder / f"part{number}.txt").write_text((line * (chars // len(line) + 1))[:chars])
        names.append(f"part{number}.txt")
    return names


def test_a_summary_inside_a_run_keeps_strict_turns(workdir, tmp_path):
    """Gemma's template refuses two user messages in a row: the summary of a compaction and
    the task after it must not be two of them."""
    names = part_files(workdir, 8, 3_000)
    model, steps = reading_model(names)
    save = tmp_path / "run.jsonl"
    with StubServer(
        [model] * 60, server="llamacpp", window=4_096, compactions_allowed=True, strict_turns=True
    ) as stub:
        done = agent(stub, workdir, "--save", str(save), "--no-stream", "Read every part file.")

    assert done.returncode == 0, done.stderr
    assert stub.problems == []
    assert steps == []
    records = [json.loads(line) for line in save.read_text().splitlines()]
    kinds = [r["kind"] for r in records if r.get("event") == "compaction"]
    assert "summary" in kinds  # a summary was made, so the test saw one


# --- 4. In --chat, a failed request ends that turn, not the session -----------------------------


@pytest.mark.parametrize(
    "failure",
    [
        [Fail(400, "Invalid request: the messages are too odd for this server")],
        [Fail(500, "the model crashed", {"retry-after-ms": "10"})] * 3,  # the SDK tries 3 times
    ],
    ids=["400", "500"],
)
def test_a_refused_request_in_a_chat_ends_only_its_turn(workdir, tmp_path, failure):
    save = tmp_path / "chat.jsonl"
    script = [*failure, reply("The second answer."), reply("The third answer.")]
    with StubServer(script, strict_turns=True) as stub:
        done = agent(
            stub,
            workdir,
            "--chat",
            "--no-stream",
            "--save",
            str(save),
            stdin="first message\nsecond message\nthird message\n\n",
        )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "The second answer.\nThe third answer.\n"
    [error] = errors(done.stderr)
    assert f"the server answered {failure[0].status}" in error
    assert "check the model name" not in error  # the error is not about the model
    assert "type the next message" in error
    assert stub.problems == []  # the next requests were valid, on a strict server too
    second = stub.requests[-2]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[1]["content"] == "first message" and second[3]["content"] == "second message"
    assert "session: turns 2" in done.stderr


def test_a_broken_stream_in_a_chat_ends_only_its_turn(workdir):
    lost = Streamed(reply("lost", reasoning="thinking"), end="drop")
    script = [lost, lost, reply("Second.")]  # broken, and broken again when asked again
    with StubServer(script, strict_turns=True) as stub:
        done = agent(stub, workdir, "--chat", "--stream", "--no-save", stdin="one\ntwo\n\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("Second.\n")
    [error] = errors(done.stderr)
    assert "before the server finished the reply, a second time" in error
    assert stub.problems == []


def test_the_model_hint_comes_only_for_an_error_about_the_model(workdir):
    with StubServer([Fail(400, "Model Not Exist")]) as stub:
        done = agent(stub, workdir, "--no-save", "--no-stream", "Hi.")
    assert done.returncode == 1
    assert "check --model or LLM_MODEL" in errors(done.stderr)[0]
    with StubServer([Fail(400, "The model `nobody` is not served here")]) as stub:
        done = agent(stub, workdir, "--no-save", "--no-stream", "Hi.")
    assert "check the model name" in errors(done.stderr)[0]
    with StubServer([Fail(400, "messages: bad shape")]) as stub:
        done = agent(stub, workdir, "--no-save", "--no-stream", "Hi.")
    assert done.returncode == 1
    assert "check the model name" not in done.stderr and len(errors(done.stderr)) == 1


# --- 5. A reply that is not a chat completion ----------------------------------------------------

BODIES = {
    "an HTML page": ("text/html; charset=utf-8", b"<!DOCTYPE html>\n<html><title>Sign in</title>"),
    "cut-off JSON": ("application/json", b'{"id": "x", "object": "chat.completion", "choi'),
    "other JSON": ("application/json", b'{"status": "ok", "items": [1, 2]}'),
    "a JSON list": ("application/json", b"[1, 2, 3]"),
    "junk choices": ("application/json", b'{"object": "chat.completion", "choices": [7]}'),
}


class Portal:
    """A server that answers every POST with status 200 and the body of one kind of BODIES,
    as a web UI or a captive portal at LLM_BASE_URL does."""

    def __init__(self, kind: str) -> None:
        content_type, body = BODIES[kind]

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.api_key = KEY

    def __enter__(self) -> Portal:
        threading.Thread(target=self.http.serve_forever, args=(POLL,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.mark.parametrize("stream", ["--no-stream", "--stream"])
@pytest.mark.parametrize("kind", list(BODIES))
def test_a_reply_that_is_not_a_chat_completion_ends_in_one_line(workdir, kind, stream):
    with Portal(kind) as portal:
        done = agent(portal, workdir, "--no-save", stream, "Hi.")

    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "bug in the agent" not in done.stderr
    [error] = errors(done.stderr)
    assert f"{portal.url}/v1/chat/completions" in error
    expected = "a stream of chat completion chunks" if stream == "--stream" else "a chat completion"
    assert f", not {expected}: " in error
    if kind == "an HTML page":
        assert "an HTML page" in error and "<!DOCTYPE html>\\n<html>" in error
    if kind == "cut-off JSON":
        assert '"choi' in error


# --- 6. The workdir fence is not raced -----------------------------------------------------------


def swapping(folder: Path, outside: Path, stop: threading.Event, steady: threading.Lock) -> None:
    """Swap folder (a real folder of the workdir) for a link to outside and back, over and
    over, until stop is set; then leave it a folder again. Each swap holds steady: whoever
    holds it finds the folder a folder."""
    aside = folder.with_name(folder.name + ".aside")

    def put_back() -> None:
        with contextlib.suppress(OSError):
            if folder.is_symlink():
                folder.unlink()
            elif folder.is_dir() and aside.is_dir():  # the tool made it anew in the gap
                shutil.rmtree(folder)
            if aside.is_dir():
                os.rename(aside, folder)

    while not stop.is_set():
        with steady:
            try:
                os.rename(folder, aside)
                os.symlink(outside, folder)
                time.sleep(0)
                os.unlink(folder)
                os.rename(aside, folder)
            except OSError:
                put_back()
        time.sleep(0)  # a thread waiting for steady gets it
    put_back()


@pytest.mark.posix("links swapped under a folder's descriptor (O_NOFOLLOW, dir_fd)")
@pytest.mark.parametrize("tool", ["write_file", "read_file"])
def test_a_link_swapped_in_cannot_lead_a_tool_outside(tmp_path, tool):
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "notes.txt").write_text("SECRET outside the workdir\n")
    (work / "sub" / "notes.txt").write_text("inside\n")
    use_workspace(work)
    if tool == "write_file":
        arguments = {"path": "sub/notes.txt", "content": "written by the model\n"}
    else:
        arguments = {"path": "sub/notes.txt"}
    call = {"id": "c1", "function": {"name": tool, "arguments": json.dumps(arguments)}}
    stop, steady = threading.Event(), threading.Lock()
    swapper = threading.Thread(target=swapping, args=(work / "sub", outside, stop, steady))
    swapper.start()
    raced, between = [], []  # calls at any moment of the swaps; calls between two swaps
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline:
            raced.append(execute(call))
            with steady:
                between.append(execute(call))
    finally:
        stop.set()
        swapper.join()

    assert (outside / "notes.txt").read_text() == "SECRET outside the workdir\n"
    assert sorted(p.name for p in outside.iterdir()) == ["notes.txt"]  # no temporary file left
    assert not any("SECRET" in result for result in raced + between)
    # The tool did work whenever the folder was a folder: however loaded the machine, and
    # however the swaps fell, the fence never refused a call it should have let through.
    assert between and not any(result.startswith("Error") for result in between), between


def test_links_inside_the_workdir_still_work(workdir):
    (workdir / "real").mkdir()
    (workdir / "real" / "notes.txt").write_text("inside\n")
    (workdir / "notes.txt").symlink_to("real/notes.txt")
    (workdir / "folder").symlink_to("real")
    script = [
        reply(None, tool_call("read_file", {"path": "notes.txt"}, "call_1")),
        reply(None, tool_call("write_file", {"path": "notes.txt", "content": "new\n"}, "call_2")),
        reply(None, tool_call("write_file", {"path": "folder/made/x.txt", "content": "x"}, "c3")),
        reply(None, tool_call("read_file", {"path": "folder/made/x.txt"}, "call_4")),
        reply("Done."),
    ]
    with StubServer(script) as stub:
        done = agent(stub, workdir, "--no-save", "--no-stream", "Use the links.")

    assert done.returncode == 0, done.stderr
    results = [m["content"] for m in stub.requests[-1]["messages"] if m["role"] == "tool"]
    assert results[0] == "inside\n"
    assert results[1].startswith("Wrote 4 characters")
    assert results[3] == "x"
    assert (workdir / "notes.txt").is_symlink()  # written through the link, as before
    assert (workdir / "real" / "notes.txt").read_text() == "new\n"
    assert (workdir / "real" / "made" / "x.txt").read_text() == "x"


# --- 7. AGENTS.md is read through the fence -------------------------------------------------------


def first_system_prompt(stub: StubServer) -> str:
    return stub.requests[0]["messages"][0]["content"]


@pytest.mark.posix("symbolic links and FIFOs")
@pytest.mark.parametrize("kind", ["link outside", "device", "folder", "fifo"])
def test_an_agents_file_that_is_no_file_of_the_workdir_is_skipped(workdir, tmp_path, kind):
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = SECRET\n")
    agents = workdir / "AGENTS.md"
    if kind == "link outside":
        agents.symlink_to(secret)
    elif kind == "device":
        agents.symlink_to("/dev/zero")
    elif kind == "folder":
        agents.mkdir()
    else:
        os.mkfifo(agents)
    # A FIFO or a device read would hang or fill a process, not the suite: those two run as one.
    run = run_agent if kind in ("device", "fifo") else run_in_process
    with StubServer([reply("Done.")]) as stub:
        done = agent(stub, workdir, "--no-save", "--no-stream", "Hi.", run=run)

    assert done.returncode == 0, done.stderr
    assert "SECRET" not in first_system_prompt(stub)
    assert "AGENTS.md" not in first_system_prompt(stub)
    said = [line for line in done.stderr.splitlines() if "AGENTS.md" in line]
    why = {
        "link outside": "outside the workdir",
        "device": "outside the workdir",
        "folder": "a folder",
        "fifo": "not a regular file",
    }[kind]
    assert len(said) == 1 and said[0].startswith("skipped AGENTS.md") and why in said[0], said


@pytest.mark.posix("symbolic links")
def test_an_agents_file_linked_to_a_file_of_the_workdir_is_read(workdir):
    (workdir / "docs").mkdir()
    (workdir / "docs" / "agents.md").write_text("Always answer in French.\n")
    (workdir / "AGENTS.md").symlink_to("docs/agents.md")
    with StubServer([reply("Fait.")]) as stub:
        done = agent(stub, workdir, "--no-save", "--no-stream", "Hi.")
    assert done.returncode == 0, done.stderr
    assert "Always answer in French." in first_system_prompt(stub)
    assert "read AGENTS.md from the workdir into the system prompt" in done.stderr


# --- 8. A transcript in use is said to be in use, not broken --------------------------------------


@pytest.mark.posix("another process holding the transcript's lock")
@pytest.mark.parametrize("how", ["-c", "-r"])
def test_a_transcript_being_written_is_in_use_not_broken(workdir, tmp_path, how):
    from minimal_agent.stores import conversations

    folder = tmp_path / "sessions"
    folder.mkdir()
    path = folder / "2026-01-01T00-00-00-abcdef.jsonl"
    first = conversations.session_event(str(workdir), "deepseek-flash")
    lines = [first, {"role": "system", "content": "s"}, {"role": "user", "content": "Task."}]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    path.write_text(text + '{"role": "assistant", "content": "half wri')  # mid-write
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert holder.stdout.readline() == b"locked\n"
        with StubServer([]) as stub:
            which = str(path) if how == "-r" else None
            args = ["-r", which] if which else ["-c"]
            done = agent(stub, workdir, *args, "Go on.", LLM_SESSIONS_DIR=str(folder))
    finally:
        holder.stdin.close()
        holder.wait(10)

    assert done.returncode == 1
    [error] = errors(done.stderr)
    assert "is in use by another agent" in error, error
    assert "partly written" not in done.stderr


HOLD = """
import sys
from minimal_agent.stores import conversations
file = conversations.open_for_append(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


# --- 9. After a full-context refusal: compacted and sent again once per request -----------------


def test_after_a_full_context_refusal_the_request_is_sent_again_only_once(workdir, tmp_path):
    """Every request after the file reads is refused as too long, though compacting further
    would be possible each time: the agent compacts and sends it again once, then stops. A
    change that keeps compacting and resending would get a reply from the script."""
    names = part_files(workdir, 3, 12_000)
    full = (
        "This model's maximum context length is 1000000 tokens. However, you requested "
        "2000000 tokens. Please reduce the length of the messages."
    )
    reads = [
        reply(None, tool_call("read_file", {"path": name}, f"call{n:05}"))
        for n, name in enumerate(names, 1)
    ]
    script = [*reads, *[Fail(400, full)] * 4, reply("Never shown.")]
    with StubServer(script, compactions_allowed=True) as stub:
        done = agent(stub, workdir, "--no-save", "--no-stream", "Read the parts.")

    assert done.returncode == 1, done.stderr
    assert "Never shown." not in done.stdout
    assert len(stub.requests) == len(reads) + 2  # refused, compacted, refused again: no more
    compacting = [line for line in done.stderr.splitlines() if line.endswith("; compacting it")]
    assert len(compacting) == 1
    assert len(errors(done.stderr)) == 1
