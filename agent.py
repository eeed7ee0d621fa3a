"""The minimal agent loop: the model proposes tool calls, Python runs them, the results go back.

Read it top to bottom: settings, the three tools, TOOLS and TOOL_MAP, executing one call,
run() (the loop), main() (the command line).  `python agent.py --help` lists the options.
"""

from __future__ import annotations  # annotations stay text, so Python 3.8 gets to the check

import argparse
import codecs
import contextlib
import json
import os
import signal
import sys
import time

if sys.version_info < (3, 11):  # noqa: UP036 (first, so an old Python gets one sentence)
    sys.exit(
        "error: agent.py needs Python 3.11 or newer, and this is Python "
        f"{'.'.join(map(str, sys.version_info[:3]))}: install a newer Python and make the "
        "virtual environment with it (see the README's quick start)"
    )

import model_client  # noqa: E402 (after the version check on purpose)

# --- Settings ---------------------------------------------------------------------------

MAX_STEPS = 20  # model requests per run; the loop stops there even if the model goes on
SHELL_TIMEOUT = 60.0  # seconds a run_shell command may take before its process group is killed
MAX_RESULT_CHARS = 20_000  # no tool result the model gets is longer than this
KEEP_CHARS = (MAX_RESULT_CHARS - 100) // 2  # kept at each end of a longer one (marker room)
HERE = os.path.dirname(os.path.realpath(__file__))
WORKDIR = os.path.join(HERE, "playground")  # where the tools act by default

SYSTEM_PROMPT = (
    "You are a small coding agent working in one folder, the workdir. Paths given to "
    "read_file and write_file are relative to it, and run_shell runs commands in it. "
    "Use the tools to do the task and check what they return instead of guessing. "
    "When the task is done, reply with a short answer and call no tool."
)
ON_WINDOWS = sys.platform == "win32"  # cmd.exe and taskkill there, /bin/sh and killpg elsewhere
PYTHON = "python" if ON_WINDOWS else "python3"  # what the interpreter is called on the PATH
DEMO_TASK = (
    "Create a file tool_demo.py containing print(17 * 23), read it back, run it with "
    f"{PYTHON}, and tell me the real output."
)

# What the tools act on; run() sets these from its arguments before the first step.
workdir = WORKDIR
shell_timeout = SHELL_TIMEOUT
approve_all = False
sandboxed = False  # --sandbox: run_shell's commands run under bubblewrap


# --- The three tools: plain functions; an exception becomes an "Error: ..." for the model ----


def read_file(path: str) -> str:
    """Return a text file's contents (UTF-8; undecodable bytes become U+FFFD)."""
    file = inside_workdir(path)
    if os.path.isdir(file):
        raise IsADirectoryError(f"{path} is a folder, not a file")
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{path} does not exist or is not a regular file")
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        if size <= MAX_RESULT_CHARS:  # a byte never decodes to more than one character
            return f.read().decode("utf-8", "replace")
        # Read only the two ends that will be returned, however large the file is.
        head = f.read(KEEP_CHARS).decode("utf-8", "replace")
        f.seek(-KEEP_CHARS, os.SEEK_END)
        tail = f.read().decode("utf-8", "replace")
    return f"{head}\n[... {size - 2 * KEEP_CHARS} bytes left out ...]\n{tail}"


def write_file(path: str, content: str) -> str:
    """Write content to a file, creating folders; atomic, so a crash never leaves half a file."""
    file = inside_workdir(path)
    if os.path.isdir(file):
        raise IsADirectoryError(f"{path} is a folder")
    folder, name = os.path.split(file)
    os.makedirs(folder, exist_ok=True)
    data = content.encode("utf-8", "replace")
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    existing = os.path.exists(file)
    mode = os.stat(file).st_mode & 0o7777 if existing else 0o666  # os.open applies the umask
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if existing:
            os.chmod(temporary, mode)  # exactly the old file's mode, umask or not
        os.replace(temporary, file)
    except BaseException:
        os.unlink(temporary)
        raise
    return f"Wrote {len(content)} characters ({len(data)} bytes) to {path}"


def run_shell(command: str) -> str:
    """Run a shell command in the workdir once the user approves it; return exit code and output."""
    import threading  # imported here, not at the top, to keep --help's start-up fast

    if not approved(command):
        raise PermissionError("the user did not approve this command, so it was not run")
    captured: dict[str, str] = {}
    # A Ctrl-C or SIGTERM acting between the start and the kill being in place would leave the
    # command running after the agent exits: signals wait, except while the command is awaited.
    with signals_held() as let_through:
        proc = start_command(command)
        try:
            reader = threading.Thread(
                target=keep_head_and_tail, args=(proc.stdout, captured), daemon=True
            )
            reader.start()
            with let_through():  # the pipe closes when the command and all it started end
                reader.join(shell_timeout)
            timed_out = reader.is_alive()
        finally:
            kill_process_group(proc.pid)  # on time-out, on Ctrl-C, and whatever it left running
            reader.join(5)
            proc.wait()
            proc.stdout.close()
    output = captured.get("text", "(output unavailable)")
    if timed_out:
        return (
            f"Error: timed out after {shell_timeout:g} s; the command and everything it "
            f"started were killed. Output so far:\n{output}"
        )
    return f"exit code {proc.returncode}\n{output}"


# --- What the tools need: the workdir fence, approval, process groups, capped output ---------


def inside_workdir(path: str) -> str:
    """The real location of path, resolved against the workdir; refused if it lies outside."""
    target = os.path.realpath(os.path.join(workdir, path))  # follows symlinks and ".."
    if os.path.commonpath([workdir, target]) != workdir:
        raise PermissionError(f"{path} is outside the workdir; only paths inside it are allowed")
    return target


