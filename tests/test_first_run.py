"""The first ten minutes (issue 9): every mistake a newcomer makes ends in one line on stderr that
says what to do, with exit code 1, and never in a traceback. Real processes wherever the row is
about the command line; the program is copied into a temporary folder when the test needs its
config.env to be the test's own."""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys

import forked_agents
import pexpect
import pytest
from conftest import (
    ROOT,
    clean_env,
    on_a_terminal,
    run_agent,
    run_in_process,
    saved_messages,
    stub_env,
)
from fake_model import reply, tool_call
from stub_server import Fail, StubServer

import agent
import model_client
from minimal_agent.core import api_errors

KEY = "test-key-first-run-0123456789"
EXAMPLE = ROOT / "examples" / "tool_demo.jsonl"


def one_line_error(proc, *phrases: str) -> str:
    """The run failed with exit 1 and one error line on stderr holding every phrase."""
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    return errors[0]


def offline() -> dict[str, str]:
    """No key and nothing listening: a replay must not need either."""
    return clean_env(LLM_API_KEY="", LLM_BASE_URL="http://127.0.0.1:9")


# --- Started without the virtual environment; bugs -----------------------------------------


def test_a_python_without_the_packages_says_to_activate_the_venv(app, workdir):
    (app / "config.env").write_text(f"LLM_API_KEY={KEY}\n")
    # -S leaves site-packages out: the project's packages are missing, as outside the venv.
    proc = subprocess.run(
        [sys.executable, "-S", str(app / "agent.py"), "--workdir", str(workdir), "hi"],
        capture_output=True, text=True, env=clean_env(), timeout=30,
    )  # fmt: skip
    line = one_line_error(proc, "python-dotenv is not installed", sys.executable)
    assert "activate" in line and "pip install -e ." in line
    assert "UnboundLocalError" not in proc.stderr


def test_a_missing_openai_package_is_named(agent_main, monkeypatch, workdir):
    monkeypatch.setitem(sys.modules, "openai", None)  # what `import openai` meets when missing
    env = {"LLM_API_KEY": KEY, "LLM_BASE_URL": "http://127.0.0.1:9"}
    proc = agent_main("--workdir", str(workdir), "hi", env=env)
    one_line_error(proc, "the package openai is not installed", "activate")


def test_a_real_bug_keeps_its_traceback_and_says_where_to_report_it(
    agent_main, monkeypatch, workdir, tmp_path
):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(agent, "execute_tool_call", broken)
    save = tmp_path / "run.jsonl"
    args = ["--workdir", str(workdir), "--replay", str(EXAMPLE), "--save", str(save)]
    proc = agent_main(*args, env={})
    assert proc.returncode == 1
    err = proc.stderr
    assert "Traceback" in err and "ZeroDivisionError: a bug" in err
    last = err.strip().splitlines()[-1]
    assert "bug in the agent" in last and "issue tracker" in last and str(save) in last
    assert "UnboundLocalError" not in err


# --- config.env: its encoding, misspelt names, the key's characters --------------------------


@pytest.mark.parametrize(
    "encode",
    [
        lambda text: text.encode("utf-16"),  # Notepad's "Unicode": a BOM, then UTF-16-LE
        lambda text: text.encode("utf-16-le"),
        lambda text: text.replace("settings", "caf\xe9 settings").encode("cp1252"),
    ],
    ids=["utf-16", "utf-16-without-bom", "cp1252-comment"],
)
def test_a_config_env_that_is_not_utf8_is_refused_by_name(app, workdir, encode):
    (app / "config.env").write_bytes(encode(f"# my settings\nLLM_API_KEY={KEY}\n"))
    proc = run_agent("--workdir", str(workdir), "hi", env=clean_env(), script=app / "agent.py")
    one_line_error(proc, str(app / "config.env"), "save it as UTF-8")
    assert "UnboundLocalError" not in proc.stderr


def test_a_config_env_with_a_utf8_bom_is_read(agent_main, workdir, tmp_path):
    with StubServer([reply("read")], api_key=KEY) as server:
        text = f"LLM_API_KEY={KEY}\nLLM_BASE_URL={server.url}\n"
        (tmp_path / "config.env").write_bytes(text.encode("utf-8-sig"))
        proc = agent_main("--workdir", str(workdir), "hi", env={})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "read\n"


