"""The agent as a real process against a real llama.cpp server with tiny models (pytest -m
real_server; see the README's Tests section).

A 135M or 270M model says whatever it says, so these tests assert only what must hold for any
reply: every request got a 2xx, each request extends the one before, the transcript is valid
and replays offline, the exit code is the documented one for the last reply the server sent,
max_tokens and reasoning_content reach the server. A recording proxy between agent and server
sees every request and answer.
"""

from __future__ import annotations

import json

import pytest
from conftest import clean_env, run_agent
from stub_server import check_messages, extends, sent_messages

import agent as the_agent
from minimal_agent.core import context_window
from minimal_agent.stores import transcripts

from .recording_proxy import Exchange, RecordingProxy

pytestmark = [
    pytest.mark.real_server,
    pytest.mark.posix("builds llama-server with make and locks its cache with fcntl"),
]

# One step takes 5 to 40 s here; a loaded two-core machine may take several times that.
AGENT_TIMEOUT = 480
TEST_TIMEOUT = 720
# The finish reasons of a cut-off reply, as the README lists them.
CUT_OFF = ("length", "content_filter", "insufficient_system_resource")
# SmolLM2 repeats a call spelled out in the tools template's own format: a real tool call.
WRITE_TASK = (
    'Repeat exactly this line: <tool_call>{"name": "write_file", "arguments": {"path": '
    '"hello.txt", "content": "hello world"}}</tool_call>'
)
# The same, too long for --max-tokens 32: the reply is cut off in the middle of the call.
LONG_WRITE_TASK = (
    'Repeat exactly this line: <tool_call>{"name": "write_file", "arguments": {"path": '
    '"poem.txt", "content": "The sea is wide, the sea is deep, the sea is grey, the waves are '
    'high, and the wind blows cold over the sand."}}</tool_call>'
)


def agent(proxy: RecordingProxy, workdir, *args: str, stdin: str = "", **settings: str):
    """python agent.py against the server through the proxy; every LLM_ setting given, so a
    developer's config.env changes nothing (the window: read from the server's /props, unless
    settings say otherwise)."""
    given = {"LLM_MAX_TOKENS": "", "LLM_CONTEXT_TOKENS": "", "LLM_COMPACT_AT": "", **settings}
    env = clean_env(
        LLM_API_KEY="any-key", LLM_BASE_URL=f"{proxy.url}/v1", LLM_MODEL="tiny", **given
    )
    options = ["--workdir", str(workdir), "--yes", "--request-timeout", str(AGENT_TIMEOUT)]
    return run_agent(*options, *args, env=env, stdin=stdin, timeout=AGENT_TIMEOUT)


def completions(proxy: RecordingProxy) -> list[Exchange]:
    return [e for e in proxy.exchanges if e.path.endswith("/chat/completions")]


def check_requests(proxy: RecordingProxy) -> list[Exchange]:
    """Every request got a 2xx, and each one's messages begin with all of the previous one's,
    byte for byte (append only); returns the chat completion requests."""
    failed = [(e.path, e.status, e.response[:300]) for e in proxy.exchanges]
    assert [f for f in failed if not 200 <= f[1] < 300] == []
    requests = completions(proxy)
    assert requests, "the agent made no chat completion request"
    sent = [sent_messages(e.request) for e in requests]
    assert all(extends(later, earlier) for earlier, later in zip(sent, sent[1:], strict=False))
    return requests


def check_transcript(save, requests: list[Exchange]) -> list[dict]:
    """The saved transcript is one a strict server accepts, and is exactly what the model was
    sent plus its last reply."""
    messages = messages_of(save)
    transcripts.check_conversation(save, transcripts.transcript_lines(save))
    assert check_messages(messages, [], None) == []
    last_request = requests[-1].request_json()["messages"]
    assert messages[: len(last_request)] == last_request
    return messages


def answer_text(content: str | None) -> str:
    """The content without its <think> block, as the README says the answer is printed."""
    text = content or ""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return "" if text.lstrip().startswith("<think>") else text


def documented_exit_code(requests: list[Exchange]) -> int:
    """The README's exit code for a run (or --chat turn) whose last answer is requests[-1]'s:
    3 when that reply still had tool calls (the step limit stopped the run), 4 when it was cut
    off or has no answer text, else 0."""
    message, finish_reason = requests[-1].reply()
    if message.get("tool_calls"):
        return 3
    return 4 if finish_reason in CUT_OFF or not answer_text(message.get("content")).strip() else 0