def approved(command: str) -> bool:
    """Ask the user on the terminal: y runs it, a runs this and every later command, else no."""
    global approve_all
    if approve_all:
        return True
    if not sys.stdin.isatty():
        say("  not run: stdin is not a terminal, so nobody can approve it (start with --yes)")
        raise PermissionError(
            "the command was not run: it needs the user's approval and nobody can give it "
            "here (the user can restart the agent with --yes)"
        )
    say(f"  $ {visible(command)}")  # escapes shown, so no command can disguise itself
    sys.stderr.write("  Run it in the sandbox? [y/N/a] " if sandboxed else "  Run it? [y/N/a] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()  # "" at end of input: no
    approve_all = answer in ("a", "always")
    return approve_all or answer in ("y", "yes")


def start_command(command: str):  # -> subprocess.Popen
    """Start command in the workdir in a process group of its own, so that one kill reaches all
    it starts; stdin closed, stdout and stderr into one pipe. With --sandbox, under bwrap."""
    import subprocess

    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    if ON_WINDOWS:  # cmd.exe; a console's Ctrl-C then reaches only the agent, which kills the tree
        flags = subprocess.CREATE_NEW_PROCESS_GROUP
        return subprocess.Popen(command, shell=True, cwd=workdir, creationflags=flags, **streams)
    if sandboxed:
        argv = bwrap_command(workdir, "/bin/sh", "-c", command)
        return subprocess.Popen(argv, cwd=workdir, start_new_session=True, **streams)
    return subprocess.Popen(command, shell=True, cwd=workdir, start_new_session=True, **streams)


def bwrap_command(folder: str, *command: str) -> list[str]:
    """command under bubblewrap: everything read-only but folder (at its real path, so paths
    look the same), a private empty /tmp, its own /dev and /proc, no network (its own network
    namespace: not even the host's 127.0.0.1), its own PID namespace, killed if the agent dies."""
    return [
        "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--bind", folder, folder,  # after --tmpfs /tmp, so a folder inside /tmp stays visible
        "--chdir", folder, "--unshare-net", "--unshare-pid", "--die-with-parent", "--", *command,
    ]  # fmt: skip


def kill_process_group(pid: int) -> None:
    """Kill the command and everything it started: its process group (start_new_session made
    the group id the pid), on Windows its process tree."""
    if ON_WINDOWS:
        import subprocess

        kill = ["taskkill", "/F", "/T", "/PID", str(pid)]
        subprocess.run(kill, stdin=subprocess.DEVNULL, capture_output=True)  # gone already: fine
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # under bwrap, --die-with-parent takes its sandbox along


@contextlib.contextmanager
def signals_held():
    """Ctrl-C, SIGTERM and SIGHUP arriving in the block act only when it ends, or inside the
    `with let_through():` it yields. Only the main thread can set handlers; an ignored or
    default signal is left as it is."""
    import threading

    arrived: list[int] = []
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {n: signal.getsignal(n) for n in (signal.SIGINT, *termination_signals())}
        handlers = {n: handler for n, handler in handlers.items() if callable(handler)}

    def hold() -> None:
        for number in handlers:
            signal.signal(number, lambda signum, frame: arrived.append(signum))

    def release() -> None:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        while arrived:
            signal.raise_signal(arrived.pop(0))  # its handler runs here: KeyboardInterrupt, exit

    @contextlib.contextmanager
    def let_through():
        release()
        try:
            yield
        finally:
            hold()

    hold()
    try:
        yield let_through
    finally:
        release()


def termination_signals() -> list[int]:
    """SIGTERM, and SIGHUP where there is one (not on Windows)."""
    return [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]


def keep_head_and_tail(stream, captured: dict) -> None:
    """Read a stream to its end keeping only its two ends, so endless output cannot fill memory."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    half = KEEP_CHARS - 100  # room for run_shell's status line
    head, tail, total = "", "", 0
    while True:
        chunk = stream.read1(65536)
        text = decoder.decode(chunk, final=not chunk)
        total += len(text)
        if len(head) < half:
            room = half - len(head)
            head, text = head + text[:room], text[room:]
        tail = (tail + text)[-half:]
        if not chunk:
            break
    omitted = total - len(head) - len(tail)
    marker = f"\n[... {omitted} characters left out ...]\n" if omitted > 0 else ""
    captured["text"] = head + marker + tail


def cap(text: str) -> str:
    """Keep the head and the tail of a long text, and say how much was left out between them."""
    if len(text) <= MAX_RESULT_CHARS:
        return text
    head, tail, omitted = text[:KEEP_CHARS], text[-KEEP_CHARS:], len(text) - 2 * KEEP_CHARS
    return f"{head}\n[... {omitted} characters left out ...]\n{tail}"


# --- TOOLS (the schemas the model sees) and TOOL_MAP (name -> Python function) -----------


def function_tool(name: str, description: str, **parameters: str) -> dict:
    """A Chat Completions tool schema whose parameters are all required strings."""
    properties = {p: {"type": "string", "description": d} for p, d in parameters.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(parameters),
                "additionalProperties": False,
            },
        },
    }


TOOLS = [
    function_tool(
        "read_file",
        "Read a UTF-8 text file in the workdir.",
        path="File path, relative to the workdir.",
    ),
    function_tool(
        "write_file",
        "Create or overwrite a text file in the workdir (missing folders are created).",
        path="File path, relative to the workdir.",
        content="The complete new contents of the file.",
    ),
    function_tool(
        "run_shell",
        "Run a shell command in the workdir (the user approves it first) and return its "
        "exit code and combined stdout and stderr.",
        command="The command line, run by cmd.exe (Windows: dir, type, python; not ls, cat)."
        if ON_WINDOWS
        else "The command line, run by /bin/sh.",
    ),
]
TOOL_MAP = {"read_file": read_file, "write_file": write_file, "run_shell": run_shell}


# --- Executing one tool call: every failure comes back as text starting with "Error:" ------


def execute_tool_call(call: dict) -> str:
    """Run one tool call from an assistant message and return the tool message's content."""
    name, arguments = call["function"]["name"], call["function"]["arguments"]
    if name not in TOOL_MAP:
        result = f"Error: there is no tool {name!r}; the tools are {', '.join(TOOL_MAP)}"
    else:
        try:
            args = json.loads(arguments or "{}")
            problem = argument_problem(name, args)
            result = f"Error: {problem}" if problem else TOOL_MAP[name](**args)
        except json.JSONDecodeError as error:
            result = f"Error: the arguments are not valid JSON ({error}); send one JSON object"
        except Exception as error:  # a failing tool is news for the model, not a crash
            result = f"Error: {type(error).__name__}: {error}"
    # Lone surrogates (from JSON escapes like "\ud800") cannot be encoded; replace them.
    return cap(result.encode("utf-8", "replace").decode("utf-8"))


def argument_problem(name: str, args: object) -> str | None:
    """What is wrong with a call's parsed arguments, checked against the tool's schema."""
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)
    expected = f"{name} takes a JSON object with the string fields {', '.join(schema['required'])}"
    if not isinstance(args, dict):
        return f"{expected}, not {type(args).__name__}"
    problems = [f"missing {p!r}" for p in schema["required"] if p not in args]
    problems += [f"unexpected {p!r}" for p in args if p not in schema["properties"]]
    problems += [
        f"{p!r} is {type(v).__name__}, not a string"
        for p, v in args.items()
        if p in schema["properties"] and not isinstance(v, str)
    ]
    return f"{expected}: {'; '.join(problems)}" if problems else None


