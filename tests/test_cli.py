"""The command line as users run it: a real process, the real openai SDK over HTTP to a local
stub server (127.0.0.1), exit codes, and what lands on stdout and stderr."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import forked_agents
import pytest
from conftest import ROOT, clean_env, run_agent, run_in_process, saved_messages, stub_env, wait_for
from fake_model import reply, tool_call
from stub_server import Fail, StubServer, demo_script

import agent
from minimal_agent import cli

KEY = "test-key-do-not-print-0123456789"


def read_call(call_id: str, path: str = "notes.txt") -> dict:
    return reply(None, tool_call("read_file", {"path": path}, call_id), reasoning="")


def final(text: str) -> dict:
    return reply(text, reasoning="done")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_one_line_error(proc, *phrases: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ")
    for phrase in phrases:
        assert phrase in last


# agent.py run as the program, with one more exit handler registered before it: handlers run
# last-registered first, so this one runs after all of the agent's, and says what is frozen.
AGENT_AND_THEN = """
import atexit, gc, runpy, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count(), file=sys.stderr))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_as_the_program_the_exit_leaves_nothing_to_collect_and_the_transcript_whole(
    workdir, tmp_path
):
    """Python's exit would collect every object loaded (openai's models: some 0.2 s after the
    answer, tests/benchmark.py figure (i)); as the program the agent freezes them instead, after
    the transcript is closed. Called in-process (tests, an IDE's console) it freezes nothing."""
    save = tmp_path / "run.jsonl"
    args = ["--workdir", str(workdir), "--save", str(save), "hi"]
    with StubServer([reply("hello")]) as server:
        proc = subprocess.run(
            [sys.executable, "-c", AGENT_AND_THEN, str(ROOT / "agent.py"), *args],
            env=stub_env(server), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "hello\n", proc.stderr
    frozen = int(proc.stderr.strip().splitlines()[-1].removeprefix("frozen at exit: "))
    assert frozen > 50_000  # everything the run loaded, openai's models among it
    assert [m["role"] for m in saved_messages(save)] == ["system", "user", "assistant"]
    import atexit

    handlers = atexit._ncallbacks()
    with StubServer([reply("hello")]) as server:
        assert run_in_process(*args[:2], "--no-save", "hi", env=stub_env(server)).returncode == 0
    assert atexit._ncallbacks() == handlers  # nothing left to run at this process's exit


@pytest.mark.posix("the demo task runs python3, a name Windows may not have")
def test_the_lessons_task_end_to_end(workdir):
    with StubServer(demo_script(), api_key=KEY) as server:
        proc = run_agent(
            "--workdir", str(workdir), "--yes", "Create tool_demo.py ...", env=stub_env(server)
        )
    assert server.problems == []
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "tool_demo.py prints 391: 17 * 23 = 391.\n"
    assert (workdir / "tool_demo.py").read_text() == "print(17 * 23)\n"
    last_request = server.requests[-1]["messages"]
    assert last_request[-1] == {
        "role": "tool",
        "tool_call_id": "call_3",
        "content": "exit code 0\n391\n",
    }
    assert [m.get("reasoning_content") for m in last_request if m["role"] == "assistant"] == [
        "Write the file first, then read it back and run it.",
        "Check what was written.",
        "Now run it.",
    ]
    for line in ("[1] write_file(path='tool_demo.py'", "[3] run_shell(command='python3"):
        assert line in proc.stderr
    summary = proc.stderr.strip().splitlines()[-1]
    assert summary.startswith("steps 4, tool calls 3, prompt tokens ")
    assert "cache-hit tokens " in summary and "completion tokens 40" in summary
    assert KEY not in proc.stderr
    assert "waiting for the model" not in proc.stderr and "\033" not in proc.stderr  # no tty


@pytest.mark.parametrize("status", [429, 503])
def test_busy_servers_are_retried_by_the_sdk(workdir, status):
    (workdir / "notes.txt").write_text("note")
    script = [
        Fail(status, "busy", {"retry-after-ms": "10"}),
        read_call("c1"),
        Fail(status, "busy", {"retry-after-ms": "10"}),
        final("The note says note."),
    ]
    with StubServer(script, api_key=KEY) as server:
        proc = run_in_process("--workdir", str(workdir), "read notes.txt", env=stub_env(server))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "The note says note.\n"
    assert len(server.requests) == 4 and server.problems == []


def test_a_server_that_stays_busy_gives_a_clear_error(workdir):
    script = [Fail(503, "Server overloaded", {"retry-after-ms": "10"})] * 3
    with StubServer(script, api_key=KEY) as server:
        proc = run_in_process("--workdir", str(workdir), "hello", env=stub_env(server))
    assert_one_line_error(proc, "503", "Server overloaded", "try again later")
    assert len(server.requests) == 3  # the SDK's three attempts


def test_a_wrong_key_gives_exit_1_and_the_config_hint(workdir):
    with StubServer([final("never")], api_key="the-right-key") as server:
        env = stub_env(server, LLM_API_KEY=KEY)
        proc = run_in_process("--workdir", str(workdir), "hello", env=env)
    assert_one_line_error(proc, "401", "LLM_API_KEY", "config.env")
    assert KEY not in proc.stderr
    assert server.requests == []


def test_a_key_quoted_by_the_server_is_not_printed(workdir):
    with StubServer([Fail(403, f"key {KEY} may not use this model")], api_key=KEY) as server:
        proc = run_in_process("--workdir", str(workdir), "hello", env=stub_env(server))
    assert_one_line_error(proc, "403", "key *** may not use this model")
    assert KEY not in proc.stderr


def test_a_reply_without_choices_is_a_one_line_error(workdir):
    class NoChoices(StubServer):
        def answer(self, path, headers, body):
            return 200, {}, {"error": {"message": "upstream exploded"}}

    with NoChoices([]) as server:
        proc = run_in_process("--workdir", str(workdir), "hi", env=stub_env(server))
    assert_one_line_error(proc, "no choices", "upstream exploded")


def test_an_empty_balance_says_so(workdir):
    with StubServer([Fail(402, "Insufficient Balance")], api_key=KEY) as server:
        proc = run_in_process("--workdir", str(workdir), "hello", env=stub_env(server))
    assert_one_line_error(proc, "402", "Insufficient Balance", "balance")


def test_an_unknown_model_names_the_setting(workdir):
    with StubServer([Fail(400, "Model Not Exist")], api_key=KEY) as server:
        proc = run_in_process(
            "--workdir", str(workdir), "--model", "nope", "hello", env=stub_env(server)
        )
    assert_one_line_error(proc, "400", "Model Not Exist", "LLM_MODEL")
    assert server.requests[0]["model"] == "nope"


def test_a_short_local_key_does_not_mangle_the_message(workdir, quick_retries):
    url = f"http://127.0.0.1:{free_port()}"
    proc = run_in_process(
        "--workdir", str(workdir), "hi", env=clean_env(LLM_API_KEY="k", LLM_BASE_URL=url)
    )
    assert_one_line_error(proc, "check LLM_BASE_URL")


def test_a_url_without_a_scheme_is_named(workdir):
    env = clean_env(LLM_API_KEY=KEY, LLM_BASE_URL="localhost:11434/v1")
    proc = run_agent("--workdir", str(workdir), "hi", env=env)
    assert_one_line_error(proc, "LLM_BASE_URL must start with http:// or https://")


def test_nothing_listening_gives_exit_1_and_the_url(workdir, quick_retries):
    url = f"http://127.0.0.1:{free_port()}"
    env = clean_env(LLM_API_KEY=KEY, LLM_BASE_URL=url)
    started = time.monotonic()
    proc = run_in_process("--workdir", str(workdir), "hello", env=env)
    assert_one_line_error(proc, "could not connect", url, "LLM_BASE_URL")
    assert time.monotonic() - started < 30


def test_the_step_limit_gives_exit_3(workdir):
    (workdir / "notes.txt").write_text("note")
    script = [read_call(f"c{i}") for i in range(3)]
    with StubServer(script, api_key=KEY) as server:
        proc = run_in_process(
            "--workdir", str(workdir), "--max-steps", "3", "read forever", env=stub_env(server)
        )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == ""
    assert "step limit (3 requests)" in proc.stderr
    assert len(server.requests) == 3 and server.problems == []


def test_a_missing_key_names_the_setting_and_never_uses_openai_api_key(workdir):
    with StubServer([final("never")], api_key=KEY) as server:
        env = stub_env(server, LLM_API_KEY="", OPENAI_API_KEY=KEY)
        proc = run_agent("--workdir", str(workdir), "hello", env=env)
    assert_one_line_error(proc, "LLM_API_KEY is not set", "config.env")
    assert server.requests == []


def test_no_openai_account_settings_are_sent_to_another_provider(workdir):
    with StubServer([final("ok")], api_key=KEY) as server:
        env = stub_env(
            server, OPENAI_API_KEY="sk-openai", OPENAI_ORG_ID="org-1", OPENAI_PROJECT_ID="p"
        )
        proc = run_in_process("--workdir", str(workdir), "hi", env=env)
    assert proc.returncode == 0, proc.stderr
    [headers] = server.headers
    assert headers["authorization"] == f"Bearer {KEY}"
    assert not [name for name in headers if name.startswith("openai-")]
    assert "sk-openai" not in str(headers) and "org-1" not in str(headers)


@pytest.mark.posix("the demo task runs python3, a name Windows may not have")
def test_save_then_replay_with_no_server_and_no_key(workdir, tmp_path):
    transcript = tmp_path / "demo.jsonl"
    with StubServer(demo_script(), api_key=KEY) as server:
        first = run_in_process(
            "--workdir", str(workdir), "--yes", "--save", str(transcript), "the demo",
            env=stub_env(server),
        )  # fmt: skip
    assert first.returncode == 0, first.stderr
    saved = saved_messages(transcript)
    assert saved[:-1] == server.requests[-1]["messages"]  # exactly what the model was sent
    assert saved[-1]["content"] == first.stdout.strip()
    assert KEY not in transcript.read_text()

    (workdir / "tool_demo.py").unlink()
    offline = clean_env(LLM_API_KEY="", LLM_BASE_URL=f"http://127.0.0.1:{free_port()}")
    again = run_in_process(
        "--workdir", str(workdir), "--yes", "--replay", str(transcript), env=offline, stdin=None
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert (workdir / "tool_demo.py").read_text() == "print(17 * 23)\n"  # tools ran for real
    assert "replaying" in again.stderr


def test_save_onto_an_existing_conversation_is_refused_and_the_file_kept(workdir, tmp_path):
    transcript = tmp_path / "run.jsonl"
    old = [{"role": "system", "content": "old"}, {"role": "user", "content": "the last task"}]
    transcript.write_text("".join(json.dumps(m) + "\n" for m in old))
    before = transcript.read_bytes()
    with StubServer([final("new answer")], api_key=KEY) as server:
        proc = run_agent(
            "--workdir", str(workdir), "--save", str(transcript), "a new task",
            env=stub_env(server),
        )  # fmt: skip
    assert proc.returncode == 1 and server.requests == []
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "already holds a conversation" in line
    assert f"--resume {transcript}" in line
    assert transcript.read_bytes() == before


def test_save_onto_an_empty_file_uses_it(workdir, tmp_path):
    transcript = tmp_path / "run.jsonl"
    transcript.write_text("")
    with StubServer([final("new answer")], api_key=KEY) as server:
        proc = run_in_process(
            "--workdir", str(workdir), "--save", str(transcript), "a new task",
            env=stub_env(server),
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    saved = saved_messages(transcript)
    assert saved == [*server.requests[0]["messages"], final("new answer")]
    assert [m["content"] for m in saved[:2]] == [agent.SYSTEM_PROMPT, "a new task"]


def test_a_replay_that_runs_out_of_replies_is_an_error(workdir, tmp_path):
    transcript = tmp_path / "short.jsonl"
    lines = [{"role": "user", "content": "t"}, read_call("c1")]
    transcript.write_text("".join(json.dumps(m) + "\n" for m in lines))
    (workdir / "notes.txt").write_text("n")
    proc = run_in_process("--workdir", str(workdir), "--replay", str(transcript), env=clean_env())
    assert_one_line_error(proc, "no more replies")


def test_the_task_can_be_piped_on_stdin(workdir):
    with StubServer([final("piped ok")], api_key=KEY) as server:
        proc = run_in_process(
            "--workdir", str(workdir), env=stub_env(server), stdin="a task\nin lines\n"
        )
    assert proc.returncode == 0 and proc.stdout == "piped ok\n"
    assert server.requests[0]["messages"][1]["content"] == "a task\nin lines"


@pytest.mark.parametrize(
    "args, stdin, said",
    [
        (["   "], "", "the task is only spaces: give it in words, or pipe it on stdin"),
        (["\t", " \n "], "", "the task is only spaces: give it in words, or pipe it on stdin"),
        ([""], "", "the task is only spaces: give it in words, or pipe it on stdin"),
        ([], " \n\t\n", "no task: give it as words, or pipe it on stdin"),
    ],
    ids=["spaces", "tab-and-newline", "empty", "stdin"],
)
def test_a_task_of_only_whitespace_is_refused_as_bad_usage(workdir, args, stdin, said):
    with StubServer([final("should not be asked")], api_key=KEY) as server:
        proc = run_in_process("--workdir", str(workdir), *args, env=stub_env(server), stdin=stdin)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.rstrip().endswith(f"agent.py: error: {said}")
    assert "usage: agent.py" in proc.stderr and "Traceback" not in proc.stderr
    assert server.requests == [] and server.headers == []


def test_version_prints_the_version_that_pyproject_toml_gives():
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as file:
        version = tomllib.load(file)["project"]["version"]
    assert cli.VERSION == version  # one version, in both places
    proc = run_agent("--version", env=clean_env())
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == f"agent.py {version}\n"


@pytest.mark.posix("the C locale, as a minimal Linux container or an old ssh session has it")
def test_a_chinese_task_typed_in_a_c_locale_reaches_the_model_as_typed(workdir):
    task = "创建 hello.py 并运行它"
    # Neither UTF-8 mode nor locale coercion: Python decodes the arguments as ASCII.
    env = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.getfilesystemencoding(), ascii(sys.argv[1]))",
         task], capture_output=True, text=True, env=clean_env(**env), check=True,
    )  # fmt: skip
    assert probe.stdout.split()[0] == "ascii"  # what agent.py gets: surrogate escapes
    assert "\\udce5" in probe.stdout
    with StubServer([final("好的: hello.py 已创建")], api_key=KEY) as server:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), task],
            capture_output=True, env=stub_env(server, **env), timeout=60, cwd=workdir,
        )  # fmt: skip
    err = proc.stderr.decode("ascii", "replace")
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert server.requests[0]["messages"][1]["content"] == task  # exactly as typed
    assert server.problems == []
    assert proc.stdout == b"??: hello.py ???\n"  # the console cannot show it: "?", no error


