"""Lesson 1, the minimal agent loop: the model proposes tool calls, Python runs them, the
results are appended to `messages`, and the model is asked again, until a reply has no tool
calls or MAX_STEPS requests have been made.

Read it top to bottom: the settings, the three tools, TOOLS and TOOL_MAP, executing one call,
run() (the loop) and chat() (turn after turn). The lesson ends where a line says so. The
settings and the client come from model_client.py; what surrounds the loop lives in the package
minimal_agent/, each concern in the module named for it (the command line, the display,
processes and the sandbox, requests and replies, transcripts, cost, the context window).
`python agent.py --help` lists the options.
"""

from __future__ import annotations  # annotations stay text, so Python 3.8 gets to the check

import json
import os
import sys

if sys.version_info < (3, 11):  # noqa: UP036 (first, so an old Python gets one sentence)
    sys.exit(
        "error: agent.py needs Python 3.11 or newer, and this is Python "
        f"{'.'.join(map(str, sys.version_info[:3]))}: install a newer Python and make the "
        "virtual environment with it (see the README's quick start)"
    )

import model_client  # noqa: E402 (after the version check on purpose)
from minimal_agent import cli  # noqa: E402
from minimal_agent.common import files  # noqa: E402
from minimal_agent.common.errors import AgentError  # noqa: E402
from minimal_agent.core import replies  # noqa: E402
from minimal_agent.core.session import Session  # noqa: E402
from minimal_agent.tools import (  # noqa: E402
    diffs,
    hooks,
    permissions,
    processes,
    tool_results,
    tool_schema,
)
from minimal_agent.tools.hooks import Hooks  # noqa: E402
from minimal_agent.views import display  # noqa: E402

# --- Settings ---------------------------------------------------------------------------

MAX_STEPS = 20  # model requests per run; the loop stops there even if the model goes on
SHELL_TIMEOUT = 60.0  # seconds a run_shell command may take before its process group is killed
MAX_RESULT_CHARS = 20_000  # no tool result the model gets is longer than this
WORKDIR = os.path.join(os.path.dirname(os.path.realpath(__file__)), "playground")

SYSTEM_PROMPT = (
    "You are a small coding agent working in one folder, the workdir. Paths given to "
    "read_file and write_file are relative to it, and run_shell runs commands in it. "
    "Use the tools to do the task and check what they return instead of guessing. "
    "When the task is done, reply with a short answer and call no tool."
)


class Workspace:
    """What the tools act on, made whole once per session and never changed after: the folder
    they work in (the workdir), how long a shell command may run, whether every command runs
    unasked, whether commands run in the sandbox and what of the environment they get, whether
    writes are confirmed, the user's own paths they never touch, who approves (user), where
    they tell what they do (events), and what the session adds: tools, permission rules and
    hooks. Every tool gets it as its first argument."""

    def __init__(
        self,
        folder: str | os.PathLike = WORKDIR,
        timeout: float = SHELL_TIMEOUT,
        approve_all: bool = False,
        sandbox: bool = False,
        *,
        confirm_writes: bool = False,
        key: str = "",
        pass_env: frozenset[str] = frozenset(),
        private: list[str] | tuple[str, ...] = (),
        sandbox_limits: dict = processes.SANDBOX_LIMITS,
        user=None,
        events=None,
        added_tools: dict | None = None,
        rules: permissions.Rules | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        os.makedirs(folder, exist_ok=True)
        self.folder = os.path.realpath(folder)
        self.timeout = timeout
        self.approve_all = approve_all  # --yes: run_shell runs every command unasked
        self.sandbox = sandbox  # --sandbox: run_shell's commands run under bubblewrap
        self.confirm_writes = confirm_writes  # --confirm-writes: write_file asks first
        self.key = key  # the agent's API key: no command gets a variable holding it
        self.pass_env = pass_env  # LLM_PASS_ENV: what commands get anyway
        self.max_result_chars = MAX_RESULT_CHARS  # less for a small context window (Session)
        # The user's own paths (config, sessions, this conversation's records): out of reach
        self.private = tuple(private)
        self.sandbox_limits = sandbox_limits  # /tmp, processes, memory
        # Asked to approve; types --chat's messages. Its "a" answer (approve all from now on)
        # is the one thing that changes during a session, so it is kept there, not here.
        self.user = user or display.TerminalUser()
        self.events = events or display.terminal_events()  # what happens, for its readers
        # Tools the session adds beside TOOLS and TOOL_MAP (minimal_agent/tools/added_tools.py),
        # the user's permission rules and hooks (settings.json, --allow, --deny): none by default
        self.added_tools = dict(added_tools or {})
        self.rules = rules or permissions.Rules()
        self.hooks = hooks or Hooks()

    def path(self, name: str) -> str:
        """The real location of name, relative to the folder; refused if it lies outside it,
        or among the user's own files (self.private)."""
        target = os.path.realpath(os.path.join(self.folder, name))  # follows symlinks and ".."
        if os.path.commonpath([self.folder, target]) != self.folder:
            raise PermissionError(
                f"{name} is outside the workdir; only paths inside it are allowed"
            )
        files.refuse_private(target, self.private, name)  # the key's folder, the transcripts
        return target


# --- The three tools: plain functions; an exception becomes an "Error: ..." for the model ----


def read_file(ws: Workspace, path: str) -> str:
    """Return a text file's contents (one not in UTF-8: decoded, with a note; a binary file:
    its size and type)."""
    file = ws.path(path)
    if os.path.isdir(file):
        raise IsADirectoryError(f"{path} is a folder, not a file")
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{path} does not exist or is not a regular file")
    return files.read_capped(ws.folder, file, ws.max_result_chars)  # a huge file: its two ends


def write_file(ws: Workspace, path: str, content: str) -> str:
    """Write content to a file, creating folders; atomic, so a crash never leaves half a file."""
    file = ws.path(path)
    if os.path.isdir(file):
        raise IsADirectoryError(f"{path} is a folder")
    diffs.review_write(ws, path, file, content)  # shows the change; may ask the user first
    size = files.write_atomically(ws.folder, file, content)
    return f"Wrote {len(content)} characters ({size} bytes) to {path}"


def run_shell(ws: Workspace, command: str) -> str:
    """Run a shell command in the workdir once the user approves it; return exit code and output."""
    permissions.approve(ws, "run_shell", {"command": command}, command)  # a rule, or the user
    exit_code, output = processes.run_command(command, ws)  # killed with all it started on time-out
    if exit_code is None:
        return (
            f"Error: timed out after {ws.timeout:g} s; the command was killed. "
            f"Output so far:\n{output}"
        )
    return f"exit code {exit_code}\n{output}"


# --- TOOLS (the schemas the model sees) and TOOL_MAP (name -> Python function) -----------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file in the workdir.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workdir."}
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Create or overwrite a text file in the workdir (folders are created).",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File path, relative to the workdir.",
                    },
                    "content": {"type": "string", "description": "The file's whole new contents."},
                },
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command in the workdir (the user approves it first) and "
            "return its exit code and combined stdout and stderr.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": processes.SHELL_NAME}},
                "required": ["command"],
            },
        },
    },
]
TOOL_MAP = {"read_file": read_file, "write_file": write_file, "run_shell": run_shell}