# --- The loop --------------------------------------------------------------------------


def run(
    task: str,
    client=None,
    *,
    model: str | None = None,
    max_steps: int = MAX_STEPS,
    workdir: str | os.PathLike = WORKDIR,
    timeout: float = SHELL_TIMEOUT,
    yes: bool = False,
    save: str | os.PathLike | None = None,
    raw: bool = False,
    max_tokens: int | None = None,
    stream: bool = False,
    history: list[dict] | None = None,
    sandbox: bool = False,
) -> dict:
    """Work on task until the model replies without tool calls, or max_steps requests are made.

    history is a conversation to go on with (--chat, --continue): the task and every new message
    are appended to it, and to save; None or [] starts a new one, and a new save file.
    Returns text (the final answer, or None), stop_reason ("finished"; "incomplete": the answer
    was cut off or empty; "max_steps"), steps, tool_calls, messages (exactly what the model was
    sent, plus its last reply) and usage.
    """
    config = model_client.load_config()
    client = client or model_client.create_client(config)
    model = model or config["model"]
    request = {"model": model, "tools": TOOLS}
    if max_tokens:  # unset, the server's own limit applies
        request["max_tokens"] = max_tokens
    server_quirks: set[str] = set()  # what this server turned out to need (model_client.ask)
    set_up_tools(workdir, timeout, yes, sandbox)
    messages = start_conversation(history, task, save)  # appended to, never rewritten
    totals = {"steps": 0, "tool_calls": 0}
    usage = {"prompt_tokens": 0, "cache_hit_tokens": 0, "completion_tokens": 0}

    for step in range(1, max_steps + 1):
        with waiting_for_model(step, stream) as show:  # show: None, or the streaming display
            resp = model_client.ask(
                client, messages, request, quirks=server_quirks, warn=say, show=show
            )
        note_reply(resp, usage, raw)
        msg = resp.choices[0].message
        finish_reason = resp.choices[0].finish_reason  # "length": cut off, its calls won't run
        totals["steps"] = step
        assistant, not_run = assistant_message(msg, finish_reason, len(messages))
        append(messages, assistant, save)  # append only: earlier messages never change
        if "tool_calls" not in assistant:
            text, complete = final_answer(msg, finish_reason)
            show_answer(text, streamed=stream)
            return finish("finished" if complete else "incomplete", text, messages, totals, usage)
        for call in assistant["tool_calls"]:  # one tool message per call, in order
            show_call(step, call)
            result = not_run.get(call["id"]) or execute_tool_call(call)
            say(f"      -> {one_line(result)}")
            append(messages, {"role": "tool", "tool_call_id": call["id"], "content": result}, save)
            totals["tool_calls"] += 1

    say(f"stopped: the step limit ({max_steps} requests) was reached; raise it with --max-steps")
    return finish("max_steps", None, messages, totals, usage)


# --- What the loop calls -----------------------------------------------------------------


def start_conversation(history: list[dict] | None, task: str, save) -> list[dict]:
    """The history to go on with (a new one: the system prompt and a new transcript), with
    the task appended as a user message."""
    messages: list[dict] = [] if history is None else history
    if not messages:
        if save:
            open(save, "w").close()  # a new transcript for each new conversation
        append(messages, {"role": "system", "content": SYSTEM_PROMPT}, save)
    answer_open_calls(messages, save)  # calls a cut-short turn (Ctrl-C, a crash) left open
    append(messages, {"role": "user", "content": task}, save)
    return messages


def set_up_tools(
    folder: str | os.PathLike, timeout: float, yes: bool, sandbox: bool = False
) -> None:
    global workdir, shell_timeout, approve_all, sandboxed
    workdir = os.path.realpath(folder)
    os.makedirs(workdir, exist_ok=True)
    shell_timeout, approve_all, sandboxed = timeout, yes, sandbox