def test_without_a_terminal_shell_commands_are_refused_and_the_model_told(workdir):
    script = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "run_shell", "arguments": '{"command": "touch ran"}'},
                }
            ],
        },
        final("could not run it"),
    ]
    with StubServer(script, api_key=KEY) as server:
        proc = run_in_process("--workdir", str(workdir), "touch a file", env=stub_env(server))
    assert proc.returncode == 5  # refused for want of approval: no success for a script
    assert not (workdir / "ran").exists()
    answer = server.requests[1]["messages"][-1]["content"]
    assert answer.startswith("Error: PermissionError: the command was not run")
    assert "--yes" in proc.stderr


# A command that inherited the agent's stdin would read the line waiting there, or wait for
# more until its time-out; with stdin closed, `read` meets the end of input at once.
READ_STDIN = 'read line; echo "read exit $?: $line"'
NOTHING_READ = "exit code 0\nread exit 1: \n"


@pytest.mark.posix("the command uses /bin/sh's read, $? and $line")
def test_shell_commands_get_no_stdin_while_the_agents_stdin_is_an_open_pipe(workdir):
    script = [
        reply(None, tool_call("run_shell", {"command": READ_STDIN}, "c1"), reasoning=""),
        final("done"),
    ]
    with StubServer(script, api_key=KEY) as server:
        agent_process = forked_agents.Popen(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--yes",
             "--timeout", "20", "read a line"],
            env=stub_env(server), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=ROOT / "tests",
        )  # fmt: skip
        try:
            agent_process.stdin.write("typed by the user\n")
            agent_process.stdin.flush()  # and the pipe stays open until the agent has ended
            assert agent_process.wait(60) == 0, agent_process.stderr.read()
        finally:
            agent_process.kill()
            agent_process.stdin.close()
    assert server.problems == []
    assert server.requests[1]["messages"][-1]["content"] == NOTHING_READ