@pytest.mark.parametrize("name", ["LLM_APIKEY", "DEEPSEEK_API_KEY", "llm_api_key", "LLM_API_KYE"])
def test_a_misspelt_key_name_in_config_env_is_pointed_out(app, workdir, name):
    (app / "config.env").write_text(f"{name}={KEY}\n")
    proc = run_agent("--workdir", str(workdir), "hi", env=clean_env(), script=app / "agent.py")
    line = one_line_error(proc, "LLM_API_KEY is not set", str(app / "config.env"), name)
    assert KEY not in line


def test_a_misspelt_name_in_the_environment_is_pointed_out(app, workdir):
    env = clean_env(DEEPSEEK_API_KEY=KEY)
    proc = run_agent("--workdir", str(workdir), "hi", env=env, script=app / "agent.py")
    line = one_line_error(proc, "LLM_API_KEY is not set", "found no", "DEEPSEEK_API_KEY")
    assert "DEEPSEEK_API_KEY is set in the environment" in line


@pytest.mark.parametrize(
    "text, number",
    [
        (f"LLM_API_KEY: {KEY}\n", 1),  # a colon for the equals sign
        (f"LLM_API_KEY={KEY}\nLLM_MODEL deepseek-chat\n", 2),  # would run with another model
        (f"# my key\nLLM_API_KEY=\n{KEY}\n", 3),  # the key pasted on the next line
    ],
    ids=["colon", "space", "next-line"],
)
def test_a_config_env_line_that_is_not_a_setting_is_named(app, workdir, text, number):
    (app / "config.env").write_text(text)
    proc = run_agent("--workdir", str(workdir), "hi", env=clean_env(), script=app / "agent.py")
    said = f"{app / 'config.env'} line {number} is not a setting"
    line = one_line_error(proc, said, "NAME=value")
    assert KEY not in line
    assert "could not parse" not in proc.stderr  # python-dotenv's own warning, once per read


def test_a_misspelt_model_name_setting_is_warned_about(agent_main, workdir, tmp_path):
    with StubServer([reply("ok")], api_key=KEY) as server:
        (tmp_path / "config.env").write_text(f"LLM_API_KEY={KEY}\nLLM_MODLE=my-model\n")
        proc = agent_main("--workdir", str(workdir), "hi", env={"LLM_BASE_URL": server.url})
    assert proc.returncode == 0, proc.stderr
    assert "warning: LLM_MODLE is set but not read (the name is LLM_MODEL)" in proc.stderr
    assert server.requests[0]["model"] == "deepseek-flash"


@pytest.mark.parametrize(
    "key, named",
    [
        ("\u201csk-abc123\u201d", "U+201C"),  # typographic quotes, pasted from a document
        ("sk-abc 123", "U+0020"),
        ("sk-abc123'", "U+0027"),
        ("sk-\u00e9abc", "U+00E9"),
        ("sk-abc\u200b", "U+200B"),  # a zero-width space: invisible
    ],
)
def test_a_key_with_quotes_spaces_or_other_characters_is_refused(workdir, key, named):
    with StubServer([reply("never")], api_key=key) as server:
        proc = run_agent("--workdir", str(workdir), "hi", env=stub_env(server, LLM_API_KEY=key))
    line = one_line_error(proc, "LLM_API_KEY contains", named, "without quotes or spaces")
    assert key not in line
    assert server.requests == [] and server.headers == []


def test_quotes_around_the_key_in_config_env_are_fine(agent_main, workdir, tmp_path):
    with StubServer([reply("ok")], api_key=KEY) as server:
        (tmp_path / "config.env").write_text(f'LLM_API_KEY="{KEY}"\nLLM_BASE_URL={server.url}\n')
        proc = agent_main("--workdir", str(workdir), "hi", env={})
    assert proc.returncode == 0, proc.stderr


def test_a_key_pasted_with_bearer_is_refused_before_any_request(workdir):
    with StubServer([reply("never")], api_key=KEY) as server:
        env = stub_env(server, LLM_API_KEY=f"Bearer {KEY}")
        proc = run_agent("--workdir", str(workdir), "hi", env=env)
    line = one_line_error(proc, "LLM_API_KEY starts with", "Bearer", "only the key")
    assert KEY not in line
    assert server.headers == []