def append(messages: list[dict], message: dict, save: str | os.PathLike | None) -> None:
    """Add a message to the history and, with --save, to the transcript at once."""
    messages.append(message)
    if save:
        with open(save, "a", encoding="utf-8") as transcript:
            transcript.write(json.dumps(message) + "\n")


def answer_open_calls(
    messages: list[dict],
    save: str | os.PathLike | None,
    why: str = "interrupted: the agent stopped before this call had a result",
) -> None:
    """Answer each tool call a cut-short turn left without a tool message with an error, so the
    conversation can go on (a server wants every call answered before the next message)."""
    open_calls: list[dict] = []
    for message in messages:  # each tool message answers the first call still open
        is_answer = message["role"] == "tool"
        open_calls = open_calls[1:] if is_answer else message.get("tool_calls") or []
    for call in open_calls:
        content = f"Error: {why} (it may have run in part, or not at all)"
        append(messages, {"role": "tool", "tool_call_id": call["id"], "content": content}, save)


def assistant_message(msg, finish_reason: str | None, position: int) -> tuple[dict, dict]:
    """The assistant message to send back, built field by field (see the README for why),
    and the calls that must not run: {call id: the tool message that says why}."""
    message: dict = {"role": "assistant", "content": msg.content or None}
    not_run: dict[str, str] = {}
    if msg.tool_calls:
        message["tool_calls"] = []
        for index, call in enumerate(msg.tool_calls):
            # Some servers send no id, or one id twice; every call needs its own for its answer.
            # Nine letters and digits: llama.cpp's Mistral templates accept no other shape.
            taken = {c["id"] for c in message["tool_calls"]}
            call_id = call.id if call.id and call.id not in taken else f"c{position:05}{index:03}"
            # Servers parse the history's arguments: anything but a JSON object is rejected
            # there (llama.cpp: 500 for that request and every later one), so it gets "{}".
            arguments, problem = checked_arguments(call.function.name, call.function.arguments)
            if finish_reason in CUT_OFF:  # quoted, so the model sees where it was cut off
                sent = one_line(repr(call.function.arguments), 120)
                problem = (
                    f"Error: your reply was cut off (finish_reason {finish_reason}) before this "
                    f"call was complete; you sent {sent}, so nothing was run; send the call again"
                )
            if problem:
                not_run[call_id] = problem
            function = {"name": call.function.name, "arguments": arguments}
            message["tool_calls"].append({"id": call_id, "type": "function", "function": function})
    # DeepSeek's thinking mode rejects a history whose tool-calling turns lost this, even "".
    # vLLM, Ollama and OpenRouter call it "reasoning": it goes back under the name it came with.
    for field in REASONING_FIELDS:
        if field in (msg.model_extra or {}):
            message[field] = msg.model_extra[field]
    return message, not_run


CUT_OFF = ("length", "content_filter", "insufficient_system_resource")  # finish reasons
REASONING_FIELDS = ("reasoning_content", "reasoning")


def checked_arguments(name: str, received: object) -> tuple[str, str | None]:
    """The arguments as valid JSON object text for the history, and why the call cannot run."""
    if isinstance(received, dict):  # some servers send an object instead of a string
        return json.dumps(received), None
    if not received:  # an empty string means {}
        return "{}", None
    try:
        parsed = json.loads(received)
    except (json.JSONDecodeError, TypeError) as error:
        problem = f"the arguments are not valid JSON ({error})"
    else:
        if isinstance(parsed, dict):
            return received, None  # exactly as received
        problem = argument_problem(name, parsed) if name in TOOL_MAP else "not a JSON object"
    sent = one_line(repr(received), 120)
    return "{}", f"Error: {problem}; you sent {sent}, so nothing was run; send one JSON object"


def final_answer(msg, finish_reason: str | None) -> tuple[str, bool]:
    """The answer to print (without <think> blocks) and whether it is complete."""
    text = without_thinking(msg.content or "")
    if finish_reason in CUT_OFF:
        return text, False  # note_reply has warned already
    if not text.strip():
        say("warning: the model's final reply has no answer text (only its reasoning, or nothing)")
        return text, False
    return text, True


