"""Measure the agent against its floors, side by side in one run (not collected by pytest).

    python tests/benchmark.py [--rounds N] [--figures LETTERS]

(a) start-up: `agent.py --help` against `python -c "import argparse"`, the floor for any
    argparse CLI (target: under 2x, issue 31: argparse's own help formatting, and the start-up
    users feel is launch to the first request, bounded by the SDK's import);
(b) a 40-step scripted session, whole process, against a bare loop of
    client.chat.completions.create calls making the same requests (target: under 1.05x);
(c) request sizes over 30 steps whose tool prints 1 MB each time, with and without --save
    (target: every request under steps x 21 KB);
(d) streaming latency: time from the stub sending a step's first reasoning chunk to that text
    appearing on the agent's pseudo-terminal, over 20 steps (target: median under 50 ms);
(e) a 40-step streamed session, whole process, against a bare SDK streaming loop making the
    same requests and putting each reply together with ChatCompletionStreamState (target:
    under 1.05x).
(f) a 10-turn --chat session driven on stdin, each turn a tool call and an answer: every request
    after the first begins with the whole previous request, byte for byte (target: 100%).
(g) the 40-step session of (b) with the cost bookkeeping on (deepseek-flash: each reply priced
    at its hour from DeepSeek-shaped usage) against off (a model with no price: tokens only),
    the context window set on both sides so that pricing is the only difference: wall and CPU
    time, twice the rounds (target: CPU under 1.03x, that is within the noise); and what pricing
    one reply takes in-process, as a share of the session.
(h) a 16-turn --chat session in a 4,096-token window (llama.cpp's /props), each turn reading a
    12 KB file: the share of the bytes sent that were the whole previous request, which the
    compactions lower (target: a request begins anew only right after a compaction the
    transcript records, and the server refuses nothing).
(i) the exit: time from a one-request run's answer reaching stdout to the process's end, the
    agent as the program against the same agent started through agent.main(argv), which leaves
    Python's last garbage collection of everything loaded (openai's models) to run at exit
    (target: median under 100 ms).
(j) what recording each step's changes for --undo costs in a project: a 10-step run whose every
    step runs a shell command that appends to a file, in a workdir of 10,000 files (1 KB each,
    in 100 folders), saved against the same run with --no-save (target: at most 0.5 s more).
(k) live output: a 40-step session whose every step runs a command printing 10,000 lines over a
    quarter of a second, on a pseudo-terminal (the output drawn live) against piped (nothing
    drawn): the CPU the agent and its commands take (target: under 1.05x), and the wall time.
(l) recording for --undo in a large project, 100,000 files of a few bytes in 1,000 folders (a
    node_modules or a large .venv), saved against --no-save: what the first step adds (a run of
    one shell step; target at most 2 s), what each further step adds (a run of 10 shell steps,
    less the first; target at most 0.3 s), the peak memory added (target at most 100 MB); and
    a run of 10 requests with a model that takes 2 s to answer each (target: at most 1.05x).
(m) a write's review (the change line and diff of write_file, in-process): 100,000 lines
    written over 100,000 near-identical ones, in six shapes (one line changed; every 2nd, 3rd
    and 97th line changed; all lines shifted by one; 440 lines of two kinds in the middle, just
    under the comparison's bounds): the slowest shape's median (target under 1 s; difflib
    alone took minutes).
(n) a one-line change in a file of 100, 2,000 and 20,000 lines: the characters the model sends
    (the call's arguments) with edit_file against write_file, and the agent's own time to apply
    the edit (execute_tool_call: read, match, review, write; target at most 50 ms for 20,000
    lines), beside the undo recording's walk of that step (in-process).
(o) the test suite's agents: a one-reply run of `python agent.py` forked from
    tests/forkserver.py (which imported the SDK once) against the same run as a new process:
    the CPU of each (user and system; target under 0.4x), their outputs alike.
Runs alternate between the two sides, and the figures are medians, so load on a shared
machine hits both alike. Everything talks to a stub server on 127.0.0.1; the conversations are
saved in a temporary folder, not the user's sessions folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pexpect
from fake_model import reply, tool_call
from stub_server import Streamed, StubServer, extends

ROOT = Path(__file__).resolve().parent.parent
AGENT = str(ROOT / "agent.py")
KEY = "bench-key"
SESSIONS = tempfile.TemporaryDirectory(prefix="agent-bench-sessions-")  # removed at exit
FIGURES = "abcdefghijklmno"

# Both bare loops end as the agent does (figure (i)): Python's last collection is skipped, so
# (b) and (e) compare the loops, not the ways of exiting.
BARE_LOOP = """
import gc, json, sys
from openai import OpenAI
client = OpenAI(api_key=sys.argv[2], base_url=sys.argv[3])
for request in json.load(open(sys.argv[1])):
    client.chat.completions.create(**request)