@pytest.mark.posix("/bin/sh expands $LLM_API_KEY; cmd.exe would echo it as typed")
def test_config_env_is_not_passed_on_to_shell_commands(agent_main, workdir, tmp_path):
    script = [
        reply(None, tool_call("run_shell", {"command": "echo key=$LLM_API_KEY"}, "c1")),
        lambda request: reply(request["messages"][-1]["content"]),
    ]
    with StubServer(script, api_key=KEY) as server:
        (tmp_path / "config.env").write_text(f"LLM_API_KEY={KEY}\nLLM_BASE_URL={server.url}\n")
        proc = agent_main("--workdir", str(workdir), "--yes", "hi", env={})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "exit code 0\nkey=\n\n"


# --- What the server says: URLs, models, a full context, a rejected history, time-outs -------


class V1Server(StubServer):
    """Serves only /v1/chat/completions, as llama.cpp, Ollama, vLLM and LM Studio do."""

    def answer(self, path, headers, body):
        if path != "/v1/chat/completions":
            self.headers.append(dict(headers))
            return 404, {}, {"error": {"message": "File Not Found", "type": "not_found_error"}}
        return super().answer(path, headers, body)


def test_a_404_without_v1_suggests_adding_it(workdir):
    # As a real process: a mistake the server answers ends the program in one line too (its
    # variations below run in this process).
    with V1Server([reply("never")], api_key=KEY) as server:
        proc = run_agent("--workdir", str(workdir), "hi", env=stub_env(server))
    one_line_error(proc, "404", "does not end in /v1", f"LLM_BASE_URL={server.url}/v1")


def test_a_404_with_the_endpoint_in_the_url_points_out_the_doubled_path(agent_main, workdir):
    with V1Server([reply("never")], api_key=KEY) as server:
        env = {"LLM_API_KEY": KEY, "LLM_BASE_URL": f"{server.url}/v1/chat/completions"}
        proc = agent_main("--workdir", str(workdir), "hi", env=env)
    one_line_error(proc, "404", "doubled", f"LLM_BASE_URL={server.url}/v1")


def test_the_endpoint_pasted_without_v1_gets_the_whole_fix_at_once(agent_main, workdir):
    with V1Server([reply("never")], api_key=KEY) as server:
        env = {"LLM_API_KEY": KEY, "LLM_BASE_URL": f"{server.url}/chat/completions"}
        proc = agent_main("--workdir", str(workdir), "hi", env=env)
    one_line_error(proc, "404", "doubled", f"LLM_BASE_URL={server.url}/v1")


def test_the_right_v1_url_works(agent_main, workdir):
    with V1Server([reply("ok")], api_key=KEY) as server:
        env = {"LLM_API_KEY": KEY, "LLM_BASE_URL": f"{server.url}/v1"}
        proc = agent_main("--workdir", str(workdir), "hi", env=env)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "status, said",
    [
        (400, "Model Not Exist"),  # DeepSeek
        (404, "model 'nope' not found, try pulling it first"),  # Ollama
    ],
)
def test_an_unknown_model_is_named(agent_main, workdir, status, said):
    with StubServer([Fail(status, said)], api_key=KEY) as server:
        env = {"LLM_API_KEY": KEY, "LLM_BASE_URL": server.url}
        proc = agent_main("--workdir", str(workdir), "--model", "nope", "hi", env=env)
    one_line_error(proc, said, "does not know the model nope", "LLM_MODEL")


@pytest.mark.parametrize(
    "said",
    [
        "This model's maximum context length is 131072 tokens. However, you requested 140000 "
        "tokens (139000 in the messages, 1000 in the completion). Please reduce the length of "
        "the messages or completion.",  # DeepSeek
        "the request exceeds the available context size, try increasing it",  # llama.cpp
        "This model's maximum context length is 4096 tokens. However, your request has 5000 "
        "input tokens. Please reduce the length of the input messages.",  # vLLM
    ],
    ids=["deepseek", "llama.cpp", "vllm"],
)
def test_a_full_context_says_the_conversation_is_too_long(agent_main, workdir, said):
    with StubServer([Fail(400, said)], api_key=KEY) as server:
        env = {"LLM_API_KEY": KEY, "LLM_BASE_URL": server.url}
        proc = agent_main("--workdir", str(workdir), "hi", env=env)
    line = one_line_error(proc, "400", "longer than the model accepts", "even after compacting")
    assert "check the model name" not in line