# --- Executing one tool call: every failure comes back as text starting with "Error:" ------


def execute_tool_call(call: dict, ws: Workspace) -> str:
    """Run one tool call from an assistant message and return the tool message's content."""
    name = call["function"]["name"]
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
        problem = call_problem(name, args, ws.added_tools)  # no such tool, or bad arguments
        with tool_results.contained():  # print() kept off the answer's stdout, sys.exit() an error
            if problem:
                result = f"Error: {problem}"
            else:
                permissions.refuse_denied(ws, name, args)  # a deny rule stops it (PermissionError)
                hooks.before(ws, name, args)  # so does a PreToolUse hook that exits with 2
                if name in ws.added_tools:  # one the session added (maybe in a lesson tool's place)
                    result = ws.added_tools[name].function(ws, **args)
                else:
                    result = TOOL_MAP[name](ws, **args)
                result = hooks.after(ws, name, args, result)  # PostToolUse hooks may add a note
    except json.JSONDecodeError as error:
        result = f"Error: the arguments are not valid JSON ({error}); send one JSON object"
    except Exception as error:  # a failing tool is news for the model, not a crash
        result = f"Error: {type(error).__name__}: {error}"
    return files.capped(tool_results.as_text(result), ws.max_result_chars)  # a dict as JSON


# --- The loop --------------------------------------------------------------------------


def run(
    task: str,
    client=None,
    *,
    model: str | None = None,
    max_steps: int = MAX_STEPS,
    session: Session | None = None,
    **options,
) -> dict:
    """Work on task until the model replies without tool calls, or max_steps requests are made.

    Given a client and a model, no config.env is read. session carries what lasts for the whole
    session (--chat turns share one); without one, a new one is made from options (Session's
    arguments: workspace, history, save, stream, ...). Returns the final answer (text, or None),
    stop_reason ("finished"; "incomplete": the answer was cut off or empty; "max_steps"), and
    the turn's steps, tool_calls, usage and cost; messages is the whole conversation.
    """
    if client is None or model is None:
        client, model = model_client.client_and_model(client, model)
    session = session or new_session(options)
    messages = session.start(task)  # the conversation so far, the task appended
    request = {"model": model, "tools": session.tools(TOOLS), **session.limits}  # and any added

    for step in range(1, max_steps + 1):
        # client.chat.completions.create(**request, messages=messages), once the budget and the
        # context window allow it; a counter shows it is alive; its tokens and cost added up
        resp = session.ask(client, request, messages, step)
        msg = resp.choices[0].message
        finish_reason = resp.choices[0].finish_reason  # "length": cut off, its calls won't run
        assistant, not_run = replies.assistant_message(msg, finish_reason, len(messages))
        messages.append(assistant)  # appended only (and saved at once): nothing is rewritten
        if "tool_calls" not in assistant:
            text, complete = replies.final_answer(msg, finish_reason)
            return session.finish("finished" if complete else "incomplete", text)  # answer shown
        for call in assistant["tool_calls"]:  # one tool message per call, in order
            session.events.emit("tool_call", step=step, call=call)  # the terminal shows it
            # the workspace, its results capped for the model's context window
            result = not_run.get(call["id"]) or execute_tool_call(call, session.tools_workspace)
            session.events.emit("tool_result", step=step, call=call, result=result)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})

    session.events.notice(
        f"stopped: the step limit ({max_steps} requests) was reached; raise it with --max-steps"
    )
    return session.finish("max_steps", None)