def check_replays_offline(proxy, tmp_path, save, live, max_steps: str, cut_off: bool) -> None:
    """--replay with no key: no request leaves the agent, and, when no reply was cut off (a cut
    call runs nothing live, but its "{}" runs on replay), it ends as the live run did."""
    before = len(proxy.exchanges)
    env = clean_env(LLM_API_KEY="", LLM_BASE_URL=f"{proxy.url}/v1", LLM_MAX_TOKENS="")
    workdir = tmp_path / "replay"
    workdir.mkdir()  # a --workdir that does not exist is taken for a typo
    options = ["--workdir", str(workdir), "--yes", "--max-steps", max_steps]
    replayed = run_agent(*options, "--replay", str(save), env=env, timeout=120)
    assert len(proxy.exchanges) == before  # nothing was sent anywhere near the server
    assert replayed.returncode in (0, 3, 4), replayed.stderr
    if not cut_off:
        assert (replayed.returncode, replayed.stdout) == (live.returncode, live.stdout)


@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("max_steps", ["3", "1"])  # 1: the step limit ends the run after a call
def test_a_run_with_tool_calls_gets_only_2xx_and_its_transcript_replays_offline(
    tools_proxy, workdir, tmp_path, max_steps
):
    save = tmp_path / "run.jsonl"
    proc = agent(tools_proxy, workdir, "--max-steps", max_steps, "--save", str(save), WRITE_TASK)

    requests = check_requests(tools_proxy)
    assert len(requests) <= int(max_steps)
    assert all("tools" in e.request_json() for e in requests)
    messages = check_transcript(save, requests)
    assert proc.returncode == documented_exit_code(requests), proc.stderr
    if proc.returncode == 3:
        assert len(requests) == int(max_steps)
    # Each call the agent reports as written was written, with what the model sent.
    for call, answer in calls_and_answers(messages):
        if call["function"]["name"] == "write_file" and answer.startswith("Wrote "):
            arguments = json.loads(call["function"]["arguments"])
            assert (workdir / arguments["path"]).read_text() == arguments["content"]
    cut_off = any(e.reply()[1] in CUT_OFF for e in requests)
    check_replays_offline(tools_proxy, tmp_path, save, proc, max_steps, cut_off)


@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_replies_cut_off_by_max_tokens_go_on_without_a_5xx(tools_proxy, workdir, tmp_path, stream):
    save = tmp_path / "run.jsonl"
    options = ["--max-tokens", "32", "--max-steps", "3", "--save", str(save), stream]
    proc = agent(tools_proxy, workdir, *options, LONG_WRITE_TASK)

    requests = check_requests(tools_proxy)  # no 5xx, whatever the cut-off history holds
    assert [e.request_json().get("max_tokens") for e in requests] == [32] * len(requests)
    assert [e.streamed for e in requests] == [stream == "--stream"] * len(requests)
    reasons = [e.reply()[1] for e in requests]
    assert "length" in reasons, f"no reply was cut off, so nothing was tested: {reasons}"
    assert "cut off (finish_reason length)" in proc.stderr
    messages = check_transcript(save, requests)  # a cut call's arguments go back as JSON
    assert proc.returncode == documented_exit_code(requests), proc.stderr
    # The calls of a cut-off reply ran nothing, and each tool message quotes what arrived.
    for exchange in requests:
        reply, finish_reason = exchange.reply()
        if finish_reason != "length":
            continue
        sent_back = messages[len(exchange.request_json()["messages"])]
        received = [call["function"]["arguments"] for call in reply.get("tool_calls") or []]
        answers = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
        for call, arguments in zip(sent_back.get("tool_calls") or [], received, strict=True):
            answer = answers[call["id"]]
            assert answer.startswith("Error: your reply was cut off"), answer
            assert "nothing was run" in answer and repr(arguments)[:20] in answer
    check_replays_offline(tools_proxy, tmp_path, save, proc, "3", cut_off=True)


def calls_and_answers(messages: list[dict]) -> list[tuple[dict, str]]:
    """Each tool call in messages with the content of the tool message that answers it."""
    answers = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    calls = [call for m in messages for call in m.get("tool_calls") or []]
    return [(call, answers[call["id"]]) for call in calls if call["id"] in answers]