@pytest.mark.parametrize(
    "status, said",
    [
        (400, "The `reasoning_content` in the thinking mode must be passed back to the API."),
        (
            400,
            "Messages with role 'tool' must be a response to a preceding message with 'tool_calls'",
        ),  # fmt: skip
        (500, "Failed to parse tool call arguments as JSON"),  # llama.cpp, on every attempt
    ],
)
def test_a_rejected_history_is_called_a_bug_and_names_the_transcript(
    agent_main, workdir, tmp_path, status, said
):
    save = tmp_path / "run.jsonl"
    script = [Fail(status, said, {"retry-after-ms": "10"})] * 3
    args = ["--workdir", str(workdir), "--save", str(save), "hi"]
    with StubServer(script, api_key=KEY) as server:
        proc = agent_main(*args, env={"LLM_API_KEY": KEY, "LLM_BASE_URL": server.url})
    one_line_error(proc, "bug in the agent", "issue tracker", f"the transcript is in {save}")
    assert "try again later" not in proc.stderr
    assert saved_messages(save)[1]["content"] == "hi"


def test_a_500_that_repeats_says_the_server_rejects_the_request(agent_main, workdir):
    script = [Fail(500, "Internal error", {"retry-after-ms": "10"})] * 3
    with StubServer(script, api_key=KEY) as server:
        env = {"LLM_API_KEY": KEY, "LLM_BASE_URL": server.url}
        proc = agent_main("--workdir", str(workdir), "hi", env=env)
    one_line_error(proc, "500", "Internal error", "rejects this request", "will not help")
    assert "try again later" not in proc.stderr
    assert len(server.requests) == 3  # the SDK did retry: the same answer three times


def test_a_time_out_is_worded_as_a_time_out():
    import socket

    import openai

    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        client = openai.OpenAI(api_key="k", base_url=url, timeout=0.2, max_retries=0)
        with pytest.raises(openai.APITimeoutError) as caught:
            client.chat.completions.create(model="m", messages=[])
    line = api_errors.describe_api_error(caught.value, {"base_url": url}, timeout=0.2)
    assert f"the request to {url} timed out" in line
    assert "sent nothing for 0.2 s" in line and "--request-timeout" in line


@on_a_terminal
def test_a_server_that_never_answers_shows_the_seconds_then_times_out_in_one_line(workdir):
    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        child = forked_agents.spawn(
            sys.executable,
            [str(ROOT / "agent.py"), "--workdir", str(workdir), "--request-timeout", "1.5", "hi"],
            env=clean_env(LLM_API_KEY=KEY, LLM_BASE_URL=url), cwd=str(ROOT / "tests"),
            encoding="utf-8", timeout=60, dimensions=(40, 300),
        )  # fmt: skip
        child.expect_exact("[1] waiting for the model... 1 s")  # alive, and counting
        child.expect(r"error: the request to \S+ timed out[^\r\n]*")
        line = child.after
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 1
    assert url in line and "nothing for 1.5 s" in line and "--request-timeout" in line
    assert "Traceback" not in child.before


# --- Output the console cannot encode ---------------------------------------------------------


@pytest.mark.posix("stdout to a file ends lines with \\n, not \\r\\n")
def test_an_answer_the_console_cannot_encode_still_reaches_the_file(workdir, tmp_path):
    answer = tmp_path / "answer.txt"
    script = [
        reply(None, tool_call("write_file", {"path": "笔记.txt", "content": "你好"}, "c1")),
        reply("答案是 391"),
    ]
    with StubServer(script, api_key=KEY) as server, open(answer, "wb") as stdout:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "写一个文件"],
            stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE,
            env=stub_env(server, PYTHONIOENCODING="cp1252"), timeout=60,
        )  # fmt: skip
    err = proc.stderr.decode("cp1252")
    assert proc.returncode == 0, err
    assert answer.read_bytes() == b"??? 391\n"
    assert "Traceback" not in err and "[1] write_file(path='??.txt'" in err
    assert (workdir / "笔记.txt").read_text(encoding="utf-8") == "你好"


# --- Transcripts: broken files for --replay and --show, a crash's half line ------------------


def lines(*messages) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


USER = {"role": "user", "content": "t"}
CALL = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def call_without(field: str) -> dict:
    function = {k: v for k, v in CALL["function"].items() if k != field}
    return {"role": "assistant", "content": None, "tool_calls": [{**CALL, "function": function}]}