gc.freeze()
"""

BARE_STREAMING_LOOP = """
import gc, json, sys
from openai import OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
client = OpenAI(api_key=sys.argv[2], base_url=sys.argv[3])
for request in json.load(open(sys.argv[1])):
    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(**request):
        state.handle_chunk(chunk)
    state.current_completion_snapshot
gc.freeze()
"""


# As on a user's machine, Python may cache compiled modules (this workplace turns that off).
BASE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def env_for(server: StubServer) -> dict[str, str]:
    env = {k: v for k, v in BASE_ENV.items() if not k.startswith(("LLM_", "OPENAI_"))}
    env.update(LLM_API_KEY=KEY, LLM_BASE_URL=server.url, LLM_MODEL="deepseek-flash")
    env.update(LLM_SESSIONS_DIR=SESSIONS.name)
    return env


def timed(command: list[str], env: dict = BASE_ENV) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, check=True)
    return time.perf_counter() - started


def tool_step(number: int, name: str, arguments: dict) -> dict:
    return reply(None, tool_call(name, arguments, f"call_{number}"), reasoning="")


def session_script(steps: int, thinking: bool = False) -> list[dict]:
    tools = [tool_step(n, "read_file", {"path": "notes.txt"}) for n in range(1, steps)]
    if thinking:  # a streamed step has thinking, text and a tool call, as DeepSeek sends them
        for step in tools:
            step.update(content="Reading the note.", reasoning_content="I read it again. " * 4)
    return [*tools, {"role": "assistant", "content": "done", "reasoning_content": ""}]


def command_for(steps: int, work: str) -> list[str]:
    return [sys.executable, AGENT, "--workdir", work, "--max-steps", str(steps), "read the note"]


def startup(rounds: int) -> tuple[float, float]:
    agent, floor = [], []
    for _ in range(rounds):
        agent.append(timed([sys.executable, AGENT, "--help"]))
        floor.append(timed([sys.executable, "-c", "import argparse"]))
    return statistics.median(agent), statistics.median(floor)


def session(rounds: int, steps: int = 40, stream: bool = False) -> tuple[float, float]:
    """Medians of the agent's session and of the bare loop making the same requests."""
    option = "--stream" if stream else "--no-stream"
    loop = BARE_STREAMING_LOOP if stream else BARE_LOOP
    with tempfile.TemporaryDirectory() as work:
        Path(work, "notes.txt").write_text("a short note\n")
        requests_file = Path(work, "requests.json")
        with StubServer(session_script(steps, stream), api_key=KEY) as server:
            timed([*command_for(steps, work), option], env_for(server))
            recorded = [
                {k: v for k, v in r.items() if k in ("model", "messages", "tools", "stream")}
                | ({"stream_options": r["stream_options"]} if stream else {})
                for r in server.requests
            ]
        assert len(recorded) == steps and not server.problems, server.problems
        assert all(r.get("stream", False) is stream for r in recorded)
        requests_file.write_text(json.dumps(recorded))
        agent, bare = [], []
        for _ in range(rounds):
            with StubServer(session_script(steps, stream), api_key=KEY) as server:
                agent.append(timed([*command_for(steps, work), option], env_for(server)))
            with StubServer(session_script(steps, stream), api_key=KEY) as server:
                command = [sys.executable, "-c", loop, str(requests_file), KEY, server.url]
                bare.append(timed(command, BASE_ENV))
    return statistics.median(agent), statistics.median(bare)


