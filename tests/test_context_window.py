"""minimal_agent/core/context_window.py: knowing the window, recognising a full one, compacting the
conversation sent to the model (tool results, then a summary), and the state across requests.

Pure functions are tested on message lists; window discovery, overflow errors, silent
truncation and whole sessions against the stub server on 127.0.0.1, which plays each server.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
from fake_model import reply, tool_call
from stub_server import StubServer, check_messages

import agent
from minimal_agent.core import context_window as cw
from minimal_agent.core import window_probe

ROOT = Path(cw.__file__).resolve().parent.parent

SYSTEM = {"role": "system", "content": "You are a small coding agent."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def step(number: int, result_chars: int = 3_000, reasoning: str = "Read the next file.") -> list:
    """One step: an assistant message calling read_file, and its tool result."""
    call = tool_call("read_file", {"path": f"part{number}.txt"}, f"call{number:05}")
    return [reply(None, call, reasoning=reasoning), tool_message(call["id"], result_chars, number)]


def tool_message(call_id: str, chars: int, number: int = 0) -> dict:
    text = (f"line {number}: " + "x" * 60 + "\n") * (chars // 60 + 1)
    return {"role": "tool", "tool_call_id": call_id, "content": text[:chars]}


def conversation(steps: int = 8, result_chars: int = 3_000, turns: int = 1) -> list[dict]:
    """system, then turns of (user, steps of read_file, a final answer), the last turn without
    its final answer (a request is due)."""
    messages = [SYSTEM]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Task {turn}: read the parts."})
        for number in range(steps):
            messages += step(turn * 100 + number, result_chars)
        if turn < turns - 1:
            messages.append(reply(f"Done with task {turn}.", reasoning="All read."))
    return messages


def valid(messages: list[dict]) -> list[str]:
    """What a strict provider would reject in messages (the stub's own check)."""
    return check_messages(messages, [], None)


def same_bytes(a: dict, b: dict) -> bool:
    return json.dumps(a) == json.dumps(b)


# --- Settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, share", [(None, 0.9), ("", 0.9), ("0.5", 0.5), ("1", 1.0)])
def test_compact_at_setting(text, share):
    assert cw.compact_at_setting(text) == share


@pytest.mark.parametrize("text", ["0", "1.5", "-0.2", "ninety", "nan", "inf"])
def test_compact_at_setting_refuses_what_is_no_share(text):
    with pytest.raises(ValueError, match="LLM_COMPACT_AT must be a number above 0") as caught:
        cw.compact_at_setting(text)
    assert "\n" not in str(caught.value)


def test_context_tokens_setting():
    assert cw.context_tokens_setting(None) is None
    assert cw.context_tokens_setting(" ") is None
    assert cw.context_tokens_setting("131072") == 131_072
    assert cw.context_tokens_setting("131_072") == 131_072
    for text in ("0", "-5", "1.5", "lots"):
        with pytest.raises(ValueError, match="LLM_CONTEXT_TOKENS must be a whole number"):
            cw.context_tokens_setting(text)


# --- Knowing the window: what each server's answer holds ---------------------------------------


def test_window_from_each_answer():
    assert window_probe.window_from_props({"default_generation_settings": {"n_ctx": 8192}}) == 8192
    assert window_probe.window_from_props({"default_generation_settings": {}}) is None
    assert window_probe.window_from_props("not json object") is None

    show = {"parameters": "stop <|im_end|>\nnum_ctx    16384\n", "model_info": {}}
    assert window_probe.window_from_show(show) == 16384
    info = {"general.architecture": "llama", "llama.context_length": 131072}
    assert window_probe.window_from_show({"parameters": "stop x", "model_info": info}) == 131072
    assert window_probe.window_from_show({"model_info": {"qwen3.context_length": 40960}}) == 40960
    assert window_probe.window_from_show({"model_info": {"general.architecture": "x"}}) is None

    models = {"data": [{"id": "a", "max_model_len": 4096}, {"id": "b", "max_model_len": 32768}]}
    assert window_probe.window_from_models(models, "b") == 32768
    assert window_probe.window_from_models(models, "c") is None  # which one? unknown
    assert (
        window_probe.window_from_models({"data": [{"id": "a", "max_model_len": 4096}]}, "z") == 4096
    )
    assert window_probe.window_from_models({"data": [{"id": "a"}]}, "a") is None  # Ollama's list

    loaded = {"id": "m", "loaded_context_length": 8192, "max_context_length": 131072}
    assert window_probe.window_from_lmstudio({"data": [loaded]}, "m") == 8192
    assert (
        window_probe.window_from_lmstudio({"data": [{"id": "m", "max_context_length": 4096}]}, "m")
        == 4096
    )
    assert window_probe.window_from_props({"default_generation_settings": {"n_ctx": True}}) is None


def test_api_root():
    assert window_probe.api_root("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080"
    assert window_probe.api_root("http://127.0.0.1:8080/v1/") == "http://127.0.0.1:8080"
    assert window_probe.api_root("http://127.0.0.1:11434") == "http://127.0.0.1:11434"


def test_the_setting_wins_and_deepseek_is_not_asked(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the server was asked")

    monkeypatch.setattr(window_probe, "fetch_json", no_network)
    setting = {"context_tokens": "32768", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    assert window_probe.find_window(setting)() == 32768
    deepseek = {"base_url": "https://api.deepseek.com", "model": "deepseek-v4-pro"}
    assert window_probe.find_window(deepseek)() == 1_048_576
    assert window_probe.find_window({**deepseek, "model": "deepseek-v9"})() is None
    with pytest.raises(ValueError):
        window_probe.find_window({**setting, "context_tokens": "big"})


# --- Knowing the window: asking the stub, as each server ----------------------------------------


@pytest.mark.parametrize("server", ["llamacpp", "ollama", "vllm", "lmstudio"])
def test_each_server_is_asked_for_its_window(server):
    with StubServer([], server=server, window=12_288, model="qwen3:8b") as stub:
        settings = {"base_url": stub.url + "/v1", "model": "qwen3:8b", "api_key": stub.api_key}
        found = window_probe.find_window(settings)  # in the background: see the silent server
        assert found() == 12_288
    asked = [p for p in stub.probes if p["headers"].get("authorization")]
    assert asked and all(p["headers"]["authorization"] == "Bearer test-key" for p in asked)


def test_ollama_without_num_ctx_gives_the_trained_length():
    with StubServer([], server="ollama", window=40_960, num_ctx_in_parameters=False) as stub:
        assert window_probe.probe_window(stub.url, "qwen3:8b", stub.api_key) == 40_960
    assert stub.probes[-1]["path"] == "/api/show"


def test_a_server_without_window_endpoints_is_no_problem():
    with StubServer([]) as stub:  # no window: every window endpoint is a 404
        started = time.monotonic()
        assert (
            window_probe.probe_window(stub.url + "/v1", "some-model", stub.api_key, timeout=10)
            is None
        )
        assert time.monotonic() - started < 5  # each 404 ends its try: the time-out is not waited
        settings = {"base_url": stub.url + "/v1", "model": "deepseek-flash"}
        assert window_probe.find_window(settings)() == 1_048_576  # then the table


def test_a_dead_port_gives_none_at_once():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    assert window_probe.probe_window(f"http://127.0.0.1:{port}/v1", "m", timeout=10) is None
    assert time.monotonic() - started < 5  # refused at once: the time-out is not waited


def test_a_silent_server_gives_none_within_the_timeout():
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        started = time.monotonic()
        collect = window_probe.start_probe(url, "m", timeout=2)
        # Bounds of the time-out's size, not the machine's speed: a start-up that waited for
        # the server would take the time-out, a collect that did not give up at it the SDK's
        # own (minutes).
        assert time.monotonic() - started < 1  # start-up does not wait
        assert collect() is None
        assert time.monotonic() - started < 2 + 5


def test_openai_is_not_imported():
    code = "import sys, minimal_agent.core.context_window; print('openai' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr


# --- A full context --------------------------------------------------------------------------


class Error(Exception):
    def __init__(self, status_code, body, message=""):
        super().__init__(message)
        self.status_code, self.body, self.message = status_code, body, message


DEEPSEEK = (
    "This model's maximum context length is 1048576 tokens. However, you requested 1100000 "
    "tokens (1000000 in the messages, 100000 in the completion). Please reduce the length of "
    "the messages or completion."
)
LLAMACPP = {
    "code": 400,
    "message": "request (9000 tokens) exceeds the available context size (8192 tokens), "
    "try increasing it",
    "type": "exceed_context_size_error",
    "n_prompt_tokens": 9000,
    "n_ctx": 8192,
}
OLLAMA = "the prompt is longer than the context length currently available to the model"


@pytest.mark.parametrize(
    "error, window",
    [
        (Error(400, {"error": {"message": DEEPSEEK, "type": "invalid_request_error"}}), 1_048_576),
        (Error(400, {"object": "error", "message": DEEPSEEK, "type": "BadRequestError"}), 1048576),
        (Error(400, {"error": LLAMACPP}), 8192),
        (Error(400, {"error": {"message": OLLAMA}}), None),
        (Error(400, None, f"Error code: 400 - {OLLAMA}"), None),
    ],
)
def test_overflow_errors_are_recognised(error, window):
    assert cw.is_context_overflow(error)
    assert cw.window_in_error(error) == window


@pytest.mark.parametrize(
    "error",
    [
        Error(400, {"error": {"message": "Model Not Exist"}}),
        Error(401, {"error": {"message": "Authentication Fails"}}),
        Error(200, {"error": {"message": DEEPSEEK}}),
        ValueError("something else"),
    ],
)
def test_other_errors_are_no_overflow(error):
    assert not cw.is_context_overflow(error)


@pytest.mark.parametrize(
    "server, window",
    [("deepseek", 4000), ("vllm", 4000), ("llamacpp", 4000), ("ollama", None), ("lmstudio", 4000)],
)
def test_each_servers_overflow_through_the_sdk(server, window):
    with StubServer([reply("never")], server=server, window=4000, ollama_truncates=False) as stub:
        client = openai.OpenAI(api_key=stub.api_key, base_url=stub.url, max_retries=0)
        messages = [SYSTEM, {"role": "user", "content": "x" * 20_000}]
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert caught.value.status_code == 400
    assert cw.is_context_overflow(caught.value)
    assert cw.window_in_error(caught.value) == window
    assert stub.rejected == ["context overflow"] and not stub.problems


def test_max_tokens_counts_against_the_window_on_deepseek():
    with StubServer([reply("fits")], window=4000) as stub:
        client = openai.OpenAI(api_key=stub.api_key, base_url=stub.url, max_retries=0)
        messages = [SYSTEM, {"role": "user", "content": "x" * 8_000}]  # about 2,100 tokens
        with pytest.raises(openai.BadRequestError, match="2000 in the completion"):
            client.chat.completions.create(
                model="m", messages=messages, tools=TOOLS, max_tokens=2000
            )
        client.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=100)
    assert not stub.problems


# --- Estimates and the cap on one tool result ----------------------------------------------------


def test_estimate_tokens():
    messages = conversation(2)
    size = len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode())
    assert cw.estimate_tokens(messages) == -(-size // 3)
    assert cw.estimate_tokens(messages, overhead=100) == -(-size // 3) + 100
    # The server's count for what it was sent, plus an estimate for what came after.
    added = messages[3:]
    added_size = len(json.dumps(added, ensure_ascii=False, separators=(",", ":")).encode())
    assert cw.estimate_tokens(messages, 500, 3) == 500 + -(-added_size // 3)
    assert cw.estimate_tokens(messages, 500, len(messages)) == 500
    assert cw.estimate_tokens([{"role": "user", "content": "é" * 300}]) > 200  # bytes, not chars


def test_result_cap():
    cap = agent.MAX_RESULT_CHARS  # 20,000
    assert cw.result_cap(None, cap) == 20_000
    assert cw.result_cap(8_192, cap) == 6_144  # a quarter of the window, 3 characters a token
    assert cw.result_cap(1_048_576, cap) == 20_000  # never more than the agent's own cap
    assert cw.result_cap(512, cap) == 1_000  # nor less than the floor


# --- Step 1: tool results become notes ----------------------------------------------------------


def test_the_oldest_tool_results_become_notes_until_the_target():
    messages = conversation(10)
    original = copy.deepcopy(messages)
    target = cw.estimate_tokens(messages) // 2
    compacted = cw.elide_tool_results(messages, target)

    assert messages == original  # the history itself is not changed
    assert cw.estimate_tokens(compacted) <= target
    assert valid(compacted) == []
    assert len(compacted) == len(messages)
    notes = [i for i, m in enumerate(compacted) if m["content"] != messages[i]["content"]]
    tool_indexes = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    assert notes == tool_indexes[: len(notes)]  # the oldest first
    assert 0 < len(notes) < len(tool_indexes) - 1  # only as many as needed
    for old, new in zip(messages, compacted, strict=True):
        if new["role"] == "tool":
            assert new["tool_call_id"] == old["tool_call_id"]
        else:
            assert new is old and same_bytes(new, old)  # system, user, assistant: whole
    note = compacted[notes[0]]["content"]
    assert note.startswith(cw.ELIDED)
    assert "read_file(path='part0.txt')" in note and "3,000 characters" in note
    assert "call the tool again" in note


def test_the_latest_step_stays_whole_unless_forced():
    messages = conversation(4)
    everything = cw.elide_tool_results(messages, None)
    assert everything[-1] is messages[-1]  # the latest step's result
    assert all(m["content"].startswith(cw.ELIDED) for m in everything[:-1] if m["role"] == "tool")
    assert cw.elide_tool_results(messages, 0)[-1] is messages[-1]  # whatever the target
    forced = cw.elide_tool_results(messages, None, force=True)
    assert forced[-1]["content"].startswith(cw.ELIDED)
    assert valid(forced) == []


def test_short_and_elided_results_stay_as_they_are():
    messages = [SYSTEM, {"role": "user", "content": "go"}]
    messages += step(1, result_chars=40) + step(2) + step(3)
    once = cw.elide_tool_results(messages, None)
    assert once[3] is messages[3]  # shorter than its note
    assert once[5]["content"].startswith(cw.ELIDED)
    twice = cw.elide_tool_results(once, None)
    assert all(a is b for a, b in zip(once, twice, strict=True))


def test_a_turn_after_a_final_answer_keeps_that_answer_and_the_new_message():
    messages = conversation(3) + [reply("Done.", reasoning=""), {"role": "user", "content": "and?"}]
    compacted = cw.elide_tool_results(messages, None)
    assert compacted[-2:] == messages[-2:]
    assert all(m["content"].startswith(cw.ELIDED) for m in compacted if m["role"] == "tool")
    assert valid(compacted) == []


# --- Step 2: a summary ------------------------------------------------------------------------


def test_summary_split_keeps_the_last_turn_when_it_fits():
    messages = conversation(3, turns=3)
    head, older, tail = cw.summary_split(messages)
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    assert head == [SYSTEM]
    assert older == messages[1:last_user]
    assert tail == messages[last_user:]


def test_summary_split_keeps_the_user_message_and_latest_step_when_the_turn_is_too_long():
    messages = conversation(6, turns=2)
    head, older, tail = cw.summary_split(messages, tail_tokens=100)
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    assert tail == [messages[last_user], *messages[-2:]]
    assert older == messages[1:-2]  # with that user message, for the summary's sake
    summarised = cw.summary_conversation(head, "We read parts.", tail)
    assert valid(summarised) == []


def test_summary_split_forced_keeps_only_the_latest_step():
    messages = conversation(3) + [reply("All done.", reasoning="Done.")]
    head, older, tail = cw.summary_split(messages, force=True)
    assert tail == [messages[-1]] and older == messages[1:-1]
    # A new user message after the latest step goes with it.
    messages.append({"role": "user", "content": "Next?"})
    assert cw.summary_split(messages)[2] == messages[-2:]


def test_the_summary_request_fits_its_budget():
    messages = conversation(40, result_chars=15_000)
    messages[1]["content"] = "Task: " + "read every part carefully. " * 2_000  # a long task
    head, older, tail = cw.summary_split(messages)
    for budget in (100_000, 20_000, 4_000, 1_500):
        request = cw.summary_request(older, budget)
        assert cw.estimate_tokens(request) <= budget
        assert [m["role"] for m in request] == ["system", "user"]
        assert valid(request) == []
        assert "Task: read every part" in request[1]["content"]  # the task, first
    whole = cw.summary_request(conversation(2, result_chars=100), 100_000)[1]["content"]
    assert "[tool result of read_file(path='part1.txt')]" in whole
    assert "(calls read_file(path='part1.txt'))" in whole
    assert "Read the next file." not in whole  # reasoning is left out


def test_the_summary_conversation():
    head, older, tail = cw.summary_split(conversation(3, turns=2))
    compacted = cw.summary_conversation(head, "<think>hmm</think>\nWe read three parts.", tail)
    assert compacted[0] is SYSTEM
    # The tail begins with the user's message: the summary goes before its text, so that no
    # two user messages follow each other (Gemma's template refuses that).
    assert tail[0]["role"] == "user"
    assert compacted[1]["role"] == "user"
    summary, latest = compacted[1]["content"].split(f"\n\n{cw.SUMMARY_END}\n\n")
    assert summary.startswith(cw.SUMMARY_HEADING)
    assert summary.endswith("We read three parts.")
    assert latest == tail[0]["content"]
    assert all(a is b for a, b in zip(compacted[2:], tail[1:], strict=True))
    assert valid(compacted) == []
    # A tail that begins with a reply keeps the summary as a message of its own.
    alone = cw.summary_conversation(head, "We read three parts.", tail[1:])
    assert alone[1]["role"] == "user" and alone[1]["content"].endswith("We read three parts.")
    assert all(a is b for a, b in zip(alone[2:], tail[1:], strict=True))
    for empty in ("", "  ", "<think>only thinking"):
        with pytest.raises(ValueError, match="empty"):
            cw.summary_conversation(head, empty, tail)


# --- Silent truncation ----------------------------------------------------------------------------


def test_truncated():
    assert cw.truncated(5_000, 3_000, only_grew=True)
    assert not cw.truncated(5_000, 3_000, only_grew=False)  # compacted in between
    assert not cw.truncated(5_000, 5_200, only_grew=True)
    assert not cw.truncated(5_000, 4_990, only_grew=True)  # a template's small difference
    assert not cw.truncated(None, 3_000, only_grew=True)
    # Cut to fit, the count stays flat although a long result was added: cut all the same.
    assert cw.truncated(5_000, 5_000, only_grew=True, added=800)
    assert not cw.truncated(5_000, 5_900, only_grew=True, added=800)
    added = [tool_message("call00001", 8_000)]
    assert 900 < cw.added_at_least(added) < cw.estimate_tokens(added)
    warning = cw.truncation_warning(5_000, 3_000)
    assert "num_ctx" in warning and "OLLAMA_CONTEXT_LENGTH" in warning and "-c" in warning
    assert "\n" not in warning
    assert "-c" not in cw.truncation_warning(5_000, 3_000, "ollama")


def test_ollama_cuts_silently_and_the_window_notices():
    script = [reply(None, tool_call("read_file", {"path": "a"}, f"call{n:05}")) for n in range(6)]
    with StubServer(script, server="ollama", window=3_000) as stub:
        client = openai.OpenAI(api_key=stub.api_key, base_url=stub.url, max_retries=0)
        window = cw.Window(None, tools=TOOLS)  # the window is not known
        messages = [SYSTEM, {"role": "user", "content": "Read a, again and again."}]
        warnings = []
        for _ in range(6):
            view = window.view(messages)
            resp = client.chat.completions.create(model="m", messages=view, tools=TOOLS)
            warnings.append(window.after_reply(view, resp.usage.prompt_tokens, "ollama"))
            calls = [call.model_dump() for call in resp.choices[0].message.tool_calls]
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            messages.append(tool_message(calls[0]["id"], 4_000))
            if warnings[-1]:
                break
    assert stub.truncated and stub.truncated[-1] > 0
    assert warnings[-1] and "OLLAMA_CONTEXT_LENGTH" in warnings[-1]
    assert window.size and window.size <= 3_000  # no larger than what the server took
    assert window.needs_compaction(messages)


# --- Window: the state across requests ---------------------------------------------------------


def test_a_small_conversation_never_waits_for_the_window():
    asked = []
    window = cw.Window(lambda: asked.append(1) or 8_192, tools=TOOLS)
    messages = conversation(1, result_chars=200)
    assert window.before_request(messages) is None
    assert window.view(messages) == messages
    assert asked == []
    assert window.size == 8_192 and asked == [1]  # asked once, when needed


def test_tool_results_compaction_and_what_follows_extends_it():
    window = cw.Window(20_000, tools=TOOLS)
    messages = conversation(20)
    assert window.needs_compaction(messages)
    before = window.estimate(messages)
    record = window.before_request(messages)

    assert record["event"] == "compaction" and record["kind"] == "tool results"
    assert record["covers"] == len(messages)
    assert record["tokens_before"] == before
    assert record["tokens_after"] <= window.target < window.limit
    view = window.view(messages)
    assert view == record["messages"]
    assert valid(view) == []
    assert view[-1] is messages[-1]  # the latest step whole
    assert [m for m in view if m["role"] != "tool"] == [m for m in messages if m["role"] != "tool"]
    assert not window.needs_compaction(messages)

    window.after_reply(view, record["tokens_after"] // 2)
    messages += step(99)
    later = window.view(messages)
    assert later[: len(view)] == view  # the next request extends the compacted one
    assert later[len(view) :] == messages[-2:]
    assert cw.describe(record, window.size).startswith("context: compacted the conversation")


def test_the_max_tokens_count_against_the_window():
    messages = conversation(10)
    estimate = cw.estimate_tokens(messages, overhead=0)
    size = int(estimate / 0.85)
    assert not cw.Window(size).needs_compaction(messages)
    assert cw.Window(size, max_tokens=size // 10).needs_compaction(messages)


def summarizer(calls: list, text: str = "The user asked for the parts; parts 0-9 were read."):
    def summarize(request_messages, max_tokens):
        calls.append((request_messages, max_tokens))
        return text

    return summarize


def test_a_summary_when_tool_results_are_not_enough():
    messages = conversation(4, turns=6)
    for message in messages:  # long thinking, which notes cannot shorten
        if message.get("reasoning_content"):
            message["reasoning_content"] = "Let me think about this part. " * 60
    window = cw.Window(12_000, tools=TOOLS)
    calls = []
    record = window.before_request(messages, summarizer(calls))

    assert record["kind"] == "summary"
    assert len(calls) == 1
    request, max_tokens = calls[0]
    assert cw.estimate_tokens(request) + max_tokens <= window.limit  # the request fits
    view = window.view(messages)
    assert valid(view) == []
    assert view[0] is messages[0]
    assert view[1]["content"].startswith(cw.SUMMARY_HEADING)
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    assert view[1]["content"].endswith(f"{cw.SUMMARY_END}\n\n{messages[last_user]['content']}")
    assert view[-1] is messages[-1] and view[-2] is messages[-2]  # the latest step whole
    assert record["tokens_after"] <= window.target
    assert record["covers"] == len(messages)


def test_an_empty_summary_falls_back_on_tool_results():
    messages = conversation(4, turns=6)
    for message in messages:
        if message.get("reasoning_content"):
            message["reasoning_content"] = "Let me think about this part. " * 60
    window = cw.Window(12_000, tools=TOOLS)
    record = window.before_request(messages, summarizer([], text=""))
    assert record["kind"] == "tool results"
    assert valid(window.view(messages)) == []


def test_compact_on_demand():
    messages = conversation(3, turns=2) + [reply("All read.", reasoning="Done.")]
    window = cw.Window(None)  # not even the window is needed
    record = window.compact(messages)
    assert record["kind"] == "tool results"
    assert all(
        m["content"].startswith(cw.ELIDED) for m in record["messages"] if m["role"] == "tool"
    )

    window = cw.Window(1_048_576)
    calls = []
    record = window.compact(messages, summarizer(calls))
    assert record["kind"] == "summary" and len(calls) == 1
    assert record["messages"] == [SYSTEM, record["messages"][1], messages[-1]]
    messages.append({"role": "user", "content": "Next task."})
    assert valid(window.view(messages)) == []


def test_on_overflow_learns_the_window_and_compacts():
    messages = conversation(12)
    window = cw.Window(None, tools=TOOLS)
    error = Error(400, {"error": LLAMACPP})  # n_ctx 8192
    record = window.on_overflow(error, messages)
    assert window.size == 8_192
    assert record["tokens_after"] <= window.target
    assert valid(window.view(messages)) == []

    window = cw.Window(1_000_000, tools=TOOLS)  # a window that was wrong
    sent = window.estimate(messages)
    record = window.on_overflow(Error(400, {"error": {"message": OLLAMA}}), messages)
    assert window.size == sent  # smaller than what was sent, at least
    assert record["tokens_after"] < sent * cw.AIM


def test_record_and_restore_round_trip(tmp_path):
    transcript = tmp_path / "t.jsonl"
    window = cw.Window(20_000, tools=TOOLS)
    messages = conversation(20)
    lines = list(messages)
    record = window.before_request(messages)
    lines.append(record)
    messages += step(50)
    lines += messages[-2:]
    transcript.write_text("".join(json.dumps(entry) + "\n" for entry in lines))

    entries = [json.loads(line) for line in transcript.read_text().splitlines()]
    history, last = cw.split_transcript(entries)
    assert history == messages and last == record
    resumed = cw.Window(20_000, tools=TOOLS)
    resumed.restore(last, history)
    assert resumed.view(history) == window.view(messages)

    with pytest.raises(ValueError, match="covers 3 messages, but 2 come before it"):
        cw.split_transcript([SYSTEM, {"role": "user", "content": "x"}, {**record, "covers": 3}])
    with pytest.raises(ValueError, match="the history has only 2"):
        resumed.restore(record, messages[:2])
    with pytest.raises(ValueError, match="no list of messages"):
        resumed.restore({"covers": 1})


# --- Whole sessions against the stub -----------------------------------------------------------


def session(server: str, sizes: cw.Window, steps: int, **stub_options) -> StubServer:
    """A scripted agent loop against the stub: read_file calls with long results (and long
    thinking), compacting before each request as the lead's session will."""
    field = "reasoning" if server == "vllm" else "reasoning_content"

    def answer(request):
        if not request.get("tools"):
            return {"role": "assistant", "content": "Summary: parts were read, more to come."}
        number = len(request["messages"])
        call = tool_call("read_file", {"path": f"p{number}"}, f"call{number:05}")
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [call],
            field: "I will read the next part. " * 30,
        }

    stub = StubServer(
        [answer] * (steps * 2), server=server, compactions_allowed=True, **stub_options
    )
    with stub:
        client = openai.OpenAI(api_key=stub.api_key, base_url=stub.url, max_retries=0)

        def summarize(request_messages, max_tokens):
            resp = client.chat.completions.create(
                model="m", messages=request_messages, max_tokens=max_tokens
            )
            return resp.choices[0].message.content

        messages = [SYSTEM, {"role": "user", "content": "Read the parts one by one."}]
        for _ in range(steps):
            sizes.before_request(messages, summarize)
            view = sizes.view(messages)
            try:
                resp = client.chat.completions.create(model="m", messages=view, tools=TOOLS)
            except openai.BadRequestError as error:
                assert cw.is_context_overflow(error)
                assert sizes.on_overflow(error, messages, summarize)
                view = sizes.view(messages)
                resp = client.chat.completions.create(model="m", messages=view, tools=TOOLS)
            assert sizes.after_reply(view, resp.usage.prompt_tokens) is None
            message = resp.choices[0].message
            assistant = {"role": "assistant", "content": message.content}
            assistant["tool_calls"] = [call.model_dump() for call in message.tool_calls]
            assistant[field] = message.model_extra[field]
            messages.append(assistant)
            messages.append(tool_message(assistant["tool_calls"][0]["id"], 2_500))
    return stub


@pytest.mark.parametrize("server", ["deepseek", "vllm", "llamacpp"])
def test_a_long_session_stays_in_the_window(server):
    stub = session(server, cw.Window(8_000, tools=TOOLS), 30, window=8_000)
    assert stub.problems == []
    assert stub.rejected == []  # never too long
    assert stub.compactions  # and compacted, more than once, each prefix then extended
    assert stub.side_requests  # the summaries


def test_a_session_with_a_wrong_window_recovers_from_the_overflow():
    stub = session("deepseek", cw.Window(1_000_000, tools=TOOLS), 16, window=8_000)
    assert stub.problems == []
    assert "context overflow" in stub.rejected
    assert stub.compactions


def test_without_compactions_allowed_a_new_prefix_is_still_a_problem():
    first = [SYSTEM, {"role": "user", "content": "hi"}]
    with StubServer([reply("a"), reply("b")], compactions_allowed=False) as stub:
        client = openai.OpenAI(api_key=stub.api_key, base_url=stub.url, max_retries=0)
        client.chat.completions.create(model="m", messages=first, tools=TOOLS)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=[SYSTEM], tools=TOOLS)
    assert any("do not begin with" in problem for problem in stub.problems)


def test_a_compacted_request_must_keep_the_system_prompt():
    first = [SYSTEM, {"role": "user", "content": "hi"}]
    with StubServer([reply("a"), reply("b")], compactions_allowed=True) as stub:
        client = openai.OpenAI(api_key=stub.api_key, base_url=stub.url, max_retries=0)
        client.chat.completions.create(model="m", messages=first, tools=TOOLS)
        with pytest.raises(openai.BadRequestError):
            other = [{"role": "user", "content": "no system prompt"}]
            client.chat.completions.create(model="m", messages=other, tools=TOOLS)
    assert any("same system prompt" in problem for problem in stub.problems)


def test_on_overflow_drops_the_latest_result_when_nothing_else_is_enough():
    """One tool result larger than the window, the first of the conversation: it becomes a note
    (the request could never be sent with it), and nothing else changes."""
    messages = [SYSTEM, {"role": "user", "content": "Read the big file."}, *step(1, 40_000)]
    window = cw.Window(1_000_000, tools=TOOLS)
    record = window.on_overflow(Error(400, {"error": LLAMACPP}), messages)
    assert window.size == 8_192
    view = window.view(messages)
    assert view[:3] == messages[:3] and view[3]["content"].startswith(cw.ELIDED)
    assert "part1.txt" in view[3]["content"]
    assert record["kind"] == "tool results" and record["tokens_after"] <= window.target
    assert valid(view) == []


def test_a_summary_is_not_summarised_again():
    """Retried after an overflow that compaction could not cure (the last user message alone
    is too long): the conversation already begins with a summary, so no summary is asked for
    again, nothing is compacted, and the error stands."""
    messages = conversation(4, turns=3)
    messages.append(reply("Done.", reasoning="All read."))
    messages.append({"role": "user", "content": "Check: " + "item, " * 6_000})
    window = cw.Window(8_192, tools=TOOLS)
    calls = []
    error = Error(400, {"error": LLAMACPP})
    first = window.on_overflow(error, messages, summarizer(calls))
    assert first["kind"] == "summary" and len(calls) == 1
    assert window.on_overflow(error, messages, summarizer(calls)) is None
    assert len(calls) == 1


def test_a_request_that_cannot_fit_loses_the_latest_result_before_it_is_sent():
    """Resumed with a smaller window, a conversation whose last step holds a result larger
    than the whole window: the result becomes a note before the request, not after a refusal.
    A latest result that fits stays whole."""
    messages = [SYSTEM, {"role": "user", "content": "Read the big file."}, *step(1, 40_000)]
    window = cw.Window(8_192, tools=TOOLS)
    record = window.before_request(messages)
    view = window.view(messages)
    assert view[3]["content"].startswith(cw.ELIDED)
    assert record["tokens_after"] <= window.target and valid(view) == []

    messages = [*conversation(8), *step(9, 15_000)]  # the latest fits once the rest is notes
    window = cw.Window(8_192, tools=TOOLS)
    window.before_request(messages)
    assert window.view(messages)[-1] is messages[-1]