BROKEN = {
    "binary": (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "line 1 is not UTF-8 text"),
    "not JSON": (lines(USER) + b"{oops\n", "line 2 is not JSON"),
    "an array": (lines(USER, [1, 2]), "line 2 is a JSON array, not a message object"),
    "an unknown role": (lines({"role": "robot", "content": "x"}), 'line 1 has the role "robot"'),
    "no role": (lines({"content": "x"}), "line 1 has the role null"),
    "no function": (
        lines(USER, {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}),
        "line 2 has tool call 1 without a 'function' object",
    ),
    "no name": (
        lines(USER, call_without("name")),
        "line 2 has tool call 1 without a string function 'name'",
    ),  # fmt: skip
    "no arguments": (
        lines(USER, call_without("arguments")),
        "line 2 has tool call 1 without a string function 'arguments'",
    ),  # fmt: skip
    "object arguments": (
        lines(
            USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {**CALL, "function": {"name": "read_file", "arguments": {"path": "a"}}}
                ],
            },
        ),
        "line 2 has tool call 1 without a string function 'arguments'",
    ),  # fmt: skip
    "number content": (
        lines({"role": "user", "content": 5}),
        "line 1 is a user message without a string 'content'",
    ),  # fmt: skip
    "tool without id": (
        lines(USER, {"role": "tool", "content": "r"}),
        "line 2 is a tool message without a string 'tool_call_id'",
    ),
}


@pytest.mark.parametrize("option", ["--replay", "--show"])
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_transcript_is_refused_naming_the_line(
    agent_main, workdir, tmp_path, option, case
):
    data, problem = BROKEN[case]
    transcript = tmp_path / "broken.jsonl"
    transcript.write_bytes(data)
    task = ["t"] if option == "--replay" else []  # --show takes no task
    args = ["--workdir", str(workdir), option, str(transcript), *task]
    if case in ("binary", "no arguments"):  # the two, as real processes
        proc = run_agent(*args, env=offline())
    else:
        proc = agent_main(*args, env={})
    one_line_error(proc, str(transcript), problem)


def test_a_reply_field_the_sdk_cannot_read_is_refused_on_replay(agent_main, workdir, tmp_path):
    transcript = tmp_path / "odd.jsonl"
    transcript.write_bytes(lines(USER, {"role": "assistant", "content": "x", "refusal": 5}))
    proc = agent_main("--workdir", str(workdir), "--replay", str(transcript), env={})
    one_line_error(proc, f"{transcript} line 2 cannot be replayed", "refusal")


def test_show_of_a_half_written_last_line_shows_the_rest_and_marks_it(tmp_path):
    data = EXAMPLE.read_bytes()
    transcript = tmp_path / "crashed.jsonl"
    transcript.write_bytes(data[: data.rindex(b"\n", 0, -1) + 30])  # the last line, 29 bytes of it
    proc = run_agent("--show", str(transcript), env=clean_env())
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout.splitlines()
    count = data.count(b"\n")
    assert shown[-1].startswith(f"{count:3} (cut off: line {count} was only partly written): ")
    whole = run_agent("--show", str(EXAMPLE), env=clean_env()).stdout.splitlines()
    assert shown[:-1] == [line for line in whole if not line.startswith(f"{count:3} ")]
    proc = run_agent("--replay", str(transcript), "t", env=offline())
    one_line_error(proc, f"line {count} was only partly written", "--show", "delete that line")


# --- Files named by options -------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_args, phrases",
    [
        (lambda tmp: ["--workdir", str(ROOT / "README.md")], ["--workdir", "is a file"]),
        (
            lambda tmp: ["--workdir", str(ROOT / "README.md" / "sub")],
            ["--workdir", "cannot create"],
        ),
        (lambda tmp: ["--save", str(tmp / "missing" / "run.jsonl")], ["--save", "does not exist"]),
        (lambda tmp: ["--save", str(tmp)], ["--save", "is a folder", "run.jsonl"]),
    ],
    ids=["workdir-file", "workdir-under-file", "save-missing-folder", "save-onto-folder"],
)
def test_a_bad_file_option_is_named(tmp_path, workdir, make_args, phrases):
    args = ["--workdir", str(workdir), *make_args(tmp_path), "--replay", str(EXAMPLE)]
    proc = run_agent(*args, env=offline())
    one_line_error(proc, *phrases)
    assert "Errno" not in proc.stderr