def without_thinking(text: str) -> str:
    """Content with <think>...</think> left out (some servers put the reasoning there; the
    opening tag may be missing). The history keeps the content exactly as received."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1].lstrip()
    if text.lstrip().startswith("<think>"):
        return ""  # the reasoning never ended: there is no answer yet
    return text


def note_reply(resp, usage: dict, raw: bool) -> None:
    """Print the raw response (--raw), check and warn of a cut-off reply, add up the tokens."""
    if raw:
        say(resp.model_dump_json(indent=2))
    if not resp.choices:  # some proxies answer 200 with an error body and no choices
        detail = one_line(json.dumps((resp.model_extra or {}).get("error", "")), 200)
        raise model_client.AgentError(f"the server's reply has no choices {detail}".rstrip())
    reason = resp.choices[0].finish_reason
    if reason in CUT_OFF:
        say(f"warning: the reply was cut off (finish_reason {reason}); it may be incomplete")
    if resp.usage:
        extra = resp.usage.model_extra or {}
        details = resp.usage.prompt_tokens_details
        cached = extra.get("prompt_cache_hit_tokens", details and details.cached_tokens)
        usage["prompt_tokens"] += resp.usage.prompt_tokens or 0
        usage["cache_hit_tokens"] += cached or 0
        usage["completion_tokens"] += resp.usage.completion_tokens or 0


def finish(reason: str, text: str | None, messages: list, totals: dict, usage: dict) -> dict:
    say(counts(totals, usage))
    return {"text": text, "stop_reason": reason, "messages": messages, "usage": usage, **totals}


def counts(totals: dict, usage: dict) -> str:
    return (
        f"steps {totals['steps']}, tool calls {totals['tool_calls']}, "
        f"prompt tokens {usage['prompt_tokens']}, cache-hit tokens {usage['cache_hit_tokens']}, "
        f"completion tokens {usage['completion_tokens']}"
    )


def say(text: str) -> None:
    """Everything but the final answer goes to stderr, so stdout stays clean for pipes."""
    clear = "\r\033[K" if sys.stderr.isatty() else ""  # wipe the "waiting" indicator
    print(clear + text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def waiting_for_model(step: int, stream: bool = False):
    """While the request runs: on a terminal, a line counting the seconds (never in a pipe or a
    log). With stream, yields the function that shows the reply's thinking and text as they
    arrive, on stderr (the counting line gives way to them); without, yields None."""
    stop_counting = count_seconds(step) if sys.stderr.isatty() else lambda: None
    shown = {"kind": None}  # what the last piece shown was: "thinking", "text" or None

    def show(kind: str, text: str) -> None:
        stop_counting()
        if kind != shown["kind"]:
            end_piece(shown["kind"])
            begin_piece(kind, step)
            shown["kind"] = kind
        sys.stderr.write(visible(text))
        sys.stderr.flush()

    try:
        yield show if stream else None
    finally:
        stop_counting()
        end_piece(shown["kind"])


def count_seconds(step: int):  # -> a function that stops the count and wipes its line
    """Write "[step] waiting for the model... N s" on stderr, updated every second."""
    import threading  # here, not at the top, to keep --help's start-up fast

    started, done, lock = time.monotonic(), threading.Event(), threading.Lock()

    def write(text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    def tick() -> None:
        while not done.wait(1):
            with lock:  # never a tick after the line is wiped
                if not done.is_set():
                    write(f"\r[{step}] waiting for the model... {time.monotonic() - started:.0f} s")

    def stop() -> None:
        with lock:
            if not done.is_set():
                done.set()
                write("\r\033[K")

    write(f"[{step}] waiting for the model...")
    threading.Thread(target=tick, daemon=True).start()
    return stop


def begin_piece(kind: str, step: int) -> None:
    """The label of streamed thinking (dimmed on a colour terminal) or text."""
    label = f"[{step}] thinking: " if kind == "thinking" else f"[{step}] "
    sys.stderr.write(("\033[2m" if kind == "thinking" and colour() else "") + label)


def end_piece(kind: str | None) -> None:
    if kind:
        sys.stderr.write(("\033[0m" if kind == "thinking" and colour() else "") + "\n")
        sys.stderr.flush()


def colour() -> bool:
    """Colour only on a terminal, and not when NO_COLOR is set (no-color.org)."""
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")


def show_answer(text: str, streamed: bool) -> None:
    """The final answer on stdout, exactly, for pipes and files (an empty one leaves stdout
    empty). On a terminal it is marked as the answer, and not printed a second time when it
    has just been streamed there."""
    on_terminal = sys.stdout.isatty() and sys.stderr.isatty()
    if text and on_terminal:
        say("^ the answer" if streamed else "answer:")
        if streamed:
            return
    print(text, end="\n" if text else "")


def show_call(step: int, call: dict) -> None:
    say(f"[{step}] {call['function']['name']}({short_arguments(call['function']['arguments'])})")


def short_arguments(arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return one_line(arguments, 80)
    if not isinstance(args, dict):
        return one_line(arguments, 80)
    return ", ".join(f"{key}={one_line(repr(value), 60)}" for key, value in args.items())


def one_line(text: str, width: int = 100) -> str:
    flat = " ".join(str(text).split())
    return visible(flat if len(flat) <= width else flat[: width - 3] + "...")


def visible(text: str) -> str:
    """Control characters as escapes (ESC as \\x1b): they would act on the terminal."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


# --- The command line --------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """python agent.py [options] [TASK ...]; returns the exit code (see the README)."""
    never_fail_on_output()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.save and args.continue_from:
        parser.error("--continue FILE already saves to FILE (it never starts it anew): drop --save")
    if args.show:
        return show_transcript(args.show)
    # Terminated (kill, a closed terminal): unwind like Ctrl-C, so run_shell kills its command.
    for number in termination_signals():
        if signal.getsignal(number) == signal.SIG_DFL:  # nohup's "ignore" stays
            signal.signal(number, lambda signum, frame: sys.exit(128 + signum))
    config: dict = {}  # for the error hints, whatever fails first
    try:
        config = model_client.load_config()
        history = conversation_to_continue(args.continue_from) if args.continue_from else None
        if args.replay:
            client = model_client.ReplayClient(args.replay, notify=say)
            source = f"replaying {args.replay} (no model is asked; tools run for real)"
        else:
            client = model_client.create_client(config, timeout=args.request_timeout)
            source = f"model {args.model or config['model']} at {config['base_url']}"
        check_paths(args)
        if args.sandbox:
            check_sandbox(args.workdir)
        sandboxed = "; shell commands run in a sandbox" if args.sandbox else ""
        say(f"{source}; workdir {args.workdir}{sandboxed}")
        task = " ".join(args.task) or (args.replay and client.task())
        task = task or task_from_stdin(parser, args)  # with --chat, chat() asks for it
        result = (chat if args.chat else run)(  # chat() runs run() turn after turn
            task,
            client,
            model=args.model or config["model"],
            max_steps=args.max_steps,
            workdir=args.workdir,
            timeout=args.timeout,
            yes=args.yes,
            save=args.save or args.continue_from,
            raw=args.raw,
            max_tokens=args.max_tokens or max_tokens_setting(config),
            stream=streaming(args),
            history=history,
            sandbox=args.sandbox,
        )
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except (model_client.AgentError, OSError) as error:
        say(f"error: {error}")
        return 1
    except ModuleNotFoundError as error:  # started with a Python that lacks the packages
        say(f"error: {missing_package(error)}")
        return 1
    except Exception as error:
        if type(error).__module__ == "bdb":  # pdb's q while stopped in the agent: no bug, quit
            raise
        save = args.save or args.continue_from
        context = {"model": args.model or config.get("model"), "save": save}
        message = describe_api_error(error, config, timeout=args.request_timeout, **context)
        if message is None:
            return report_bug(save)
        say(f"error: {message}")
        return 1
    return {"finished": 0, "max_steps": 3, "incomplete": 4}[result["stop_reason"]]