def test_raw_prints_each_response_as_json_on_stderr_only(workdir):
    with StubServer([final("raw ok")], api_key=KEY) as server:
        proc = run_in_process("--workdir", str(workdir), "--raw", "hi", env=stub_env(server))
    assert proc.stdout == "raw ok\n"
    start = proc.stderr.index("{")
    dumped, _ = json.JSONDecoder().raw_decode(proc.stderr[start:])
    assert dumped["id"] == "stub-1"
    assert dumped["choices"][0]["message"]["reasoning_content"] == "done"
    assert dumped["usage"]["prompt_cache_hit_tokens"] == 0


@pytest.mark.parametrize("reason", ["length", "insufficient_system_resource"])
def test_a_cut_off_reply_is_warned_about_on_stderr(workdir, reason):
    cut = {"role": "assistant", "content": "The answer is", "finish_reason": reason}
    with StubServer([cut], api_key=KEY) as server:
        proc = run_in_process("--workdir", str(workdir), "hi", env=stub_env(server))
    assert proc.returncode == 4 and proc.stdout == "The answer is\n"  # 4: incomplete
    assert f"warning: the reply was cut off (finish_reason {reason})" in proc.stderr


def test_the_default_workdir_is_the_playground_beside_agent_py():
    with StubServer([final("ok")], api_key=KEY) as server:
        proc = run_in_process("hi", env=stub_env(server))
    assert proc.returncode == 0
    assert f"workdir {ROOT / 'playground'}" in proc.stderr