# --- The chat loop: turn after turn of run() in one conversation ---------------------------


def chat(
    task: str,
    client=None,
    *,
    model: str | None = None,
    max_steps: int = MAX_STEPS,
    session: Session | None = None,
    **options,
) -> dict:
    """--chat: run() for each message, in one conversation, until an empty message (or /exit).

    Each turn has its own step budget and totals line. "/compact", "/undo", "/redo", "/diff",
    "/think on|off", "/effort low|high|max" and "/help" are done by the session instead of
    being sent, and so is any other "/word" (it is answered with the list of commands).
    Ctrl-C during a turn cancels that turn only (run_shell has killed its command by then), and
    a failed request ends its turn only (one line says why); Ctrl-C at the prompt ends the
    session. Returns the last finished turn's result, with the session's totals.
    """
    if client is None or model is None:
        client, model = model_client.client_and_model(client, model)
    session = session or new_session(options)
    result = {"text": None, "stop_reason": "finished"}  # what a session of no turns returns
    session.events.emit("chat")  # the terminal says how a chat goes on and ends
    message = task or session.user.next_message()  # typed after "> ", or stdin's next line
    while message:
        if not session.command(message, client, model):  # /compact, /undo, /think, ...
            try:
                result = run(message, client, model=model, max_steps=max_steps, session=session)
            except KeyboardInterrupt:
                session.cancel_turn()
            except Exception as error:  # a refused or failed request ends the turn, not the chat
                session.fail_turn(error)
        message = session.user.next_message()
    return session.end(result)


# ---- The lesson ends here. What follows is checking around it: the tools and their calls ----


def check_tools() -> None:
    """Stop before the first request when TOOLS and TOOL_MAP disagree: a schema without a
    function, or a function without a schema (one line naming the tool and what is missing);
    or a schema, or a function, that cannot work (minimal_agent/tools/tool_schema.py says why)."""
    schemas = {}
    for number, tool in enumerate(TOOLS, 1):
        problem = tool_schema.schema_mistake(tool)
        if problem:
            raise AgentError(f"{tool_schema.tool_label(tool, number)} in TOOLS {problem}")
        name = tool["function"]["name"]
        if name in schemas:
            raise AgentError(f"the tool {name!r} has two schemas in TOOLS: keep one")
        schemas[name] = tool
    for name in schemas:
        if name not in TOOL_MAP:
            raise AgentError(
                f"the tool {name!r} has a schema in TOOLS but no function in TOOL_MAP: add "
                f'"{name}": {name} to TOOL_MAP (or remove its schema)'
            )
    for name in TOOL_MAP:
        if name not in schemas:
            raise AgentError(
                f"the tool {name!r} is in TOOL_MAP but has no schema in TOOLS, so the model "
                "cannot call it: add its schema to TOOLS (see the README's 'Add a tool')"
            )
    for name, tool in schemas.items():
        parameters = tool["function"].get("parameters", {})
        problem = tool_schema.signature_mistake(TOOL_MAP[name], parameters)
        if problem:
            raise AgentError(f"the function of the tool {name!r} {problem}")


def call_problem(name: str, args: object, added: dict) -> str | None:
    """Why a call cannot run: there is no such tool, or its arguments do not fit its schema
    (for a name in added, Workspace.added_tools, the added tool's schema)."""
    if name not in TOOL_MAP and name not in added:
        return f"there is no tool {name!r}; the tools are {', '.join({**TOOL_MAP, **added})}"
    if name in added:
        tool = added[name].schema["function"]
    else:
        tool = next(t["function"] for t in TOOLS if t["function"]["name"] == name)
    schema = tool.get("parameters", {"type": "object", "properties": {}})
    return tool_schema.arguments_problem(name, schema, args)


def new_session(options: dict) -> Session:
    """The session of a run() or chat() called without one: options are Session's arguments,
    and the tools work in the default workdir unless options name a workspace."""
    return Session(SYSTEM_PROMPT, options.pop("workspace", None) or Workspace(), **options)


def main(argv: list[str] | None = None) -> int:
    """The command line (`python agent.py --help`): the package's cli runs this lesson's loop
    with this lesson's settings, tools and client."""
    return cli.main(sys.modules[__name__], argv)


def command() -> int:
    """The installed `minimal-agent` command (pyproject.toml): main() in the folder it is run
    in, with the settings of the user's own config folder and the environment."""
    return cli.main(sys.modules[__name__], installed=True)


if __name__ == "__main__":
    sys.exit(main())