def never_fail_on_output() -> None:
    """Characters the console cannot encode (Chinese on cp1252) come out as "?", never as an
    error after the work is done; undecodable piped input becomes U+FFFD."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


def check_paths(args: argparse.Namespace) -> None:
    """Refuse a --workdir or --save that cannot work, naming the option, before any request."""
    workdir, save = args.workdir, args.save
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise model_client.AgentError(
            f"--workdir {workdir} is a file, not a folder: give a folder (a missing one is created)"
        )
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as error:
        raise model_client.AgentError(
            f"--workdir {workdir}: cannot create the folder ({error.strerror})"
        ) from None
    if not save:
        return
    if os.path.isdir(save):
        raise model_client.AgentError(
            f"--save {save} is a folder: give a file name, such as "
            f"{os.path.join(save, 'run.jsonl')}"
        )
    folder = os.path.dirname(os.path.abspath(save))
    if not os.path.isdir(folder):
        raise model_client.AgentError(
            f"--save {save}: the folder {folder} does not exist; create it or save elsewhere"
        )
    try:
        open(save, "a").close()  # run() starts it afresh; this only proves it can be written
    except OSError as error:
        message = f"--save {save}: cannot write it ({error.strerror})"
        raise model_client.AgentError(message) from None


def check_sandbox(folder: str) -> None:
    """--sandbox: refuse to start, in one line, where commands cannot run sandboxed; never run
    them unsandboxed instead."""
    import shutil
    import subprocess

    if sys.platform == "darwin":
        raise model_client.AgentError(
            "--sandbox is not available on macOS yet (it needs Linux and bubblewrap; macOS would "
            "use Seatbelt, sandbox-exec): run without it and approve each command"
        )
    if ON_WINDOWS:
        raise model_client.AgentError(
            "--sandbox is not available on Windows yet (it needs Linux and bubblewrap): run "
            "without it and approve each command, or run the agent in WSL with --sandbox"
        )
    if not shutil.which("bwrap"):
        raise model_client.AgentError(
            "--sandbox needs bubblewrap (the bwrap command), which is not installed: install it "
            "(apt install bubblewrap, dnf install bubblewrap, pacman -S bubblewrap)"
        )
    folder = os.path.realpath(folder)
    probe = subprocess.run(
        bwrap_command(folder, "true"), stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    if probe.returncode != 0:
        said = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        raise model_client.AgentError(
            f"--sandbox: bubblewrap cannot make its sandbox here ({said}): it needs unprivileged "
            "user namespaces, which some containers and systems turn off (on Ubuntu 23.10 and "
            "later: sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0; see the README)"
        )


def missing_package(error: ModuleNotFoundError) -> str:
    package = {"dotenv": "python-dotenv"}.get(str(error.name).split(".")[0], error.name)
    return (
        f"the package {package} is not installed for this Python ({sys.executable}): activate "
        "the project's virtual environment (. .venv/bin/activate, on Windows "
        ".venv\\Scripts\\activate) or install the project with pip install -e ."
    )


def report_bug(save: str | None) -> int:
    """Called inside an except block: an error no user can cause; keep its traceback."""
    import traceback

    traceback.print_exc()
    transcript = f"the transcript so far is in {save}" if save else "--save FILE keeps a transcript"
    say(
        "this is a bug in the agent, not something you did: please report it on the project's "
        f"issue tracker (see the README) with the traceback above; {transcript}"
    )
    return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent.py",
        description="A minimal LLM agent: the model calls read_file, write_file and run_shell "
        "in a workdir until the task is done. Without a TASK it reads one from piped stdin, "
        "or on a terminal runs the lesson's demo task.",
        epilog="Exit codes: 0 finished, 1 error, 2 bad usage, 3 step limit reached, "
        "4 the answer is cut off or empty, 130 interrupted. Settings: LLM_API_KEY, "
        "LLM_BASE_URL, LLM_MODEL in config.env beside agent.py or in the environment.",
    )
    parser.add_argument("task", nargs="*", metavar="TASK", help="the task, in words")
    parser.add_argument(
        "--workdir",
        default=WORKDIR,
        help="folder the tools act in (default: %(default)s)",
    )
    parser.add_argument(
        "--model", type=model_name, help="model name (default: LLM_MODEL, else deepseek-flash)"
    )
    parser.add_argument(
        "--max-steps",
        type=positive(int),
        default=MAX_STEPS,
        metavar="N",
        help="stop after N model requests (default: %(default)s)",
    )
    parser.add_argument(
        "--max-tokens",
        type=positive(int),
        metavar="N",
        help="ask the server to end each reply after N tokens (default: LLM_MAX_TOKENS, else "
        "the server's own limit)",
    )
    parser.add_argument(
        "--request-timeout",
        type=positive(float),
        default=model_client.REQUEST_TIMEOUT,
        metavar="SECONDS",
        help="give up an attempt when the server sends nothing for this long (default: "
        "%(default)g; the SDK makes up to three attempts)",
    )
    parser.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        help="show the model's thinking and text on stderr as they arrive (default: when stderr "
        "is a terminal; --replay never streams)",
    )
    parser.add_argument("--yes", action="store_true", help="run every shell command unasked")
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="run shell commands under bubblewrap (Linux): only the workdir writable, a private "
        "/tmp, no network; with --yes, the mode for unattended runs",
    )
    parser.add_argument(
        "--timeout",
        type=positive(float),
        default=SHELL_TIMEOUT,
        metavar="SECONDS",
        help="time limit for each shell command (default: %(default)g)",
    )
    parser.add_argument(
        "--save",
        metavar="FILE",
        help="write the conversation to FILE (JSON Lines), starting FILE anew",
    )
    parser.add_argument(
        "--continue",
        dest="continue_from",
        metavar="FILE",
        help="go on with the conversation saved in FILE: the task is added to it, and every new "
        "message is appended to FILE, never truncated (so not together with --save)",
    )
    parser.add_argument(
        "--chat",
        action="store_true",
        help="after each answer take a follow-up in the same conversation: typed at a '> ' "
        "prompt on a terminal, else the next line of stdin; an empty line or end of input "
        "ends the session",
    )
    parser.add_argument(
        "--replay",
        metavar="FILE",
        help="take the model's replies from a saved transcript (offline)",
    )
    parser.add_argument("--raw", action="store_true", help="print every raw response on stderr")
    parser.add_argument("--show", metavar="FILE", help="print a saved transcript as a timeline")
    return parser


def model_name(text: str) -> str:
    problem = model_client.odd_character(text, invisible_only=True)
    if problem:
        raise argparse.ArgumentTypeError(f"the name contains {problem}")
    return text


def positive(kind):
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
        return value

    return convert


def streaming(args: argparse.Namespace) -> bool:
    """--stream or --no-stream if given; else stream when stderr is a terminal. Not --replay."""
    if args.replay:
        return False  # a saved reply has nothing to stream
    return sys.stderr.isatty() if args.stream is None else args.stream


def max_tokens_setting(config: dict) -> int | None:
    """LLM_MAX_TOKENS as a number, or None when it is not set."""
    text = config["max_tokens"]
    if text and not (text.isdigit() and int(text) > 0):
        raise model_client.AgentError(
            f"LLM_MAX_TOKENS must be a whole number above 0, not {text!r}"
        )
    return int(text) if text else None


def task_from_stdin(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The task when none was given: piped stdin, or on a terminal (or IDE) the demo task.
    With --chat, none yet: chat() asks for the first message as for every other."""
    if args.chat:
        return ""
    if sys.stdin.isatty():
        if args.continue_from:
            parser.error("--continue needs the next message: give it as words, or add --chat")
        say(f"no task given; running the demo task: {DEMO_TASK}")
        return DEMO_TASK
    say(
        "no task given, so it is read from stdin (not a terminal): type or paste it, then end "
        "it with Ctrl-D (on Windows Ctrl-Z, then Enter)"
    )
    task = sys.stdin.read().strip()
    if not task:
        parser.error("no task: give it as words, or pipe it on stdin")
    return task