def first_thinking_latency(steps: int = 20) -> list[float]:
    """Seconds from the stub sending each step's first reasoning chunk to its text showing on
    the agent's pseudo-terminal (the stub holds the rest of the stream until it has)."""
    holds = [threading.Event() for _ in range(steps)]
    script = []
    for number, hold in enumerate(holds, 1):
        step = tool_step(number, "read_file", {"path": "notes.txt"})
        step["reasoning_content"] = f"Step {number:02} thinks about the note."
        script.append(Streamed(step, hold=hold))
    script.append({"role": "assistant", "content": "done", "reasoning_content": ""})
    seen = []
    with tempfile.TemporaryDirectory() as work, StubServer(script, api_key=KEY) as server:
        Path(work, "notes.txt").write_text("a short note\n")
        child = pexpect.spawn(
            sys.executable,
            [*command_for(steps + 1, work)[1:]],
            env=env_for(server),
            encoding="utf-8",
            timeout=30,
        )
        for number, hold in enumerate(holds, 1):
            child.expect_exact(f"Step {number:02} thin")  # the first piece of this step's thinking
            seen.append(time.perf_counter())
            hold.set()
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0 and not server.problems, server.problems
    return [shown - sent for shown, sent in zip(seen, server.first_thinking_sent, strict=True)]


def request_sizes(save: bool, steps: int = 30) -> tuple[list[int], float]:
    command = {"command": "python3 -c \"print('x' * 1_000_000)\""}
    script = [tool_step(n, "run_shell", command) for n in range(1, steps + 1)]
    script.append({"role": "assistant", "content": "done", "reasoning_content": ""})
    with tempfile.TemporaryDirectory() as work, StubServer(script, api_key=KEY) as server:
        options = ["--save", str(Path(work, "t.jsonl"))] if save else []
        args = [sys.executable, AGENT, "--workdir", work, "--yes", "--max-steps", str(steps + 1)]
        args += [*options, "print a lot"]
        seconds = timed(args, env_for(server))
        assert not server.problems, server.problems
    return server.sizes, seconds


def chat_prefixes(turns: int = 10) -> tuple[int, int, float]:
    """(requests, how many began with the whole previous request, share of the bytes sent that
    were such a prefix) for a --chat session of turns turns."""
    script = []
    for turn in range(1, turns + 1):
        script += [tool_step(turn, "read_file", {"path": "notes.txt"}), reply(f"answer {turn}")]
    follow_ups = "".join(f"question {turn}\n" for turn in range(2, turns + 1))
    with tempfile.TemporaryDirectory() as work, StubServer(script, api_key=KEY) as server:
        Path(work, "notes.txt").write_text("a short note\n")
        command = [sys.executable, AGENT, "--workdir", work, "--chat", "question 1"]
        subprocess.run(command, input=follow_ups.encode(), env=env_for(server),
                       capture_output=True, check=True)  # fmt: skip
        assert len(server.sent) == 2 * turns and not server.problems, server.problems
    pairs = list(zip(server.sent, server.sent[1:], strict=False))
    shared = [len(earlier) for earlier, later in pairs if extends(later, earlier)]
    return len(server.sent), len(shared), sum(shared) / sum(len(later) for _, later in pairs)


def cpu_timed(command: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child: user + system) of one run."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = timed(command, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cost_bookkeeping(rounds: int, steps: int = 40) -> tuple[tuple, tuple, float]:
    """(wall, CPU) medians of (b)'s session with a priced model and with an unpriced one, runs
    alternating (each with its own stub, which checks every request), and the median seconds
    that pricing one reply takes in-process: Prices.cost on the SDK's usage object, as
    Session.add_up calls it, the only work the priced side does per reply that the other does
    not. The CPU time is the agent's own, less shaken by other load on the machine."""
    import timeit

    sys.path.insert(0, str(ROOT))
    from fake_model import completion

    from minimal_agent.core import cost

    sides = {"deepseek-flash": [], "unpriced-model": []}
    with tempfile.TemporaryDirectory() as work:
        Path(work, "notes.txt").write_text("a short note\n")
        for number in range(rounds):
            order = list(sides.items())
            for model, times in order[::-1] if number % 2 else order:  # who goes first, too
                with StubServer(session_script(steps), api_key=KEY) as server:
                    env = env_for(server) | {"LLM_MODEL": model, "LLM_CONTEXT_TOKENS": "1000000"}
                    times.append(cpu_timed([*command_for(steps, work), "--no-stream"], env))
                assert len(server.requests) == steps and not server.problems, server.problems
                assert all(r["model"] == model for r in server.requests)
    usage = {"prompt_tokens": 9000, "completion_tokens": 60, "total_tokens": 9060,
             "prompt_cache_hit_tokens": 8900, "prompt_cache_miss_tokens": 100}  # fmt: skip
    answer = completion(tool_step(1, "read_file", {"path": "notes.txt"}), usage=usage)
    prices = cost.prices_for("deepseek-flash", {})
    assert prices.cost(answer.usage, answer.created) > 0
    assert cost.prices_for("unpriced-model", {}) is None
    timer = timeit.Timer(lambda: prices.cost(answer.usage, answer.created))
    per_reply = statistics.median(t / 10_000 for t in timer.repeat(7, 10_000))
    priced, unpriced = (tuple(map(statistics.median, zip(*t, strict=True))) for t in sides.values())
    return priced, unpriced, per_reply