def test_a_mistyped_workdir_is_refused_in_one_line_naming_the_nearest_folder(tmp_path):
    """The attack on the old code: --workdir ./sr (meant ./src) made sr/, parents and all, and
    the run went on there."""
    (tmp_path / "project" / "src").mkdir(parents=True)
    mistyped = tmp_path / "project" / "sr" / "deeper"
    with StubServer([final("never asked")], api_key=KEY) as server:
        proc = run_in_process("--workdir", str(mistyped), "hi", env=stub_env(server))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        f"error: --workdir {mistyped} does not exist (the nearest folder that does is "
        f"{tmp_path / 'project'}): check the name, or create the folder first\n"
    )
    assert server.requests == [] and not (tmp_path / "project" / "sr").exists()


@pytest.mark.parametrize(
    "args", [["--max-steps", "0"], ["--timeout", "-1"], ["--max-steps", "many"], ["--bogus"]]
)
def test_bad_usage_gives_exit_2(args):
    proc = run_agent(*args, "task", env=clean_env())
    assert proc.returncode == 2
    assert "usage:" in proc.stderr and "Traceback" not in proc.stderr


def test_help_lists_every_option_and_imports_nothing_it_does_not_need():
    proc = run_agent("--help", env=clean_env(PYTHONPROFILEIMPORTTIME="1", COLUMNS="100"))
    assert proc.returncode == 0
    for option in ("--workdir", "--model", "--max-steps", "--yes", "--timeout", "--save",
                   "--replay", "--raw", "--show", "--chat", "--continue"):  # fmt: skip
        assert option in proc.stdout
    assert proc.stdout.startswith("usage: agent.py [options] [TASK ...]\n")
    assert max(len(line) for line in proc.stdout.splitlines()) <= 98  # COLUMNS, less 2
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "json" in imported and "argparse" in imported  # the import log works
    # The SDK and dotenv, the pricing, threads, subprocesses, signals: none of it is needed for
    # --help (argparse's own formatter brings shutil and textwrap, which it needs).
    unneeded = {"openai", "dotenv", "urllib.request", "threading", "subprocess", "signal"}
    assert not {name for name in imported if name in unneeded or name.split(".")[0] in unneeded}