def chat(task: str, client=None, *, history: list[dict] | None = None, **options) -> dict:
    """--chat: turn after turn of run() in one conversation, until an empty message.

    Each turn has its own step budget and totals line. Ctrl-C during a turn cancels that turn
    only (run_shell has killed its command by then); Ctrl-C at the prompt ends the session.
    Returns run()'s result for the whole session: the last answer and stop_reason of the last
    turn that ran to its end, and the totals of those turns.
    """
    messages: list[dict] = [] if history is None else history
    session = {"text": None, "stop_reason": "finished", "messages": messages, "steps": 0,
               "tool_calls": 0, "turns": 0, "cancelled": 0}  # fmt: skip
    session["usage"] = {"prompt_tokens": 0, "cache_hit_tokens": 0, "completion_tokens": 0}
    if sys.stdin.isatty():
        say("chat: type a message after each '> '; an empty line or Ctrl-D ends the session")
    task = task or next_message()
    while task:
        try:
            result = run(task, client, history=messages, **options)
        except KeyboardInterrupt:
            answer_open_calls(messages, options.get("save"), "interrupted by the user (Ctrl-C)")
            say("interrupted: the turn was cancelled; type the next message, or Enter to end")
            session["cancelled"] += 1
        else:
            sys.stdout.flush()  # each answer as its turn ends, also into a pipe
            session.update(text=result["text"], stop_reason=result["stop_reason"])
            session.update({key: session[key] + result[key] for key in ("steps", "tool_calls")})
            session["usage"] = {k: n + result["usage"][k] for k, n in session["usage"].items()}
            session["turns"] += 1
        task = next_message()
    cancelled = f" (and {session['cancelled']} cancelled)" if session["cancelled"] else ""
    say(f"session: turns {session['turns']}{cancelled}, {counts(session, session['usage'])}")
    return session


def next_message() -> str:
    """The next --chat message: typed after a "> " prompt on a terminal, else the next line of
    stdin. An empty line or the end of input gives "", which ends the session."""
    if sys.stdin.isatty():
        sys.stderr.write("> ")
        sys.stderr.flush()
    return sys.stdin.readline().strip()