def compacted_chat_prefixes(turns: int = 16, window: int = 4_096) -> bool:
    """(h): prints the figure; returns whether it is within target."""

    def model(request: dict) -> dict:
        if not request.get("tools"):  # a compaction's summary
            return reply("Summary: the user had part files read, one a turn.")
        last = request["messages"][-1]
        if last["role"] == "user":
            number = int(last["content"].split()[1])
            call = tool_call("read_file", {"path": f"part{number}.txt"}, f"call{number:05}")
            return reply(None, call, reasoning="Read it.")
        return reply(f"Read {last['tool_call_id']}.", reasoning="Done.")

    questions = "".join(f"Read {turn} now.\n" for turn in range(1, turns + 1))
    with tempfile.TemporaryDirectory() as work:
        for turn in range(1, turns + 1):
            Path(work, f"part{turn}.txt").write_text(f"part {turn}, line of text\n" * 500)
        save = Path(work, "chat.jsonl")
        with StubServer([model] * (4 * turns), api_key=KEY, server="llamacpp", window=window,
                        compactions_allowed=True) as server:  # fmt: skip
            command = [sys.executable, AGENT, "--workdir", work, "--chat", "--save", str(save)]
            subprocess.run(command, input=questions.encode(), env=env_for(server),
                           capture_output=True, check=True)  # fmt: skip
        entries = [json.loads(line) for line in save.read_text().splitlines()]
        records = [entry for entry in entries if entry.get("event") == "compaction"]
    pairs = list(zip(server.sent, server.sent[1:], strict=False))
    shared = [len(earlier) for earlier, later in pairs if extends(later, earlier)]
    share = sum(shared) / sum(len(later) for _, later in pairs)
    anew = len(pairs) - len(shared)
    ok = anew == len(records) and not server.problems and not server.rejected
    print(f"(h) {turns}-turn --chat session in a {window:,}-token window: {len(server.sent)} "
          f"requests, {anew} began anew after the {len(records)} compactions, "
          f"{len(server.rejected)} refused; {share:.0%} of the bytes sent were the whole "
          "previous request (target: no other request begins anew, none refused)")  # fmt: skip
    return ok