@pytest.mark.parametrize("columns", ["100", "60"])
def test_help_fits_the_terminal_and_keeps_every_word(columns):
    # argparse's own layout: every line within the terminal's width (less 2, as argparse
    # sizes it), each option at the start of a line, and no word of any help text lost.
    proc = run_agent("--help", env=clean_env(COLUMNS=columns))
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    for line in lines:
        assert len(line) <= int(columns) - 2 or " " not in line.strip(), line
    parser = cli.build_parser(agent)
    starts = [line.split()[0].rstrip(",") for line in lines if line.startswith("  -")]
    options = [action.option_strings[0] for action in parser._actions if action.option_strings]
    assert starts == options
    flat = "".join(proc.stdout.split())
    for text in (parser.description, parser.epilog):
        assert "".join(text.split()) in flat


def test_show_prints_a_transcript_as_a_timeline(tmp_path):
    transcript = tmp_path / "t.jsonl"
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read notes.txt"},
        read_call("c1"),
        {"role": "tool", "tool_call_id": "c1", "content": "line one\nline two"},
        final("It has two lines."),
    ]
    transcript.write_text("".join(json.dumps(m) + "\n" for m in messages))
    proc = run_agent("--show", str(transcript), env=clean_env())
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == [
        "  1 system: be brief",
        "  2 user: read notes.txt",
        "  3 assistant calls read_file(path='notes.txt') [c1]",
        "  4 tool [c1]: line one line two",
        "  5 assistant (thinking): done",
        "  5 assistant: It has two lines.",
    ]