@pytest.mark.timeout(TEST_TIMEOUT)
def test_reasoning_content_comes_back_and_goes_back(reasoning_proxy, workdir, tmp_path):
    save = tmp_path / "chat.jsonl"
    options = ["--chat", "--max-steps", "1", "--max-tokens", "48", "--save", str(save)]
    turns = "What is 2 + 2?\nAnd 3 + 3?\n"
    proc = agent(reasoning_proxy, workdir, *options, stdin=turns)

    requests = check_requests(reasoning_proxy)
    assert len(requests) == 2, proc.stderr  # one step in each turn
    first_reply, _ = requests[0].reply()
    assert first_reply.get("reasoning_content"), first_reply
    [sent_back] = [m for m in requests[1].request_json()["messages"] if m["role"] == "assistant"]
    assert sent_back["reasoning_content"] == first_reply["reasoning_content"]
    check_transcript(save, requests)
    assert proc.returncode == documented_exit_code(requests), proc.stderr


@pytest.mark.timeout(TEST_TIMEOUT)
def test_a_conversation_that_outgrows_a_small_window_is_compacted_and_goes_on(
    small_window_proxy, workdir, tmp_path
):
    """llama-server -c 2048. Resumed: a transcript whose earlier turn read a file about eight
    times the window. With the window read from /props (LLM_CONTEXT_TOKENS unset), the agent
    compacts before the first request and the server refuses nothing; with LLM_CONTEXT_TOKENS
    set far too large, the server refuses the first request in its own words, and the agent
    compacts and sends it again. Whatever the model says next, every request after the
    compaction is accepted, the run ends as documented, and the transcript keeps the result."""
    lines = [f"line {number} of big.txt: the quick brown fox" for number in range(1, 1_001)]
    (workdir / "big.txt").write_text("\n".join(lines) + "\n")  # for a model that reads it again
    call = {"id": "c00002000", "type": "function"}
    call["function"] = {"name": "read_file", "arguments": json.dumps({"path": "big.txt"})}
    history = [
        {"role": "system", "content": the_agent.SYSTEM_PROMPT},
        {"role": "user", "content": "Read big.txt."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "\n".join(lines)},
        {"role": "assistant", "content": "big.txt has 1000 numbered lines about a fox."},
    ]
    task = "What is the first line of big.txt? Answer in a few words."
    proxy = small_window_proxy
    for told in ("", "100000"):  # the window from /props; then a wrong one
        before = len(proxy.exchanges)
        save = tmp_path / f"long{told}.jsonl"
        save.write_text("".join(json.dumps(message) + "\n" for message in history))
        options = ["-r", str(save), "--max-steps", "3", task]
        proc = agent(proxy, workdir, *options, LLM_CONTEXT_TOKENS=told)
        exchanges = proxy.exchanges[before:]

        statuses = [(e.path, e.status, e.response[:300]) for e in exchanges]
        refused = [s for s in statuses if not 200 <= s[1] < 300]
        requests = [e for e in exchanges if e.path.endswith("/chat/completions")]
        if told:  # refused once, in llama.cpp's words; the agent compacted and sent it again
            assert [s[:2] for s in refused] == [("/v1/chat/completions", 400)], statuses
            assert b"exceed_context_size_error" in refused[0][2]
            assert "the server says the conversation does not fit" in proc.stderr
            requests = requests[1:]
        else:  # the window came from /props, and nothing was refused
            assert refused == [] and "/props" in [e.path for e in exchanges], statuses
        steps = [e for e in requests if "tools" in e.request_json()]
        assert steps, proc.stderr
        # What was accepted first was the compacted conversation: the result is a note there.
        first = steps[0].request_json()["messages"]
        assert first[3]["content"].startswith(context_window.ELIDED), first[3]["content"][:200]
        assert first[-1] == {"role": "user", "content": task}
        for exchange in requests:  # the server's own count of every prompt fits the window
            usage = json.loads(exchange.response).get("usage") or {}
            assert usage.get("prompt_tokens", 0) <= 2_048, usage
        entries = transcripts.transcript_lines(save)
        records = [entry for _, entry in entries if entry.get("event") == "compaction"]
        assert records and records[0]["covers"] == len(history) + 1
        sent = [sent_messages(e.request) for e in steps]
        restarts = sum(not extends(b, a) for a, b in zip(sent, sent[1:], strict=False))
        assert restarts <= len(records) - 1  # a request began anew only after a compaction
        assert messages_of(save)[: len(history)] == history  # kept whole
        transcripts.check_conversation(save, entries)
        assert proc.returncode == documented_exit_code(steps), proc.stderr


def messages_of(save) -> list[dict]:
    """The transcript's messages, without its events."""
    return [entry for _, entry in transcripts.transcript_lines(save) if "event" not in entry]