def conversation_to_continue(path: str) -> list[dict]:
    """--continue: the conversation saved in path, checked before anything is sent or added."""
    try:
        messages = model_client.read_transcript(path)
    except UnicodeDecodeError as error:
        raise model_client.AgentError(f"{path} is not UTF-8 text: {error}") from None
    model_client.check_conversation(messages, path)
    say(f"continuing the conversation in {path} ({len(messages)} messages)")
    return messages


def describe_api_error(
    error: Exception,
    config: dict,
    *,
    model: str | None = None,
    timeout: float | None = None,
    save: str | None = None,
) -> str | None:
    """One line that says what went wrong and what to check; None if it is no API error."""
    if type(error).__module__.split(".")[0] != "openai":
        return None  # and no need to import openai (it may be the missing package)
    import openai

    url = config.get("base_url", "the server")
    if isinstance(error, openai.APITimeoutError):  # a subclass of APIConnectionError
        silence = f"{timeout:g} s" if timeout else "the time-out"
        message = (
            f"the request to {url} timed out: the server sent nothing for {silence} in each of "
            "the SDK's attempts; check that it is running and not overloaded, or allow it longer "
            "with --request-timeout SECONDS"
        )
    elif isinstance(error, openai.APIConnectionError):
        message = f"could not connect to {url}: check LLM_BASE_URL and that the server is running"
    elif isinstance(error, openai.APIStatusError):
        said = server_says(error)
        hint = status_hint(error.status_code, said, url, model, save)
        message = f"the server answered {error.status_code} ({said}): {hint}"
    elif isinstance(error, openai.APIError):
        message = f"{type(error).__name__}: {error}"
    else:
        return None
    # Never print the key. A short one ("x", "ollama") is no secret and would mangle words.
    key = config.get("api_key") or ""
    return message.replace(key, "***") if len(key) >= 8 else message


def status_hint(status: int, said: str, url: str, model: str | None, save: str | None) -> str:
    """What to do about an error status, read from what the server said where it is telling."""
    import re

    said = said.lower()
    if re.search(r"context (length|size|window)|maximum context|context_length_exceeded", said):
        return (
            "the conversation is longer than the model accepts (its context is full): start "
            "again with a smaller task or fewer steps (--max-steps), a lower --max-tokens, or a "
            "model or server with a larger context"
        )
    if re.search(r"reasoning_content|tool_call|tool call|role 'tool'|tool message", said):
        transcript = f"the transcript is in {save}" if save else "--save FILE keeps a transcript"
        return (
            "the server rejects the conversation the agent built: this is a bug in the agent; "
            f"please report it on the project's issue tracker (see the README); {transcript}"
        )
    if re.search(r"model not exist|model_not_found|unknown model|model \S+ not found", said):
        return f"the server does not know the model {model or ''}: check --model or LLM_MODEL"
    if status == 404:
        return url_hint(url)
    if status >= 500 and status not in (502, 503, 504):
        return (
            "the server rejects this request: it failed the same way on each of the SDK's "
            "attempts, so trying again will not help; its log may say why"
        )
    hints = {
        400: "check the model name (LLM_MODEL or --model)",
        401: f"check LLM_API_KEY ({model_client.setting_origin('LLM_API_KEY')})",
        402: "the account's balance is used up: top it up with the provider",
        403: "the key is not allowed to do this: check LLM_API_KEY and LLM_MODEL",
        422: "the server rejected a parameter: check LLM_MODEL",
        429: "rate limited, even after the SDK's retries: wait a little and try again",
    }
    return hints.get(status, "the server failed, even after the SDK's retries: try again later")


def url_hint(url: str) -> str:
    """A 404: a local server's URL without /v1, or one that already ends in the endpoint."""
    from urllib.parse import urlsplit

    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/chat/completions"):
        base = url.rstrip("/").removesuffix("/chat/completions")
        base += "" if base.endswith("/v1") else "/v1"  # what local servers need, DeepSeek too
        return (
            "LLM_BASE_URL ends in /chat/completions, which the SDK adds itself, so the path was "
            f"doubled: set LLM_BASE_URL={base}"
        )
    if not path.endswith("/v1"):
        return (
            f"LLM_BASE_URL ({url}) does not end in /v1, which local servers need: try "
            f"LLM_BASE_URL={url.rstrip('/')}/v1"
        )
    return f"check LLM_BASE_URL ({url}) and LLM_MODEL"


def server_says(error) -> str:
    body = error.body
    if isinstance(body, dict):
        body = body.get("error", body)
        body = body.get("message", body) if isinstance(body, dict) else body
    return one_line(str(body if body is not None else error.message), 200)


def show_transcript(path: str) -> int:
    """--show: print a saved transcript as a readable timeline."""
    try:
        messages = model_client.read_transcript(path, tolerant=True)
    except (model_client.AgentError, OSError) as error:
        say(f"error: {error}")
        return 1
    if not messages:  # an empty file: say so rather than print nothing
        say(f"{path} holds no messages")
    for number, message in enumerate(messages, 1):
        if "cut_off" in message:  # the last line, half written when the agent was stopped
            text = one_line(message["cut_off"], 120)
            print(f"{number:3} (cut off: line {message['line']} was only partly written): {text}")
            continue
        role = message["role"]
        label = f"{number:3} {role}" + (f" [{message['tool_call_id']}]" if role == "tool" else "")
        for field in REASONING_FIELDS:
            if message.get(field):
                print(f"{label} (thinking): {one_line(message[field], 160)}")
        if message.get("content") or "tool_calls" not in message:
            print(f"{label}: {one_line(message.get('content') or '', 160)}")
        for call in message.get("tool_calls") or []:
            function = call["function"]
            print(
                f"{label} calls {function['name']}({short_arguments(function['arguments'])})"
                f" [{call['id']}]"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