def test_show_of_an_empty_file_says_so(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    proc = run_agent("--show", str(tmp_path / "empty.jsonl"), env=clean_env())
    assert (proc.returncode, proc.stdout) == (0, "")
    assert proc.stderr == f"{tmp_path / 'empty.jsonl'} holds no messages\n"


def test_show_of_a_broken_file_is_a_one_line_error(tmp_path):
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    proc = run_agent("--show", str(tmp_path / "bad.jsonl"), env=clean_env())
    assert_one_line_error(proc, "line 1 is not JSON")
    proc = run_agent("--show", str(tmp_path / "missing.jsonl"), env=clean_env())
    assert_one_line_error(proc, "missing.jsonl")


@pytest.mark.posix("the demo task runs python3, a name Windows may not have")
def test_the_example_transcript_replays_offline_with_no_key(workdir):
    example = ROOT / "examples" / "tool_demo.jsonl"
    offline = clean_env(LLM_API_KEY="", LLM_BASE_URL=f"http://127.0.0.1:{free_port()}")
    proc = run_in_process("--workdir", str(workdir), "--yes", "--replay", str(example), env=offline)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "tool_demo.py prints 391: 17 * 23 = 391.\n"
    assert (workdir / "tool_demo.py").read_text() == "print(17 * 23)\n"
    assert "-> exit code 0 391" in proc.stderr  # the command really ran again
    messages = saved_messages(example)
    assert messages[0]["content"] == agent.SYSTEM_PROMPT  # still matches the program
    assert messages[1]["content"] == cli.DEMO_TASK


@pytest.mark.posix("the demo task runs python3, a name Windows may not have")
def test_a_replay_says_its_replies_were_replayed_and_no_budget_stops_it(workdir):
    # No server counted tokens and nothing was paid: the totals line says so, rather than
    # "prompt tokens 0 ... cost unknown (no usage reported for 4 replies)", and a budget set
    # in the user's settings has nothing to stop (it stopped the second request).
    example = ROOT / "examples" / "tool_demo.jsonl"
    offline = clean_env(LLM_API_KEY="", LLM_MAX_COST="0.01")
    proc = run_in_process("--workdir", str(workdir), "--yes", "--replay", str(example), env=offline)
    assert proc.returncode == 0, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last == "steps 4, tool calls 3; the replies were replayed: no tokens, no cost"


def test_max_tokens_is_sent_only_when_asked_for(workdir):
    runs = {"default": [], "option": ["--max-tokens", "7"], "setting": []}
    sent = {}
    for name, options in runs.items():
        settings = {"LLM_MAX_TOKENS": "9"} if name == "setting" else {}
        with StubServer([final("ok")]) as server:
            proc = run_in_process(
                "--workdir", str(workdir), *options, "hi", env=stub_env(server, **settings)
            )
        assert proc.returncode == 0, proc.stderr
        sent[name] = server.requests[0].get("max_tokens")
    assert sent == {"default": None, "option": 7, "setting": 9}


def test_a_bad_max_tokens_setting_is_a_one_line_error(workdir):
    with StubServer([]) as server:
        proc = run_in_process(
            "--workdir", str(workdir), "hi", env=stub_env(server, LLM_MAX_TOKENS="x")
        )
    assert_one_line_error(proc, "LLM_MAX_TOKENS", "'x'")
    assert server.requests == []


def test_a_server_that_never_answers_is_given_up_at_the_request_timeout(workdir, quick_retries):
    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        env = clean_env(LLM_API_KEY="k", LLM_BASE_URL=url)
        started = time.monotonic()
        proc = run_in_process("--workdir", str(workdir), "--request-timeout", "0.5", "hi", env=env)
        took = time.monotonic() - started
    assert_one_line_error(proc, "timed out", url)
    assert took < 30  # three attempts of 0.5 s, not 3 x 600 s


@pytest.mark.parametrize("stream", ["--no-stream", "--stream"])
def test_a_server_that_holds_its_answer_is_reported_as_timed_out(workdir, quick_retries, stream):
    released = threading.Event()

    def held(request):  # the request is read; the answer never comes within the time-out
        released.wait(30)
        return final("too late")

    with StubServer([held] * 3, api_key=KEY) as server:  # one for each of the SDK's attempts
        try:
            proc = run_in_process(
                "--workdir", str(workdir), "--request-timeout", "0.5", stream, "hi",
                env=stub_env(server),
            )  # fmt: skip
        finally:
            released.set()
        # The stub takes one request at a time: the later attempts are counted only once the
        # first is released, which a loaded machine may take a moment to get to.
        wait_for(lambda: len(server.requests) == 3, "the stub never counted three attempts")
    assert_one_line_error(proc, "timed out", "sent nothing for 0.5 s", "--request-timeout")
    assert "could not connect" not in proc.stderr
    streamed = [request.get("stream", False) for request in server.requests]
    assert streamed == [stream == "--stream"] * 3  # each of the SDK's attempts timed out