# --- No task, stdin not a terminal; replays that leave the recorded path ---------------------


def test_reading_the_task_from_a_pipe_says_so_first_and_how_to_end_it(workdir):
    with StubServer([reply("got it")], api_key=KEY) as server:
        proc = forked_agents.Popen(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=stub_env(server), text=True,
        )  # fmt: skip
        try:
            notice = proc.stderr.readline()  # before anything was typed
            while notice.startswith("model "):
                notice = proc.stderr.readline()
            assert "read from stdin" in notice and "Ctrl-D" in notice and "Ctrl-Z" in notice
            out, err = proc.communicate("the task\n", timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0 and out == "got it\n", err
    assert server.requests[0]["messages"][1]["content"] == "the task"


@on_a_terminal
def test_a_replay_answered_n_says_once_that_it_left_the_recorded_path(workdir):
    child = forked_agents.spawn(
        sys.executable, [str(ROOT / "agent.py"), "--workdir", str(workdir), "--replay",
                         str(EXAMPLE)],
        env=offline(), cwd=str(ROOT / "tests"), encoding="utf-8", timeout=30,
    )  # fmt: skip
    child.expect_exact("Run it? [y/N/a] ")
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    output = child.before
    assert child.exitstatus == 0, output
    assert output.count("the run has left the recorded path") == 1
    assert output.index("left the recorded path") > output.index("did not approve")


@pytest.mark.posix("the demo task runs python3, a name Windows may not have")
def test_a_faithful_replay_says_nothing_about_the_recorded_path(agent_main, workdir):
    proc = agent_main("--workdir", str(workdir), "--yes", "--replay", str(EXAMPLE), env={})
    assert proc.returncode == 0, proc.stderr
    assert "recorded path" not in proc.stderr


# --- An old Python -----------------------------------------------------------------------------

SOURCE = (ROOT / "agent.py").read_text(encoding="utf-8")


def test_agent_py_parses_as_python_3_8_and_checks_the_version_before_importing_more():
    tree = ast.parse(SOURCE, feature_version=(3, 8))
    body = tree.body[1:]  # after the docstring
    first = body[0]
    assert isinstance(first, ast.ImportFrom) and first.module == "__future__"
    gate = next(i for i, node in enumerate(body) if isinstance(node, ast.If))
    assert "sys.version_info < (3, 11)" in ast.unparse(body[gate].test)
    stdlib = {"argparse", "codecs", "contextlib", "json", "os", "signal", "sys", "time"}
    for node in body[1:gate]:  # only standard modules that exist in 3.8 come before the gate
        assert isinstance(node, ast.Import), ast.unparse(node)
        assert {alias.name for alias in node.names} <= stdlib
    assert "model_client" in ast.unparse(body[gate + 1])


@pytest.mark.parametrize("version", [(3, 8, 10), (3, 9, 6), (3, 10, 12)])
def test_an_old_python_is_told_in_one_line(version):
    # Runs agent.py as an old Python would get to it: the version faked, and model_client
    # (whose annotations 3.9 cannot evaluate) made to fail if it is imported before the check.
    fake = (
        "import runpy, sys; sys.modules['model_client'] = None; "
        f"sys.version_info = {version + ('final', 0)!r}; sys.argv = ['agent.py', '--help']; "
        f"runpy.run_path({str(ROOT / 'agent.py')!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", fake], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stdout == ""
    version_text = ".".join(map(str, version))
    assert proc.stderr.strip() == (
        f"error: agent.py needs Python 3.11 or newer, and this is Python {version_text}: install "
        "a newer Python and make the virtual environment with it (see the README's quick start)"
    )


# --- In-process runs ---------------------------------------------------------------------------


@pytest.fixture
def agent_main(monkeypatch, tmp_path):
    """The agent in this process, for the variations of a row a real process has shown once:
    call(*args, env=settings) with only those LLM_ settings and tmp_path/config.env; returns
    what a process would (returncode, stdout, stderr)."""

    def call(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
        monkeypatch.setattr(model_client, "CONFIG_FILE", tmp_path / "config.env")
        return run_in_process(*args, env=clean_env(**env))

    return call