# The agent as a test or an IDE's console calls it: agent.main(argv), which leaves the exit alone.
MAIN_WITH_ARGV = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import agent
sys.exit(agent.main(sys.argv[1:]))
"""


def exit_after_answer(rounds: int) -> tuple[float, float]:
    """Medians of the seconds from the answer's arrival on stdout to the process's end: the
    agent as the program, and the same agent through agent.main(argv)."""
    sides = {"program": [AGENT], "main(argv)": ["-c", MAIN_WITH_ARGV]}
    times = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(rounds):
            for side, start in sides.items():
                with StubServer([reply("hello")], api_key=KEY) as server:
                    command = [sys.executable, *start, "--workdir", work, "--no-save", "hi"]
                    agent = subprocess.Popen(
                        command,
                        env=env_for(server),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                    )
                    assert agent.stdout.readline() == b"hello\n"
                    answered = time.perf_counter()
                    assert agent.wait() == 0
                    times[side].append(time.perf_counter() - answered)
                    agent.stdout.close()
    return statistics.median(times["program"]), statistics.median(times["main(argv)"])


def big_workdir_cost(rounds: int, steps: int = 10, files: int = 10_000) -> tuple[float, float]:
    """(j): medians of a run of shell steps in a workdir of files files, saved and not."""
    script = shell_steps(steps)
    with tempfile.TemporaryDirectory() as big:
        for number in range(files):
            folder = Path(big, f"package{number % 100:02}")
            folder.mkdir(exist_ok=True)
            (folder / f"module{number}.py").write_text(f"value = {number}\n" + "# x\n" * 250)
        times: dict[bool, list[float]] = {True: [], False: []}
        for number in range(rounds):
            for saved in (True, False)[:: -1 if number % 2 else 1]:
                with StubServer(list(script), api_key=KEY) as server:
                    command = [*command_for(steps, big), "--yes", "--no-stream"]
                    times[saved].append(timed(command + ([] if saved else ["--no-save"]),
                                              env_for(server)))  # fmt: skip
                assert not server.problems and len(server.requests) == steps, server.problems
    return statistics.median(times[True]), statistics.median(times[False])


def shell_steps(steps: int) -> list[dict]:
    """steps - 1 steps that each append a line to a file with a shell command, and an answer."""
    return [
        *(tool_step(n, "run_shell", {"command": f"echo {n}>> log.txt"}) for n in range(1, steps)),
        {"role": "assistant", "content": "done", "reasoning_content": ""},
    ]


class SlowServer(StubServer):
    """The stub, taking seconds to answer each chat request, as a model thinking."""

    def __init__(self, script: list, seconds: float, **options) -> None:
        super().__init__(script, **options)
        self.seconds = seconds

    def answer(self, path: str, headers, body: bytes):
        if path.endswith("/chat/completions"):
            time.sleep(self.seconds)
        return super().answer(path, headers, body)


def run_with_memory(command: list[str], env: dict) -> tuple[float, float]:
    """(seconds, peak resident MB) of one run of command."""
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, child.returncode
    return time.perf_counter() - started, usage.ru_maxrss / 1024  # Linux: KB


def large_project_recording(rounds: int, files: int = 100_000, folders: int = 1_000) -> dict:
    """(l): medians, saved and with --no-save, runs alternating, in one workdir of files
    files: runs of 1 and 10 shell steps (and an answer) with an instant model, and a run of 10
    requests with a model taking 2 s an answer (once each: 20 s a run); peak memories."""
    results: dict[str, list[float]] = {}

    def run(name: str, saved: bool, steps: int, work: str, seconds: float = 0) -> None:
        server = SlowServer(shell_steps(steps), seconds, api_key=KEY)
        with server:
            command = [*command_for(steps, work), "--yes", "--no-stream"]
            wall, memory = run_with_memory(command + ([] if saved else ["--no-save"]),
                                           env_for(server))  # fmt: skip
        assert not server.problems and len(server.requests) == steps, server.problems
        side = "saved" if saved else "unsaved"
        results.setdefault(f"{name}_{side}", []).append(wall)
        results.setdefault(f"memory_{side}", []).append(memory)

    with tempfile.TemporaryDirectory() as work:
        for number in range(files):
            folder = Path(work, f"folder{number % folders:04}")
            folder.mkdir(exist_ok=True)
            (folder / f"f{number}.txt").write_text(f"{number}\n")
        for number in range(rounds):
            for saved in (True, False)[:: -1 if number % 2 else 1]:
                run("one", saved, 2, work)
                run("ten", saved, 11, work)
        for saved in (True, False):
            run("slow", saved, 10, work, seconds=2)
    return {name: statistics.median(values) for name, values in results.items()}


def live_output(rounds: int, steps: int = 40) -> dict:
    """(k)'s session on a pseudo-terminal and piped, runs alternating (who goes first too):
    the medians of the wall time and of the CPU the agent and its commands took, and how many
    times the live output was drawn on the terminal. Each command prints its lines over about a
    quarter of a second, so the live display has something to draw."""
    lines = (
        "python3 -c \"import time; [print('line', i, flush=True) or i % 1000 or time.sleep(0.025)"
        ' for i in range(10_000)]"'
    )
    script = [tool_step(n, "run_shell", {"command": lines}) for n in range(1, steps)]
    script.append({"role": "assistant", "content": "done", "reasoning_content": ""})
    wall, cpu, drawn = {"terminal": [], "piped": []}, {"terminal": [], "piped": []}, 0
    with tempfile.TemporaryDirectory() as work:
        args = [AGENT, "--workdir", work, "--yes", "--no-stream", "--no-save",
                "--max-steps", str(steps), "print lines"]  # fmt: skip
        for number in range(rounds):
            for side in list(wall)[:: -1 if number % 2 else 1]:
                with StubServer(script, api_key=KEY) as server:
                    started, used = time.perf_counter(), children_cpu()
                    if side == "terminal":
                        child = pexpect.spawn(sys.executable, args, env=env_for(server),
                                              encoding="utf-8", timeout=300)  # fmt: skip
                        child.expect(pexpect.EOF)
                        child.close()  # waits for it, so its CPU is counted
                        assert child.exitstatus == 0, child.before
                        drawn = max(drawn, child.before.count("      running "))
                    else:
                        timed([sys.executable, *args], env_for(server))
                    wall[side].append(time.perf_counter() - started)
                    cpu[side].append(children_cpu() - used)
                assert len(server.requests) == steps and not server.problems, server.problems
    medians = {f"{kind}_{side}": statistics.median(values[side])
               for kind, values in (("wall", wall), ("cpu", cpu)) for side in values}  # fmt: skip
    return {**medians, "drawn": drawn}


def write_review(rounds: int) -> dict[str, float]:
    """(m): the median seconds of diffs.change for each shape of a 100,000-line write."""
    sys.path.insert(0, str(ROOT))
    from minimal_agent.tools import diffs

    old = "x\n" * 100_000
    shapes = {
        "one line": "x\n" * 50_000 + "changed\n" + "x\n" * 49_999,
        "shifted": "first\n" + "x\n" * 99_999,
        "a costly middle": "x\n" * 49_780 + "y\nx\n" * 220 + "x\n" * 49_780,
        **{
            f"every {n}": "".join("y\n" if i % n == 0 else "x\n" for i in range(100_000))
            for n in (2, 3, 97)
        },
    }
    medians = {}
    for name, new in shapes.items():
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            diffs.change(old.encode(), new.encode(), "big.txt")
            times.append(time.perf_counter() - started)
        medians[name] = statistics.median(times)
    return medians


def edit_cost(rounds: int) -> dict[int, dict]:
    """(n): for each file size in lines, the characters of the edit_file and write_file calls'
    arguments for a one-line change, and the median seconds of applying the edit and of
    recording its step for --undo."""
    import contextlib
    import io

    sys.path.insert(0, str(ROOT))
    import agent
    from minimal_agent.stores import changes
    from minimal_agent.tools import daily_tools

    figures = {}
    for lines in (100, 2_000, 20_000):
        text = "".join(
            f"    value_{n} = compute({n}, 'the words of line {n}')\n" for n in range(lines)
        )
        old = f"    value_{lines // 2} = compute({lines // 2}, 'the words"
        new = old.replace("the words", "other words")
        edit = json.dumps({"path": "f.py", "old_string": old, "new_string": new})
        write = json.dumps({"path": "f.py", "content": text.replace(old, new)})
        applying, recording = [], []
        for _ in range(rounds):
            with (
                tempfile.TemporaryDirectory() as work,
                tempfile.TemporaryDirectory() as store,
                contextlib.redirect_stderr(io.StringIO()),  # the change line of each round
            ):
                Path(work, "f.py").write_text(text)
                ws = agent.Workspace(work, added_tools=daily_tools.tools(agent.TOOL_MAP))
                recorder = changes.Recorder(ws.folder, Path(store) / "s.changes")
                recorder.turn_begins("edit")
                recorder.step_begins(["edit_file"])
                call = {"function": {"name": "edit_file", "arguments": edit}}
                started = time.perf_counter()
                result = agent.execute_tool_call(call, ws)
                applying.append(time.perf_counter() - started)
                assert result.startswith("Edited f.py"), result
                started = time.perf_counter()
                recorder.step_ends()
                recording.append(time.perf_counter() - started)
                recorder.close()
        figures[lines] = {
            "edit": len(edit),
            "write": len(write),
            "apply": statistics.median(applying),
            "record": statistics.median(recording),
        }
    return figures


def forked_agent_cost(rounds: int) -> tuple[float, float]:
    """Median CPU seconds of a one-reply run forked from the suite's fork server, and of the
    same run as a new process (Linux: the server's children are counted in /proc)."""
    import forked_agents

    def server_children_cpu() -> float:
        fields = Path(f"/proc/{forked_agents.SERVER.server.process.pid}/stat").read_text()
        cutime, cstime = fields.rsplit(")", 1)[1].split()[13:15]
        return (int(cutime) + int(cstime)) / os.sysconf("SC_CLK_TCK")

    forked, new = [], []
    with (
        StubServer([reply("hi")] * (2 * rounds + 1), api_key=KEY) as server,
        tempfile.TemporaryDirectory() as work,
    ):
        env = env_for(server)
        forked_agents.SERVER.env = env
        command = [sys.executable, AGENT, "--workdir", work, "--no-save", "say hi"]
        forked_agents.run(command, input="", env=env, timeout=60, cwd=work)  # the server starts
        try:
            for _ in range(rounds):
                before = server_children_cpu()
                done = forked_agents.run(command, input="", env=env, timeout=60, cwd=work)
                forked.append(server_children_cpu() - before)
                before = children_cpu()
                fresh = subprocess.run(command, input="", capture_output=True, text=True, env=env,
                                       timeout=60, cwd=work)  # fmt: skip
                new.append(children_cpu() - before)
                alike = (done.returncode, done.stdout) == (fresh.returncode, fresh.stdout)
                assert alike and done.returncode == 0, (done, fresh)
        finally:
            forked_agents.SERVER.stop()
    return statistics.median(forked), statistics.median(new)


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's children that have ended so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs per side (default 7)")
    parser.add_argument(
        "--figures", default=FIGURES, help=f"the figures to measure (default {FIGURES})"
    )
    options = parser.parse_args()
    rounds, figures = options.rounds, options.figures
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    ok = True

    if "a" in figures:
        agent, floor = startup(rounds * 9)  # 40 ms a run: many runs, for a steady median
        ratio = agent / floor
        ok &= ratio < 2
        print(f"(a) --help {agent * 1000:.1f} ms vs import argparse {floor * 1000:.1f} ms: "
              f"{ratio:.2f}x (target < 2x)")  # fmt: skip

    if "b" in figures:
        agent, bare = session(rounds)
        ratio = agent / bare
        ok &= ratio < 1.05
        print(f"(b) 40-step session {agent * 1000:.0f} ms vs bare SDK loop {bare * 1000:.0f} "
              f"ms: {ratio:.3f}x (target < 1.05x)")  # fmt: skip

    for save in (False, True) if "c" in figures else ():
        sizes, seconds = request_sizes(save)
        worst = max(size / (step * 21_000) for step, size in enumerate(sizes, 1))
        ok &= worst < 1
        label = "with --save   " if save else "without --save"
        print(f"(c) {label}: {len(sizes)} requests, largest {max(sizes) / 1000:.0f} KB, worst "
              f"size / (step x 21 KB) {worst:.2f} (target < 1), run {seconds:.2f} s")  # fmt: skip
    if "d" in figures:
        latencies = first_thinking_latency()
        median = statistics.median(latencies)
        ok &= median < 0.050
        print(f"(d) first thinking on the terminal {median * 1000:.1f} ms median, "
              f"{max(latencies) * 1000:.1f} ms at most, over {len(latencies)} steps "
              "(target < 50 ms)")  # fmt: skip

    if "e" in figures:
        agent, bare = session(rounds, stream=True)
        ratio = agent / bare
        ok &= ratio < 1.05
        print(f"(e) 40-step streamed session {agent * 1000:.0f} ms vs bare SDK streaming loop "
              f"{bare * 1000:.0f} ms: {ratio:.3f}x (target < 1.05x)")  # fmt: skip

    if "f" in figures:
        requests, shared, share = chat_prefixes()
        ok &= shared == requests - 1
        print(f"(f) 10-turn --chat session: {requests} requests, {shared} of {requests - 1} "
              f"after the first begin with the whole previous one "
              f"({shared / (requests - 1):.0%}, target 100%); {share:.0%} of the bytes sent "
              "were that prefix")  # fmt: skip

    if "g" in figures:
        (wall, cpu), (unpriced_wall, unpriced_cpu), per_reply = cost_bookkeeping(rounds * 2)
        ratio = cpu / unpriced_cpu
        ok &= ratio < 1.03
        print(f"(g) 40-step session priced vs unpriced: wall {wall * 1000:.0f} vs "
              f"{unpriced_wall * 1000:.0f} ms ({wall / unpriced_wall:.3f}x), CPU "
              f"{cpu * 1000:.0f} vs {unpriced_cpu * 1000:.0f} ms ({ratio:.3f}x, target < 1.03x);"
              f" pricing a reply takes {per_reply * 1e6:.1f} us, 40 of them "
              f"{per_reply * 40 / cpu:.3%} of the session's CPU")  # fmt: skip

    if "h" in figures:
        ok &= compacted_chat_prefixes()

    if "i" in figures:
        program, with_collection = exit_after_answer(rounds * 3)
        ok &= program < 0.100
        print(f"(i) exit after the answer {program * 1000:.0f} ms vs {with_collection * 1000:.0f} "
              "ms with Python's last collection (target < 100 ms)")  # fmt: skip
    if "j" in figures:
        saved, unsaved = big_workdir_cost(rounds)
        ok &= saved - unsaved <= 0.5
        print(f"(j) 10 shell steps in a workdir of 10,000 files, saved {saved:.2f} s vs --no-save "
              f"{unsaved:.2f} s: {saved - unsaved:+.2f} s (target <= +0.5 s)")  # fmt: skip

    if "k" in figures:
        k = live_output(rounds)
        ratio = k["cpu_terminal"] / k["cpu_piped"]
        ok &= ratio < 1.05 and k["drawn"] > 0
        print(f"(k) 40-step session of 10,000-line commands, the output drawn live on a terminal "
              f"({k['drawn']} redraws) vs piped: CPU {k['cpu_terminal']:.2f} vs "
              f"{k['cpu_piped']:.2f} s ({ratio:.3f}x, target < 1.05x), wall "
              f"{k['wall_terminal']:.2f} vs {k['wall_piped']:.2f} s")  # fmt: skip
    if "l" in figures:
        m = large_project_recording(max(1, rounds // 2))
        first = m["one_saved"] - m["one_unsaved"]
        further = (m["ten_saved"] - m["ten_unsaved"] - first) / 9
        memory = m["memory_saved"] - m["memory_unsaved"]
        slow = m["slow_saved"] / m["slow_unsaved"]
        ok &= first <= 2 and further <= 0.3 and memory <= 100 and slow <= 1.05
        print(f"(l) 100,000 files in 1,000 folders, saved vs --no-save: 1 shell step "
              f"{m['one_saved']:.2f} vs {m['one_unsaved']:.2f} s (first step {first:+.2f} s, "
              f"target <= +2 s); 10 shell steps {m['ten_saved']:.2f} vs {m['ten_unsaved']:.2f} s "
              f"(each further step {further:+.2f} s, target <= +0.3 s); peak memory "
              f"{m['memory_saved']:.0f} vs {m['memory_unsaved']:.0f} MB ({memory:+.0f} MB, "
              f"target <= +100 MB); with a 2 s model, 10 requests {m['slow_saved']:.1f} vs "
              f"{m['slow_unsaved']:.1f} s ({slow:.3f}x, target <= 1.05x)")  # fmt: skip
    if "m" in figures:
        medians = write_review(rounds)
        slowest = max(medians, key=medians.get)
        ok &= medians[slowest] < 1
        shown = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in medians.items())
        print(f"(m) reviewing a 100,000-line write: {shown}; slowest {slowest} "
              f"{medians[slowest] * 1000:.0f} ms (target < 1 s)")  # fmt: skip
    if "n" in figures:
        n = edit_cost(rounds)
        ok &= n[20_000]["apply"] <= 0.050
        shown = "; ".join(
            f"{lines:,} lines: {f['edit']:,} vs {f['write']:,} characters sent, applied in "
            f"{f['apply'] * 1000:.1f} ms (undo's walk {f['record'] * 1000:.1f} ms)"
            for lines, f in n.items()
        )
        print(f"(n) a one-line change, edit_file vs write_file: {shown} (target: applied in "
              "<= 50 ms for 20,000 lines)")  # fmt: skip
    if "o" in figures:
        forked, new = forked_agent_cost(rounds * 3)
        ok &= forked / new < 0.4
        print(f"(o) the suite's agents: a one-reply run forked from tests/forkserver.py "
              f"{forked * 1000:.0f} ms of CPU vs a new process {new * 1000:.0f} ms: "
              f"{forked / new:.2f}x (target < 0.4x)")  # fmt: skip
    print("all within target" if ok else "NOT within target")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
