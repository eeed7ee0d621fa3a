"""Conversations that outgrow the model's context window keep working (issue 19), shown end to
end as a user meets them: real agent processes against the stub server, which plays each
server's window (its endpoint, its overflow error, Ollama's silent cut) and checks that every
request extends the one before, or begins a compacted conversation anew.

The unit tests of the pieces are in test_context_window.py.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import clean_env, run_agent, run_in_process, saved_messages, stub_env
from fake_model import reply, tool_call
from stub_server import Fail, StubServer, extends, prompt_tokens

import agent as lesson  # this file's agent() runs it against the stub
from minimal_agent.cli import PYTHON
from minimal_agent.core import context_window as cw

SERVERS_THAT_REFUSE = ["deepseek", "vllm", "llamacpp", "ollama"]
FIELD = {"vllm": "reasoning"}  # the name the reasoning comes under; DeepSeek's elsewhere
SUMMARY = "Summary: the user asked to read the part files; they were read one by one."


class Model:
    """A scripted model for the stub, as one callable script item used for every request: a
    request with tools gets the next of steps (an assistant message, or a function of the
    request returning one); a request without tools (a compaction's summary) gets SUMMARY, or
    what summaries gives."""

    def __init__(self, steps: list, server: str = "deepseek", summaries: list | None = None):
        self.steps = list(steps)
        self.field = FIELD.get(server, "reasoning_content")
        self.summaries = summaries
        self.summary_requests: list[dict] = []

    def __call__(self, request: dict) -> dict:
        if not request.get("tools"):
            self.summary_requests.append(request)
            return reply(self.summaries.pop(0) if self.summaries else SUMMARY)
        assert self.steps, "the model was asked more often than scripted"
        step = self.steps.pop(0)
        message = dict(step(request) if callable(step) else step)
        if "reasoning_content" in message and self.field != "reasoning_content":
            message[self.field] = message.pop("reasoning_content")
        return message

    def script(self, extra: int = 40) -> list:
        """Enough script items for the steps and any number of summaries."""
        return [self] * (len(self.steps) + extra)


def read(number: int, path: str, why: str = "Read the next part.") -> dict:
    """A step calling read_file; its id is 9 letters and digits (llama.cpp's Mistral rule)."""
    return reply(None, tool_call("read_file", {"path": path}, f"call{number:05}"), reasoning=why)


def shell(number: int, command: str) -> dict:
    return reply(
        None, tool_call("run_shell", {"command": command}, f"call{number:05}"), reasoning="Run it."
    )


def answer(text: str = "All parts are read.") -> dict:
    return reply(text, reasoning="Done.")


def part_files(folder: Path, count: int, chars: int) -> list[str]:
    """count text files of chars characters each in folder, each line naming its file."""
    names = []
    for number in range(1, count + 1):
        name = f"part{number}.txt"
        line = f"{name} line: " + "lorem ipsum dolor sit amet " * 3 + "\n"
        (folder / name).write_text((line * (chars // len(line) + 1))[:chars])
        names.append(name)
    return names


def reading(names: list[str], final: str = "All parts are read.") -> list[dict]:
    """A model that reads each file in turn, then answers."""
    return [read(n, name) for n, name in enumerate(names, 1)] + [answer(final)]


def agent(stub: StubServer, workdir: Path, *args: str, stdin: str = "", run=run_in_process,
          **settings: str):  # fmt: skip
    """The agent against the stub at its /v1, as a local server is set up; in this process
    unless run=run_agent."""
    env = stub_env(stub, **{"LLM_BASE_URL": f"{stub.url}/v1", **settings})
    return run("--workdir", str(workdir), "--no-stream", *args, env=env, stdin=stdin)


def entries(path: Path) -> list[dict]:
    """Every line of a transcript: messages and events."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compactions(path: Path) -> list[dict]:
    return [entry for entry in entries(path) if entry.get("event") == "compaction"]


def context_lines(stderr: str, start: str = "context:") -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(start)]


def within(stub: StubServer) -> list[int]:
    """Each accepted request's prompt tokens as the stub counts them (all must fit)."""
    return [prompt_tokens(request) for request in stub.requests]


def fits(stub: StubServer) -> bool:
    counts = within(stub) + [prompt_tokens(request) for request in stub.side_requests]
    return all(count <= stub.window for count in counts)


# --- 1. The server refuses: compacted and sent again, once ---------------------------------------


@pytest.mark.parametrize("server", SERVERS_THAT_REFUSE)
def test_a_refused_request_is_compacted_and_sent_again(server, workdir, tmp_path):
    """The agent believes in a window far larger than the server's (LLM_CONTEXT_TOKENS set
    wrong): the server refuses with its own words, the agent compacts once and goes on."""
    names = part_files(workdir, 6, 5_000)
    model = Model(reading(names), server)
    save = tmp_path / "run.jsonl"
    with StubServer(
        model.script(),
        server=server,
        window=4_096,
        ollama_truncates=False,
        compactions_allowed=True,
    ) as stub:
        done = agent(
            stub, workdir, "--save", str(save), "Read every part.", LLM_CONTEXT_TOKENS="1000000"
        )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "All parts are read.\n"
    assert stub.problems == []
    assert stub.rejected.count("context overflow") == 1  # refused once, then it fitted
    said = context_lines(done.stderr)
    assert said[0] == "context: the server says the conversation does not fit; compacting it"
    assert said[1].startswith("context: compacted the conversation")
    assert stub.compactions  # the resent request began a compacted conversation
    assert fits(stub)
    assert model.steps == []  # every step was asked for: the run went on to its end
    assert len(compactions(save)) >= 1


@pytest.mark.parametrize("server", SERVERS_THAT_REFUSE)
def test_one_result_larger_than_the_window_is_dropped_and_read_again(server, workdir, tmp_path):
    """The first tool result alone outgrows the window (a big file read while the agent took the
    window to be large): it becomes a note, the request is sent again, and the file read again
    comes capped for the window the server named."""
    (workdir / "big.txt").write_text("a long line of the big file\n" * 3_000)  # 84 KB
    model = Model([read(1, "big.txt"), read(2, "big.txt"), answer("Read it.")], server)
    save = tmp_path / "run.jsonl"
    with StubServer(
        model.script(),
        server=server,
        window=4_096,
        ollama_truncates=False,
        compactions_allowed=True,
    ) as stub:
        done = agent(
            stub, workdir, "--save", str(save), "Read big.txt.", LLM_CONTEXT_TOKENS="1000000"
        )

    assert done.returncode == 0, done.stderr
    assert stub.problems == [] and stub.rejected.count("context overflow") == 1
    assert fits(stub)
    [record] = compactions(save)
    first, second = [m for m in saved_messages(save) if m["role"] == "tool"]
    assert 19_000 < len(first["content"]) <= 20_000  # the transcript keeps it whole
    [note] = [m for m in record["messages"] if m["role"] == "tool"]
    assert note["content"].startswith(cw.ELIDED) and "big.txt" in note["content"]
    # Read again, capped for the window: the one named (Ollama names none: then a window
    # smaller than what was refused).
    if server == "ollama":
        assert len(second["content"]) < len(first["content"]) / 3
    else:
        assert len(second["content"]) <= cw.result_cap(4_096, lesson.MAX_RESULT_CHARS) + 100


def test_when_even_the_compacted_conversation_does_not_fit_the_run_ends_in_one_line(
    workdir, tmp_path
):
    """A task that nearly fills the window by itself: after the file is read nothing can make
    the request fit. The agent compacts and sends it again once, then stops: exit 1, one line,
    and the transcript goes on later against a server with a larger window."""
    (workdir / "notes.txt").write_text("a note\n" * 2_000)
    task = "Read notes.txt, then check this list: " + "item, " * 2_000 + "the end."
    with StubServer([answer("measured")]) as measure:  # the first request's size, as counted
        assert agent(measure, workdir, "--no-save", task).returncode == 0
    window = prompt_tokens(measure.requests[0]) + 30  # it fits; with a call and a note, not

    save = tmp_path / "run.jsonl"
    model = Model([read(1, "notes.txt"), answer("never")])
    with StubServer(model.script(), window=window, compactions_allowed=True) as stub:
        done = agent(stub, workdir, "--save", str(save), task, LLM_CONTEXT_TOKENS="1000000")

    assert done.returncode == 1
    assert stub.rejected == ["context overflow"] * 2  # sent again once after compacting, no more
    assert stub.problems == []
    error, totals = done.stderr.splitlines()[-2:]  # the totals: a reply was paid for
    assert totals.startswith("steps 1, tool calls 1, ")
    assert error.startswith("error: the server answered 400 (This model's maximum context")
    assert "longer than the model accepts even after compacting it" in error
    assert f"the transcript is in {save}" in error
    assert [line for line in done.stderr.splitlines() if line.startswith("error")] == [error]
    assert len(compactions(save)) == 1

    # Later, with a larger window: the conversation goes on from the compacted one.
    more = Model([answer("Done at last.")])
    with StubServer(more.script(), window=100_000) as larger:
        later = agent(larger, workdir, "-r", str(save), "Go on.", LLM_CONTEXT_TOKENS="100000")
    assert later.returncode == 0, later.stderr
    assert later.stdout == "Done at last.\n"
    assert larger.problems == [] and larger.rejected == []
    [record] = compactions(save)
    sent = larger.requests[0]["messages"]
    assert sent == [*record["messages"], {"role": "user", "content": "Go on."}]
    assert [m["content"] for m in saved_messages(save) if m["role"] == "user"] == [task, "Go on."]


# --- 2. The window read from the server: compacted before it refuses ---------------------------


@pytest.mark.parametrize("server", ["llamacpp", "ollama", "vllm", "lmstudio"])
def test_the_window_from_the_servers_endpoint_is_kept(server, workdir, tmp_path):
    """No LLM_CONTEXT_TOKENS: the window comes from the server's own endpoint, and a task that
    outgrows it is compacted before the server would refuse it, or cut it (Ollama)."""
    names = part_files(workdir, 10, 6_000)
    model = Model(reading(names), server)
    save = tmp_path / "run.jsonl"
    with StubServer(
        model.script(), server=server, window=4_096, model="qwen3:8b", compactions_allowed=True
    ) as stub:
        done = agent(
            stub,
            workdir,
            "--save",
            str(save),
            "Read every part.",
            LLM_MODEL="qwen3:8b",
            LLM_MAX_TOKENS="512",
        )

    assert done.returncode == 0, done.stderr
    assert stub.problems == []
    assert stub.rejected == [] or stub.rejected == ["content null"]  # Ollama's own quirk
    assert stub.truncated == []  # Ollama never had to cut it
    assert len(compactions(save)) >= 2
    assert stub.compactions or all(
        extends(later, earlier) for earlier, later in zip(stub.sent, stub.sent[1:], strict=False)
    )
    room = 512 if server in ("vllm", "lmstudio") else 0
    assert max(within(stub)) + room <= 4_096
    assert fits(stub)
    assert "the server says the conversation does not fit" not in done.stderr
    assert model.steps == []
    asked = {probe["path"] for probe in stub.probes}
    endpoint = {
        "llamacpp": "/props",
        "ollama": "/api/show",
        "vllm": "/v1/models",
        "lmstudio": "/api/v0/models",
    }[server]
    assert endpoint in asked


def test_the_window_from_llm_context_tokens(workdir, tmp_path):
    """LLM_CONTEXT_TOKENS set: the server is not asked, and its window is kept."""
    names = part_files(workdir, 10, 6_000)
    model = Model(reading(names))
    save = tmp_path / "run.jsonl"
    with StubServer(model.script(), window=4_096, compactions_allowed=True) as stub:
        done = agent(
            stub,
            workdir,
            "--save",
            str(save),
            "Read every part.",
            LLM_MODEL="my-model",
            LLM_CONTEXT_TOKENS="4096",
        )
    assert done.returncode == 0, done.stderr
    assert stub.problems == [] and stub.rejected == []
    assert stub.probes == []
    assert compactions(save) and fits(stub)


@pytest.mark.long
def test_a_server_without_window_endpoints_neither_slows_nor_fails_the_start(workdir):
    """Every window endpoint answers 404 and the model is not a known one: the agent asks, in
    the background, finds nothing, and runs as fast as when the window is set. The two runs
    of each round run side by side, so a busy machine slows both alike: as processes, each
    timed from its start, as a user would see it: new interpreters, not forked ones, whose
    SDK is imported already (the probe runs while a new one imports it)."""

    def started_anew(*args: str, **given) -> subprocess.CompletedProcess:
        return run_agent(*args, fork=False, **given)

    def run(seconds: list, stubs: list, **settings: str) -> None:
        with StubServer([answer("hello")]) as stub:
            started = time.perf_counter()
            done = agent(stub, workdir, "--no-save", "Say hi.", run=started_anew,
                         LLM_MODEL="some-model", **settings)  # fmt: skip
            took = time.perf_counter() - started
        assert done.returncode == 0 and done.stdout == "hello\n", done.stderr
        seconds.append(took)
        stubs.append(stub)

    asked, told, stubs = [], [], []
    for _ in range(3):
        both = [
            threading.Thread(target=run, args=(asked, stubs)),
            threading.Thread(target=run, args=(told, stubs), kwargs={"LLM_CONTEXT_TOKENS": "8192"}),
        ]
        for thread in both:
            thread.start()
        for thread in both:
            thread.join()
    assert len(asked) == len(told) == 3  # every run ended as it should
    assert all(stub.problems == [] for stub in stubs)
    probed = [{p["path"] for p in stub.probes} for stub in stubs if stub.probes]
    assert probed == [{"/props", "/api/show", "/v1/models", "/api/v0/models"}] * 3
    # Waiting for the probe would cost up to PROBE_SECONDS (2 s); this much is noise.
    slower = [a - t for a, t in zip(asked, told, strict=True)]
    assert statistics.median(slower) < 0.75, (asked, told)


# --- 3. Ollama cuts silently: one warning ------------------------------------------------------


def test_ollamas_silent_cut_is_warned_of_once(workdir, tmp_path):
    """Ollama run with its default window, the model's num_ctx unset: /api/show gives only the
    trained length, and the server cuts the conversation silently to its real window. The
    agent notices, says so once, and keeps the rest of the run within the window."""
    names = part_files(workdir, 10, 5_000)
    model = Model(reading(names), "ollama")
    save = tmp_path / "run.jsonl"
    with StubServer(
        model.script(),
        server="ollama",
        window=4_096,
        num_ctx_in_parameters=False,
        trained=40_960,
        model="qwen3:8b",
        compactions_allowed=True,
    ) as stub:
        done = agent(stub, workdir, "--save", str(save), "Read every part.", LLM_MODEL="qwen3:8b")

    assert done.returncode == 0, done.stderr
    assert stub.problems == []
    warnings = [line for line in done.stderr.splitlines() if "cut the conversation" in line]
    assert len(warnings) == 1, done.stderr
    [warning] = warnings
    assert warning.startswith("warning: the server seems to have cut the conversation")
    assert "num_ctx" in warning and "OLLAMA_CONTEXT_LENGTH" in warning
    assert len(stub.truncated) == 1  # cut once; from then on the agent kept within the window
    after = done.stderr.split(warning, 1)[1].splitlines()
    compacted = next(n for n, line in enumerate(after) if line.startswith("context: compacted"))
    steps = [n for n, line in enumerate(after) if line.startswith("[")]
    assert steps[0] < compacted < steps[1]  # the next request was compacted, and the run went on
    assert model.steps == []


# --- 4. A --chat session with large tool outputs in a small window ------------------------------

LONG_LOG = f"{PYTHON} -c \"for n in range(4000): print('log line', n, 'of the build')\""


def test_a_chat_with_large_outputs_stays_in_a_small_window(workdir, tmp_path):
    """Four --chat turns of big files and a command that prints 100 KB, against llama.cpp run
    with -c 4096: every result is capped for that window, the conversation is compacted as
    it grows, and every request fits."""
    part_files(workdir, 5, 12_000)
    steps = [
        read(1, "part1.txt"),
        read(2, "part2.txt"),
        answer("Parts 1 and 2 are read."),
        shell(3, LONG_LOG),
        answer("The log has 4000 lines."),
        read(4, "part3.txt"),
        read(5, "part4.txt"),
        read(6, "part5.txt"),
        answer("All read."),
        shell(7, LONG_LOG),
        answer("Same log."),
    ]
    turns = "Read part1.txt and part2.txt.\nPrint the log.\nRead parts 3 to 5.\nAgain.\n"
    model = Model(steps, "llamacpp")
    save = tmp_path / "chat.jsonl"
    with StubServer(
        model.script(), server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "--chat", "--yes", "--save", str(save), stdin=turns)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Parts 1 and 2 are read.",
        "The log has 4000 lines.",
        "All read.",
        "Same log.",
    ]
    assert "session: turns 4" in done.stderr
    assert stub.problems == [] and stub.rejected == []
    assert fits(stub)
    assert len(compactions(save)) >= 2
    results = [m["content"] for m in saved_messages(save) if m["role"] == "tool"]
    assert len(results) == 7
    cap = cw.result_cap(4_096, lesson.MAX_RESULT_CHARS)
    assert cap < 4_000  # the agent's own 20,000 shrank to a quarter of the window
    assert all(len(result) <= cap for result in results)
    assert all("left out" in result for result in results)  # each was larger than the cap


# --- 5. Resuming after a compaction -------------------------------------------------------------


def test_resuming_sends_the_compacted_conversation_and_extends_it(workdir, tmp_path):
    names = part_files(workdir, 10, 6_000)
    save = tmp_path / "run.jsonl"
    first = Model(reading(names), "llamacpp")
    with StubServer(
        first.script(), server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "--save", str(save), "Read every part.")
    assert done.returncode == 0 and stub.problems == [], done.stderr
    history = saved_messages(save)
    record = compactions(save)[-1]
    assert record["covers"] < len(history)  # steps came after the last compaction

    (workdir / "small.txt").write_text("a small file\n")
    then = Model([read(50, "small.txt"), answer("It says: a small file.")], "llamacpp")
    with StubServer(
        then.script(), server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "-r", str(save), "What does small.txt say?")

    assert done.returncode == 0, done.stderr
    assert done.stdout == "It says: a small file.\n"
    assert stub.problems == [] and stub.rejected == [] and stub.compactions == []
    task = {"role": "user", "content": "What does small.txt say?"}
    # The compacted conversation, not the one that outgrew the window, then what followed it.
    sent = stub.requests[0]["messages"]
    assert sent == [*record["messages"], *history[record["covers"] :], task]
    assert len(json.dumps(sent)) < len(json.dumps([*history, task])) / 2
    assert extends(stub.sent[1], stub.sent[0])  # and the next request extends it
    # The transcript keeps every original message, whole.
    kept = saved_messages(save)
    assert kept[: len(history)] == history
    assert [m for m in kept if m["role"] == "tool" and m["content"].startswith(cw.ELIDED)] == []
    assert len([m for m in kept if m["role"] == "tool"]) == 11

    # --show marks where each compaction happened.
    shown = run_agent("--show", str(save), env=stub_env(stub)).stdout.splitlines()
    marks = [n for n, line in enumerate(shown) if line.startswith("    --- compacted")]
    assert len(marks) == len(compactions(save))
    for mark, compaction in zip(marks, compactions(save), strict=True):
        covers = compaction["covers"]
        assert shown[mark - 1].startswith(f"{covers:3} "), shown[mark - 1]
        assert shown[mark + 1].startswith(f"{covers + 1:3} ") or shown[mark + 1].startswith("  ")
        assert (
            f"the {covers} messages above are sent as {len(compaction['messages'])}"
            in (shown[mark])
        )


def test_a_transcript_from_before_compactions_resumes_and_is_compacted(workdir, tmp_path):
    """A transcript of messages only (no events: written before this change), longer than the
    window: it resumes, and is compacted before the first request."""
    history = [
        {"role": "system", "content": "You are a small coding agent."},
        {"role": "user", "content": "Read the parts."},
    ]
    for number in range(1, 9):
        call = tool_call("read_file", {"path": f"part{number}.txt"}, f"call{number:05}")
        history.append(reply(None, call, reasoning="Read the next part."))
        text = f"part {number} line of the old transcript\n" * 100
        history.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    history.append(answer())
    save = tmp_path / "old.jsonl"
    save.write_text("".join(json.dumps(message) + "\n" for message in history))

    model = Model([answer("Eight parts.")], "llamacpp")
    with StubServer(
        model.script(), server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "-r", str(save), "How many parts were there?")

    assert done.returncode == 0, done.stderr
    assert stub.problems == [] and stub.rejected == [] and fits(stub)
    [record] = compactions(save)
    assert record["covers"] == len(history) + 1  # the new question too
    assert stub.requests[0]["messages"] == record["messages"]
    assert saved_messages(save)[: len(history)] == history


def test_a_cut_short_turn_with_a_result_larger_than_the_window_resumes_without_a_refusal(
    workdir, tmp_path
):
    """The agent stopped right after a read of a huge file (its window then unknown): resumed
    against a server whose window it reads, that result becomes a note before the first
    request, so the server never refuses, and the file read again fits."""
    (workdir / "big.txt").write_text("a long line of the big file\n" * 3_000)
    # (The stub checks the thinking sent back against what it served, in order: this step's is
    # the same as the one it serves first.)
    history = [
        {"role": "system", "content": "You are a small coding agent."},
        {"role": "user", "content": "Read big.txt."},
        read(1, "big.txt"),
        {"role": "tool", "tool_call_id": "call00001", "content": "a long line\n" * 3_000},
    ]
    save = tmp_path / "cut.jsonl"
    save.write_text("".join(json.dumps(message) + "\n" for message in history))
    model = Model([read(2, "big.txt"), answer("It is long.")], "llamacpp")
    with StubServer(
        model.script(), server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "-r", str(save), "Go on.")

    assert done.returncode == 0, done.stderr
    assert stub.problems == [] and stub.rejected == [] and fits(stub)
    first = stub.requests[0]["messages"]
    assert first[3]["content"].startswith(cw.ELIDED) and first[4]["content"] == "Go on."
    assert saved_messages(save)[:4] == history


# --- 6. A refused turn, tried again, is in the transcript once ----------------------------------


@pytest.mark.parametrize("refusal", ["overflow", "key"])
def test_a_refused_turn_tried_again_is_not_added_again(refusal, workdir, tmp_path):
    save = tmp_path / "run.jsonl"
    (workdir / "notes.txt").write_text("a note\n" * 500)
    with StubServer(Model([read(1, "notes.txt"), answer("Read.")]).script()) as stub:
        assert agent(stub, workdir, "--save", str(save), "Read notes.txt.").returncode == 0
    task = "Check this list: " + "item, " * 3_000 + "the end."  # about 4,500 tokens

    for attempt in range(2):
        small = {"overflow": {"window": 4_096}, "key": {"api_key": "another-key"}}[refusal]
        with StubServer([answer("never")], compactions_allowed=True, **small) as stub:
            done = agent(stub, workdir, "-r", str(save), task, LLM_API_KEY="test-key")
        assert done.returncode == 1, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and errors[0].startswith("error: the server answered")
        if refusal == "overflow":  # compacted and sent again; then nothing more to compact
            assert stub.rejected == ["context overflow"] * (2 - attempt)
            assert stub.side_requests == [] if attempt else len(stub.side_requests) == 1
        users = [m["content"] for m in saved_messages(save) if m["role"] == "user"]
        assert users == ["Read notes.txt.", task], attempt

    with StubServer([answer("All items checked.")], window=100_000) as stub:
        done = agent(stub, workdir, "-r", str(save), task)
    assert done.returncode == 0, done.stderr
    assert stub.problems == []
    sent = [m["content"] for m in stub.requests[0]["messages"] if m["role"] == "user"]
    assert sent.count(task) == 1
    users = [m["content"] for m in saved_messages(save) if m["role"] == "user"]
    assert users == ["Read notes.txt.", task]


# --- 7. /compact in --chat -----------------------------------------------------------------------


def test_compact_in_a_chat_compacts_everything_so_far(workdir, tmp_path):
    (workdir / "notes.txt").write_text("the first note says hello\n" * 100)
    (workdir / "more.txt").write_text("more notes\n")
    steps = [
        read(1, "notes.txt"),
        answer("It says hello."),
        read(2, "more.txt"),
        answer("More notes."),
    ]
    model = Model(steps, summaries=["The user had notes.txt read: it says hello."])
    save = tmp_path / "chat.jsonl"
    turns = "What does notes.txt say?\n/compact\nAnd more.txt?\n"
    with StubServer(model.script(), compactions_allowed=True) as stub:
        done = agent(stub, workdir, "--chat", "--save", str(save), stdin=turns)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "It says hello.\nMore notes.\n"
    assert stub.problems == []
    assert "context: asking the model to summarize the earlier conversation" in done.stderr
    assert "context: compacted the conversation (earlier turns replaced by a summary)" in (
        done.stderr
    )
    # The summary was written from everything so far, the last turn's tool result included.
    [summary_request] = model.summary_requests
    quoted = summary_request["messages"][-1]["content"]
    assert "What does notes.txt say?" in quoted
    assert "[tool result of read_file(path='notes.txt')]" in quoted
    assert "the first note says hello" in quoted
    # "/compact" was no message; the next turn began the compacted conversation and extended it.
    sent = [m for request in stub.requests for m in request["messages"]]
    assert all(m.get("content") != "/compact" for m in sent)
    assert stub.compactions == [3]
    third = stub.requests[2]["messages"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user"]
    assert third[1]["content"].startswith(cw.SUMMARY_HEADING)
    assert third[1]["content"].endswith("The user had notes.txt read: it says hello.")
    assert third[2]["content"] == "It says hello." and third[3]["content"] == "And more.txt?"
    assert extends(stub.sent[3], stub.sent[2])
    [record] = compactions(save)
    assert record["kind"] == "summary" and record["covers"] == 5
    users = [m["content"] for m in saved_messages(save) if m["role"] == "user"]
    assert users == ["What does notes.txt say?", "And more.txt?"]


def test_compact_without_a_summary_drops_every_tool_result(workdir, tmp_path):
    """The summary request fails: /compact falls back on notes for every tool result, the last
    turn's included."""
    (workdir / "notes.txt").write_text("the first note says hello\n" * 100)
    model = Model([read(1, "notes.txt"), answer("It says hello."), answer("Yes.")])
    script = [model, model, Fail(400, "no summaries today"), model]
    turns = "/compact\nWhat does notes.txt say?\n/compact\nSure?\n"
    with StubServer(script, compactions_allowed=True) as stub:
        done = agent(stub, workdir, "--chat", "--no-save", stdin=turns)

    assert done.returncode == 0, done.stderr
    assert stub.problems == []
    said = context_lines(done.stderr)
    assert said[0] == "context: nothing to compact yet"  # before the first turn
    assert said[2].startswith("context: no summary (")
    assert said[3].startswith("context: compacted the conversation (old tool results replaced")
    third = stub.requests[2]["messages"]
    [note] = [m for m in third if m["role"] == "tool"]
    assert note["content"].startswith(cw.ELIDED)
    assert stub.compactions == [3]


# --- Replaying a conversation that was compacted with summaries ---------------------------------


def test_a_replay_serves_the_recorded_summaries_not_the_next_reply(workdir, tmp_path):
    """Long thinking that notes cannot shorten: the run's compactions were summaries. Replayed
    offline, a summary request gets a recorded summary, never the next recorded reply, so the
    replay goes through every step to the same answer."""
    names = part_files(workdir, 12, 300)
    thinking = "Let me think about this part. " * 80
    steps = [read(n, name, thinking) for n, name in enumerate(names, 1)] + [answer()]
    model = Model(steps, "llamacpp")
    save = tmp_path / "run.jsonl"
    with StubServer(
        model.script(), server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "--save", str(save), "Read every part.")
    assert done.returncode == 0 and stub.problems == [], done.stderr
    assert "summary" in [record["kind"] for record in compactions(save)]

    env = clean_env(LLM_CONTEXT_TOKENS="4096")
    replayed = run_in_process("--workdir", str(workdir), "--replay", str(save), env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == done.stdout
    assert "left the recorded path" not in replayed.stderr
    assert replayed.stderr.count("read_file(") == 12
