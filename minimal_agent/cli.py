"""The command line: `python agent.py [options] [TASK ...]`. Reads the options, picks the mode
they ask for (the run, or --show, --html, --sessions, --undo/--redo, --mcp, --replay: each its
own function, given the options it takes), reads the settings, checks everything a user can get
wrong before the first request (each mistake ends in one line that says what to do), picks the
conversation to start or resume, and maps how the run ended to the exit code."""

from __future__ import annotations

import argparse
import functools
import os
import select
import stat
import sys
from pathlib import Path
from typing import NamedTuple

from minimal_agent.common import files, settings_guard
from minimal_agent.common.errors import AgentError, UsageError, without_key
from minimal_agent.common.text import visible
from minimal_agent.core import completions, cost, events, models, settings_json
from minimal_agent.core.api_errors import describe_api_error
from minimal_agent.core.context_window import Window, split_transcript
from minimal_agent.core.replay import ReplayClient
from minimal_agent.core.session import Session, own_records
from minimal_agent.core.settings import Settings, no_price, parsed, sessions_folder
from minimal_agent.core.window_probe import find_window, is_deepseek
from minimal_agent.stores import changes, conversations
from minimal_agent.stores.transcripts import check_conversation, show_transcript, transcript_lines
from minimal_agent.tools import added_tools, daily_tools, hooks, mcp_servers, processes
from minimal_agent.views import display, json_output, wire_page, wire_text
from minimal_agent.views.prompt import Prompt

VERSION = "0.2.0"  # pyproject.toml's version
PYTHON = "python" if sys.platform == "win32" else "python3"  # the interpreter's name on PATH
DEMO_TASK = (
    "Create a file tool_demo.py containing print(17 * 23), read it back, run it with "
    f"{PYTHON}, and tell me the real output."
)
EXIT_CODES = {"finished": 0, "max_steps": 3, "budget": 3, "incomplete": 4, "refused": 5}


def main(lesson, argv: list[str] | None = None, *, installed: bool = False) -> int:
    """python agent.py [options] [TASK ...]; returns the exit code (see the README).

    lesson is agent.py's module, handed over by agent.main(): its settings, Workspace,
    check_tools(), run() and chat(), and the model_client it takes its client from. argv None:
    called as the program, from the command line's own arguments. installed: the
    `minimal-agent` command (agent.command()), which works in the current folder and reads the
    user's own config file, never one in the project folder or beside the installed code."""
    if argv is None:
        exit_without_collecting()
    never_fail_on_output()
    parser = build_parser(lesson, installed)
    args = parser.parse_args(recovered(sys.argv[1:] if argv is None else argv))
    processes.exit_on_termination()  # after --help, which loads no signal handling
    # The installed command reads the user's own settings file; the lesson, the one beside it.
    config_file = str(conversations.config_file() if installed else lesson.model_client.CONFIG_FILE)
    # What happens, told to the terminal and to the readers --json and --json-events ask for
    # (on stdout).
    stream, outcome = json_output.for_options(args.json, args.json_events, sys.stdout)
    stream.subscribe(display.Terminal())
    code = 1
    try:
        with json_output.answers_on_stderr(args.json or args.json_events):
            code = start_mode(lesson, parser, args, installed, config_file, stream, outcome)
    except SystemExit as end:  # a usage error, or a termination signal's handler
        code = end.code if isinstance(end.code, int) else 1
        outcome.error = outcome.error or parser.mistake
        raise
    finally:
        if argv is None:  # the program
            processes.ignore_late_signals()
        else:  # called by a console, a debugger, a test
            processes.ctrl_c_given_back()
        stream.emit("end", **json_output.end_record(outcome, code))
    return code


# The options that choose a mode (the run is the mode none of them chooses), and the options
# each mode takes besides its own: any other is a usage error naming both. Every mode takes
# --workdir, which a wrapper or an alias may put before whatever is typed after it.
RUN_OPTIONS = frozenset({
    "task", "workdir", "model", "max_steps", "max_cost", "max_tokens", "thinking", "effort",
    "request_timeout", "stream", "yes", "allow", "deny", "confirm_writes", "sandbox", "timeout",
    "chat", "continue_last", "resume", "save", "no_save", "raw", "json", "json_events",
})  # fmt: skip
TAKING_BACK = frozenset({"workdir", "resume", "force"})
TAKING_BACK_ADVICE = (
    "it starts no conversation; give it alone (with -r ID for a conversation other than the "
    "workdir's latest, --force to overwrite files changed since)"
)
MODE_OPTIONS = {
    "show": frozenset({"workdir", "wire"}),
    "html": frozenset({"workdir"}),
    "sessions": frozenset({"workdir"}),
    "undo": TAKING_BACK,
    "redo": TAKING_BACK,
    "mcp": frozenset({"workdir", "yes", "sandbox", "timeout", "allow", "deny"}),
    "replay": RUN_OPTIONS - {"continue_last", "resume", "request_timeout"},
    "run": RUN_OPTIONS,
}
# What a usage error adds after "--MODE takes no OPTION: ".
MODE_ADVICE = {
    "show": "give it alone (with --wire for the requests and responses as sent)",
    "html": "give it the conversation's ID (or transcript file) and, after it, OUT.html",
    "sessions": "give it alone",
    "undo": TAKING_BACK_ADVICE,
    "redo": TAKING_BACK_ADVICE,
    "mcp": "it starts no conversation; give it alone (with --yes, --sandbox, --timeout, "
    "--allow or --deny as for a run)",
    "replay": "it asks no model and starts its own conversation from the transcript's replies",
}


def mode_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The mode args choose ("run" when no option chooses one), once every option given is
    one that mode takes: else a usage error (exit 2) naming the option and the mode."""
    names = {action.dest: "/".join(action.option_strings) or action.dest
             for action in parser._actions}  # fmt: skip
    # Given: set to other than its default (an empty TASK is none; --no-stream is one)
    given = [dest for dest, value in vars(args).items()
             if value not in ([], parser.get_default(dest))]  # fmt: skip
    chosen = [dest for dest in given if dest in MODE_OPTIONS]
    if len(chosen) > 1:
        parser.error(f"{names[chosen[0]]} and {names[chosen[1]]}: give one of them")
    mode = chosen[0] if chosen else "run"
    for dest in given:
        if dest == mode or dest in MODE_OPTIONS[mode]:
            continue
        if dest not in RUN_OPTIONS:  # an option of a mode's own, as --wire of --show's
            modes = [names[other] for other, taken in MODE_OPTIONS.items() if dest in taken]
            parser.error(f"{names[dest]} goes with {' or '.join(modes)}")
        parser.error(f"{names[mode]} takes no {names[dest]}: {MODE_ADVICE[mode]}")
    return mode


def start_mode(
    lesson, parser: argparse.ArgumentParser, args: argparse.Namespace, installed: bool,
    config_file: str, stream: events.Events, outcome: json_output.Outcome,
) -> int:  # fmt: skip
    """main()'s mode, told by args: its usage errors, then its function called with what it
    takes; returns the exit code. What a mode is made of (its workdir, its settings) is made
    here or in it, never written back into args."""
    mode = mode_of(parser, args)
    load_config = functools.partial(lesson.model_client.load_config, config_file)
    if mode == "show":
        return show_conversation(args.show, args.wire, load_config, stream)
    if mode == "html":
        if len(args.html) > 2:
            parser.error(
                "--html takes a conversation's ID (or transcript file) and, after it, OUT.html"
            )
        return write_page(*args.html, load_config=load_config, stream=stream)
    if mode == "sessions":
        return configured(stream, load_config, list_sessions)
    workdir = args.workdir or default_workdir(lesson, installed)
    if mode in ("undo", "redo"):
        return configured(
            stream, load_config, take_back, mode, args.resume, args.force, workdir, stream
        )
    if mode == "mcp":
        return configured(stream, load_config, list_mcp_servers, lesson, args, workdir, installed)
    check_run_options(parser, args, lesson.model_client.odd_character)
    if mode == "replay":
        return replay(lesson, parser, args, installed, config_file, stream, outcome)
    return run_task(lesson, parser, args, installed, config_file, stream, outcome)


def check_run_options(parser: argparse.ArgumentParser, args: argparse.Namespace, odd_character):
    """The run's and --replay's options that cannot go together, a file given where none is
    taken, or a --model name with an invisible character (odd_character: model_client's check
    of settings): exit 2."""
    problem = args.model and odd_character(args.model, invisible_only=True)
    if problem:
        parser.error(f"argument --model: the name contains {problem}")
    resuming = args.continue_last or args.resume
    if args.continue_last and args.resume:
        parser.error("-c (the most recent conversation) and -r (a chosen one): give one of them")
    if args.save and resuming:
        parser.error("a resumed conversation is saved where it was: drop --save")
    if args.no_save and (args.save or resuming):
        parser.error("--no-save keeps no transcript, so it goes with neither --save nor -c/-r")
    if args.continue_last and args.task and looks_like_a_file(args.task[0]):
        parser.error(
            f"-c/--continue takes no file: to go on with the conversation in {args.task[0]}, use "
            f"--resume {args.task[0]}"
        )
    if args.json and args.json_events:
        parser.error("--json and --json-events both print on stdout: give one of them")
    if args.task and not " ".join(args.task).strip():
        parser.error("the task is only spaces: give it in words, or pipe it on stdin")


def show_conversation(id_or_file: str, wire_too: bool, load_config, stream: events.Events) -> int:
    """--show ID_OR_FILE (wire_too, --wire: its requests and responses): the conversation found
    as -r finds it (in the sessions folder load_config()'s settings name), printed; exit 1
    with one line if it cannot be."""
    try:
        folder = sessions_folder(load_config())
        path = conversations.resolve(id_or_file, folder, "--show")
        if wire_too:
            show = wire_text.show_wire
            return display.until_the_reader_stops(show, path, folder, display.print_line)
    except AgentError as error:
        stream.notice(f"error: {error}")
        return 1
    return display.until_the_reader_stops(
        show_transcript, str(path), display.print_line, stream.notice
    )


def write_page(
    id_or_file: str, out: str | None = None, *, load_config, stream: events.Events
) -> int:  # fmt: skip
    """--html ID_OR_FILE [OUT.html]: the conversation's requests and responses written as one
    page (found as --show finds it); exit 1 with one line if it cannot be."""
    try:
        folder = sessions_folder(load_config())
        path = conversations.resolve(id_or_file, folder, "--html")
        page = wire_page.write_page(path, out, folder)
    except AgentError as error:
        stream.notice(f"error: {error}")
        return 1
    stream.notice(f"wrote {page}: open it in a browser")
    return 0


def list_mcp_servers(
    config: dict, lesson, args: argparse.Namespace, workdir: str, installed: bool
) -> int:
    """--mcp: the MCP servers a run in workdir would start (show_mcp_servers), with the
    settings in config and the options --mcp takes (mode_of refused any other in args)."""
    lesson.check_tools()
    check_paths(workdir, args.workdir is not None, None)
    return display.until_the_reader_stops(
        show_mcp_servers, lesson, args, parsed(config, args, installed), Place(workdir),
        installed,
    )  # fmt: skip


def run_task(
    lesson, parser, args: argparse.Namespace, installed: bool, config_file: str,
    stream: events.Events, outcome: json_output.Outcome,
) -> int:  # fmt: skip
    """The run (no option chose another mode): a task, or a --chat, with the model the settings
    name at their server; see converse()."""
    model_client = lesson.model_client

    def connect(config: dict, model: str) -> tuple:
        client = model_client.create_client(config, timeout=args.request_timeout)
        check_retired(model, config)
        return client, f"model {model} at {config['base_url']}", None

    return converse(lesson, parser, args, installed, config_file, stream, outcome, connect)


def replay(
    lesson, parser, args: argparse.Namespace, installed: bool, config_file: str,
    stream: events.Events, outcome: json_output.Outcome,
) -> int:  # fmt: skip
    """--replay FILE: a run whose model's replies are the transcript's (no server is asked;
    the tools run for real); see converse()."""

    def connect(config: dict, model: str) -> tuple:
        client = ReplayClient(args.replay, notify=stream.notice)
        source = f"replaying {args.replay} (no model is asked; tools run for real)"
        return client, source, client.task()  # without a TASK, the one it was recorded with

    return converse(lesson, parser, args, installed, config_file, stream, outcome, connect)


def converse(
    lesson, parser, args: argparse.Namespace, installed: bool, config_file: str,
    stream: events.Events, outcome: json_output.Outcome, connect,
) -> int:  # fmt: skip
    """A run or a replay, from the settings (read from config_file) to the exit code; connect
    (config, model) gives the client, the line that says where its replies come from, and the
    task to do when none is given (None: the one piped, or the demo's).
    outcome keeps its session and result, and stream gets its events, the errors' lines among
    them."""
    agent, model_client = lesson, lesson.model_client
    config: dict = {}  # for the error hints, whatever fails first
    session = None
    chat = args.chat
    workdir = args.workdir or default_workdir(lesson, installed)
    settings_before = {
        path: settings_guard.settings_state(path) for path in settings_files(config_file)
    }
    try:
        config = model_client.load_config(config_file)
        stream.key = config["api_key"]
        agent.check_tools()
        place = resumed_workdir(args, config, workdir)
        check_paths(place.workdir, args.workdir is not None, args.save)
        model = args.model or config["model"]
        check_budget(parser, args, config, model)  # a usage error (exit 2) comes first
        client, source, recorded_task = connect(config, model)
        settings = parsed(config, args, installed)
        if args.sandbox:
            make_private_folders(settings, installed)
        private = private_paths(settings, installed)
        if args.sandbox:
            processes.check_sandbox(place.workdir, settings.sandbox_limits, private)
        sandboxed = "; shell commands run in a sandbox" if args.sandbox else ""
        own = " (the conversation's own)" if place.own else ""
        stream.notice(f"{source}; workdir {place.workdir}{own}{sandboxed}")
        if place.note:
            stream.notice(place.note)
        say_private_inside(place.workdir, private, stream)
        session = outcome.session = open_session(agent, args, settings, place, private, stream)
        task = " ".join(args.task).strip() or recorded_task
        # The installed command alone on a terminal opens a session; the lesson runs its demo.
        chat = args.chat or (installed and not task and sys.stdin.isatty())
        task = task or task_from_stdin(parser, args, chat, stream)  # chat() asks for it
        result = outcome.result = (agent.chat if chat else agent.run)(
            task, client, model=model, max_steps=args.max_steps, session=session
        )
    except (KeyboardInterrupt, Exception) as error:
        save = session and session.transcript and session.transcript.path
        describe = functools.partial(
            describe_api_error, config=config, model=args.model or config.get("model"),
            timeout=args.request_timeout, save=save, sent=session.limits if session else {},
        )  # fmt: skip
        return ended_by(error, stream, config.get("api_key"), save, describe,
                        stop=functools.partial(stopped, session, args.save, chat))  # fmt: skip
    finally:
        if session:
            session.close()
            for path, before in settings_before.items():
                say_settings_changed(path, before, stream)
    say_where_saved(session, args.save)
    if session.lost or session.user.prompt.lost:  # a record given up, said when it happened
        return 1
    if result["stop_reason"] == "finished" and session.refused:
        # Calls that needed an approval nobody could give (each said so where it was
        # refused): the model may say the work is done, but for a script it is no success.
        return EXIT_CODES["refused"]
    return EXIT_CODES[result["stop_reason"]]


def configured(stream: events.Events, load_config, mode, *args) -> int:
    """mode(config, *args)'s exit code, config being the settings load_config() reads; or the
    exit code of the error that ended it, said in one line."""
    try:
        config = load_config()
        stream.key = config["api_key"]
        return mode(config, *args)
    except (KeyboardInterrupt, Exception) as error:
        return ended_by(error, stream, stream.key, None)


def ended_by(
    error: BaseException, stream: events.Events, key: str | None, save: str | None,
    describe=lambda error: None, stop=lambda exit_code: exit_code,
) -> int:  # fmt: skip
    """Called inside the except block of the error that ended a mode: its one line (a bug's
    traceback) on stream, without the key; returns the exit code, through stop (which says
    the totals of a run cut short) unless the agent itself could not go on. describe: the
    line of an API error (None for any other); save: the transcript, named in a bug's report."""
    if isinstance(error, KeyboardInterrupt):
        stream.notice("interrupted")
        return stop(130)
    if isinstance(error, AgentError):  # it may quote what the server sent: never with the key
        failed(stream, without_key(str(error), key))
        return stop(error_exit_code(error))
    if isinstance(error, OSError):
        failed(stream, without_key(str(error), key))
        return stop(1)
    if isinstance(error, ModuleNotFoundError):  # started with a Python that lacks the packages
        failed(stream, missing_package(error))
        return 1
    if processes.ENDING:  # a signal's exception that the code it hit turned into another
        stream.notice("interrupted")  # (pydantic's schema building makes it a SchemaError)
        return stop(128 + processes.ENDING[0])
    if type(error).__module__ == "bdb":  # pdb's q while stopped in the agent: no bug, quit
        raise error
    message = describe(error)
    if message is None:
        stream.emit("error", error=f"a bug in the agent: {type(error).__name__}")
        return report_bug(save, key, stream)
    failed(stream, message)
    return stop(1)


def failed(stream: events.Events, message: str) -> None:
    """An error's one line on stderr ("stopped: ..." as it is), and for the events' readers."""
    stream.notice(message if message.startswith("stopped:") else f"error: {message}")
    stream.emit("error", error=message)


def error_exit_code(error: AgentError) -> int:
    """The exit code of a run an AgentError ended: the budget's, a usage error's 2, else 1."""
    if type(error).__name__ == "BudgetReached":
        return EXIT_CODES["budget"]
    return 2 if isinstance(error, UsageError) else 1


def build_parser(lesson, installed: bool = False) -> argparse.ArgumentParser:
    """The options, their defaults taken from the lesson's settings (see main())."""
    config_file = conversations.config_file() if installed else "config.env beside agent.py"
    tools = "read_file, write_file and run_shell"
    if installed:
        tools = "read_file, write_file, run_shell, edit_file, search and list_files (the "
        tools += "last three unless LLM_DAILY_TOOLS=0)"
    parser = Parser(
        prog="minimal-agent" if installed else "agent.py",
        usage="%(prog)s [options] [TASK ...]",  # the options are listed below it, once
        description=f"A minimal LLM agent: the model calls {tools} in a workdir until the "
        "task is done. Without a TASK it reads one from piped stdin, or on a terminal runs the "
        "lesson's demo task (minimal-agent: opens a chat). Every conversation is saved, so it "
        "can be resumed (-c, -r, --sessions).",
        epilog="Exit codes: 0 finished, 1 error, 2 bad usage, 3 step limit or budget reached, "
        "4 the answer is cut off or empty, 5 finished but calls were refused for want of an "
        f"approval nobody could give, 130 interrupted. Settings ({config_file}, or the "
        "environment, which wins): LLM_API_KEY, LLM_BASE_URL, LLM_MODEL, LLM_MAX_TOKENS, "
        "LLM_CURRENCY, LLM_PRICE_INPUT, LLM_PRICE_CACHED_INPUT, LLM_PRICE_OUTPUT, LLM_MAX_COST, "
        "LLM_SESSIONS_DIR, LLM_CONTEXT_TOKENS, LLM_COMPACT_AT, LLM_CONFIRM_WRITES, LLM_THINKING, "
        "LLM_EFFORT, LLM_PASS_ENV, LLM_SANDBOX_LIMITS, LLM_DAILY_TOOLS (1: add edit_file, "
        "search, list_files and read_file's offset and limit; on for minimal-agent, off for "
        "agent.py); see the README.",
    )
    add = parser.add_argument
    add("task", nargs="*", metavar="TASK", help="the task, in words")
    add("--version", action="version", version=f"%(prog)s {VERSION}")
    add(
        "--workdir",  # None when not given: -c/-r then go on where the conversation worked
        help="folder the tools act in (default: "
        + ("the current folder" if installed else default_workdir(lesson, installed))
        + "; with -c/-r, the conversation's own)",
    )
    add("--model", help="model name (default: LLM_MODEL, else deepseek-flash)")
    add(
        "--max-steps",
        type=positive(int),
        default=lesson.MAX_STEPS,
        metavar="N",
        help="stop after N model requests in a run or --chat turn (default: %(default)s)",
    )
    add(
        "--max-cost",
        type=positive(float),
        metavar="AMOUNT",
        help="stop before the next request once the session has cost AMOUNT (in LLM_CURRENCY; "
        "default: LLM_MAX_COST, else no limit)",
    )
    add(
        "--max-tokens",
        type=positive(int),
        metavar="N",
        help="ask the server to end each reply after N tokens (default: LLM_MAX_TOKENS, else "
        "the server's own limit)",
    )
    add(
        "--thinking",
        choices=("on", "off"),
        help="DeepSeek's thinking: off for a quicker, cheaper answer (default: LLM_THINKING, "
        "else the server's own: on for DeepSeek)",
    )
    add(
        "--effort",
        choices=completions.EFFORTS,
        help="how hard DeepSeek thinks (default: LLM_EFFORT, else the server's own: high)",
    )
    add(
        "--request-timeout",
        type=positive(float),
        default=lesson.model_client.REQUEST_TIMEOUT,
        metavar="SECONDS",
        help="give up an attempt when the server sends nothing for this long (default: "
        "%(default)g; the SDK makes up to three attempts)",
    )
    add(
        "--stream",
        action=argparse.BooleanOptionalAction,
        help="show the model's thinking and text on stderr as they arrive (default: when stderr "
        "is a terminal; --replay never streams)",
    )
    add("--yes", action="store_true", help="run every shell command unasked (but where a rule "
        "denies or asks)")  # fmt: skip
    add(
        "--allow",
        action="append",
        default=[],
        metavar="RULE",
        help="for this run, a permission rule that lets calls run unasked, such as "
        "'run_shell(pytest:*)' (again for more; docs/permissions.md)",
    )
    add(
        "--deny",
        action="append",
        default=[],
        metavar="RULE",
        help="for this run, a permission rule that keeps calls from running, such as "
        "'run_shell(git push:*)' or 'read_file(.env)'",
    )
    add(
        "--confirm-writes",
        action="store_true",
        help="show each write_file's diff and ask before making it (default: LLM_CONFIRM_WRITES)",
    )
    add(
        "--sandbox",
        action="store_true",
        help="run shell commands under bubblewrap (Linux): only the workdir writable, a private "
        "/tmp, no network; with --yes, the mode for unattended runs",
    )
    add(
        "--timeout",
        type=positive(float),
        default=lesson.SHELL_TIMEOUT,
        metavar="SECONDS",
        help="time limit for each shell command (default: %(default)g)",
    )
    add(
        "--chat",
        action="store_true",
        help="after each answer take a follow-up in the same conversation: typed at a '> ' "
        "prompt on a terminal, else the next line of stdin; an empty line or end of input "
        "ends the session; /compact compacts the conversation; /undo, /redo and /diff as in "
        "docs/undo.md; /think on|off and /effort low|high|max switch DeepSeek's thinking",
    )
    add(
        "-c",
        "--continue",
        dest="continue_last",
        action="store_true",
        help="go on with the most recent conversation of this workdir",
    )
    add(
        "-r",
        "--resume",
        metavar="ID_OR_FILE",
        help="go on with a saved conversation: an ID from --sessions, or a transcript file",
    )
    add("--sessions", action="store_true", help="list the recent saved conversations")
    add(
        "--mcp",
        action="store_true",
        help="list the MCP servers (mcp.json beside the settings, .mcp.json in the workdir): "
        "where each is configured, whether it starts, and its tools (docs/mcp.md)",
    )
    add(
        "--save",
        metavar="FILE",
        help="save the conversation to FILE (JSON Lines) instead of the sessions folder; FILE "
        "must be new or empty",
    )
    add("--no-save", action="store_true", help="keep no transcript of this conversation")
    add(
        "--replay",
        metavar="FILE",
        help="take the model's replies from a saved transcript (offline; not saved)",
    )
    add("--raw", action="store_true", help="print every raw response on stderr")
    add(
        "--json",
        action="store_true",
        help="for scripts: print one JSON object on stdout when the run ends, however it ends "
        "(status, answer, tokens, cost, files changed; docs/json.md); all else goes to stderr",
    )
    add(
        "--json-events",
        action="store_true",
        help="for scripts: print one JSON object a line on stdout as the run goes (turns, "
        "replies, tool calls and results, file changes, the end record; docs/json.md)",
    )
    add(
        "--show",
        metavar="ID_OR_FILE",
        help="print a saved conversation (an ID from --sessions, or a transcript file) as a "
        "timeline",
    )
    add(
        "--wire",
        action="store_true",
        help="with --show: print each request as sent and each response as received, as JSON "
        "(see docs/wire.md)",
    )
    add(
        "--html",
        nargs="+",
        metavar=("ID_OR_FILE", "OUT.html"),
        help="write a saved conversation's requests and responses as one page to click through "
        "in a browser (default OUT: ID.html in the current folder)",
    )
    add(
        "--undo",
        action="store_true",
        help="put the workdir back as it was before the last turn of its latest conversation "
        "that changed files (-r ID: of that one); again: one more turn back",
    )
    add("--redo", action="store_true", help="put back what the last --undo took away")
    add(
        "--force",
        action="store_true",
        help="with --undo or --redo: overwrite files changed since (they are kept)",
    )
    return parser  # fmt: skip


class Parser(argparse.ArgumentParser):
    """argparse's parser, keeping its last usage error's words for the --json record."""

    mistake: str | None = None

    def error(self, message: str):
        self.mistake = message
        super().error(message)


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


def recovered(argv: list[str]) -> list[str]:
    """The arguments as typed: in a locale that is not UTF-8 (LC_ALL=C), Python decodes the
    UTF-8 bytes of a Chinese task into surrogate escapes, which could not be sent."""
    return [os.fsencode(arg).decode("utf-8", "replace") for arg in argv]


def check_budget(
    parser: argparse.ArgumentParser, args: argparse.Namespace, config: dict, model: str
) -> None:
    """--max-cost for a model without a known price: a usage error (exit 2), before anything
    starts. (LLM_MAX_COST is a setting: open_session refuses it as one, exit 1.)"""
    if not args.max_cost:
        return
    try:
        prices = cost.prices_for(model, config)
    except cost.PriceError as error:
        raise AgentError(str(error)) from None
    if not prices:
        parser.error(no_price(model, "--max-cost"))


def check_retired(model: str, config: dict) -> None:
    """A model DeepSeek retired, asked of DeepSeek's API: one line naming what replaced it,
    before the request it would refuse. (Another server may still serve it by that name.)"""
    retired = models.retirement(model)
    if retired and is_deepseek(config["base_url"]):
        raise AgentError(retired)


def looks_like_a_file(word: str) -> bool:
    """Whether the first word after -c names a transcript (the old `--continue FILE` syntax): a
    file that exists, or one word ending in .jsonl (a typo of one would else become the task)."""
    return os.path.isfile(word) or (word.endswith(".jsonl") and len(word.split()) == 1)


def default_workdir(lesson, installed: bool) -> str:
    """Where the tools act without --workdir: the installed command's current folder, the
    lesson's playground for python agent.py."""
    return os.getcwd() if installed else lesson.WORKDIR


class Place(NamedTuple):  # not a dataclass: dataclasses imports inspect, 17 ms at each start
    """Where a run works: its workdir, the transcript it goes on with (None: a new
    conversation), whether that workdir is the one the transcript recorded (own), and the
    line that says its history was about another folder (note), or None."""

    workdir: str
    transcript: Path | None = None
    own: bool = False
    note: str | None = None


def resumed_workdir(args: argparse.Namespace, config: dict, workdir: str) -> Place:
    """-c or -r: the conversation's transcript found, and the workdir it goes on in: the one
    it recorded last, unless --workdir names another or the transcript is not among the
    user's saved ones (a file anyone may have written chooses no folder); a new
    conversation: workdir."""
    if not (args.continue_last or args.resume):
        return Place(workdir)
    folder = sessions_folder(config)
    if args.resume:
        transcript = conversations.resolve(args.resume, folder)
    else:
        transcript = conversations.latest_for(workdir, folder)
        if transcript is None:
            raise AgentError(
                f"there is no saved conversation of the workdir {workdir} (in {folder}) to "
                "continue: start one with a task; --sessions lists the saved ones"
            )
    recorded = conversations.recorded_workdirs(transcript)
    if not recorded:  # an older transcript: the workdir as given
        return Place(workdir, transcript)
    if args.workdir is None and conversations.saved_in(transcript, folder):
        return Place(recorded[-1], transcript, own=True)  # -c and -r go on in their own
    if os.path.normcase(os.path.realpath(workdir)) == os.path.normcase(recorded[-1]):
        return Place(workdir, transcript)
    if args.workdir is None:
        return Place(workdir, transcript, note=(
            f"note: {transcript} is not among your saved conversations (in {folder}), so "
            f"the workdir it names, {recorded[-1]}, is not used: the tools act in "
            f"{workdir} (--workdir DIR chooses another)"
        ))  # fmt: skip
    return Place(workdir, transcript, note=(
        f"note: this conversation's history is about the workdir {recorded[-1]}; its tools "
        f"now act in {workdir} (--workdir)"
    ))  # fmt: skip


def check_paths(workdir: str, given: bool, save: str | None) -> None:
    """Refuse a --workdir or --save that cannot work, naming the option, before any request.
    A --workdir given that does not exist is a mistyped one (exit 2); only a default is made."""
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise AgentError(f"--workdir {workdir} is a file, not a folder: give a folder")
    if not os.path.exists(workdir) and given:
        nearest = os.path.abspath(workdir)
        while not os.path.exists(nearest):
            nearest = os.path.dirname(nearest)
        if not os.path.isdir(nearest):
            raise AgentError(f"--workdir {workdir}: cannot create the folder: {nearest} is a file")
        raise UsageError(
            f"--workdir {workdir} does not exist (the nearest folder that does is {nearest}): "
            "check the name, or create the folder first"
        )
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as error:
        raise AgentError(
            f"--workdir {workdir}: cannot create the folder ({error.strerror})"
        ) from None
    if not save:
        return
    if os.path.isdir(save):
        raise AgentError(
            f"--save {save} is a folder: give a file name, such as "
            f"{os.path.join(save, 'run.jsonl')}"
        )
    folder = os.path.dirname(os.path.abspath(save))
    if not os.path.isdir(folder):
        raise AgentError(
            f"--save {save}: the folder {folder} does not exist; create it or save elsewhere"
        )
    conversations.check_new_save(save)


def open_session(
    agent, args: argparse.Namespace, settings: Settings, place: Place, private: list[str],
    stream: events.Events,
) -> Session:  # fmt: skip
    """The session for this start: a new conversation saved in the sessions folder (or
    --save's file, or nowhere), or a saved one to resume; prices, budget and window set.
    agent is the lesson's module (see main()); private, the user's own paths out of the tools'
    reach; stream, where the session's events go."""
    folder = settings.sessions_folder
    typed = None if args.no_save else conversations.history_file(folder)
    # The workspace is made whole once, from what is gathered first: the rules and hooks
    # (the project's settings read through a fence of the same folder and private paths), the
    # transcript (whose records join the private paths), and the added tools (the daily
    # tools, then those of the MCP servers, started for a workspace holding all but theirs).
    workspace_of = functools.partial(
        agent.Workspace,
        place.workdir,
        args.timeout,
        args.yes,
        args.sandbox,
        confirm_writes=settings.confirm_writes,
        key=settings.api_key,  # kept from commands
        pass_env=settings.pass_env,
        sandbox_limits=settings.sandbox_limits,
        user=display.TerminalUser(Prompt(typed, settings.api_key, stream.notice)),
        events=stream,
    )
    daily = daily_tools.tools(agent.TOOL_MAP) if settings.daily_tools else {}
    user_settings = settings_json.user_file(str(settings.config_file))
    tool_names = [*agent.TOOL_MAP, *daily]
    rules, hook_list = settings_json.load(workspace_of(private=private), user_settings,
                                          args.allow, args.deny, tool_names)  # fmt: skip
    history, compaction, save = None, None, args.save
    if args.continue_last or args.resume:
        save, history, compaction = resumed(place.transcript, stream)
    elif not (args.no_save or args.replay or save):
        save = conversations.new_transcript(folder)
    if save:
        private = [*private, *own_records(os.path.realpath(place.workdir), folder, save)]
        name = os.path.basename(save).removesuffix(conversations.SUFFIX)
        hook_set = hooks.Hooks(hook_list, name, os.path.abspath(save))
    else:
        hook_set = hooks.Hooks(hook_list)
    workspace_of = functools.partial(workspace_of, private=private, rules=rules, hooks=hook_set)
    servers = mcp_servers.start(workspace_of(added_tools=daily),
                                os.path.dirname(settings.config_file), str(folder),
                                agent.TOOL_MAP)  # fmt: skip
    workspace = workspace_of(added_tools={**daily, **(servers.tools if servers else {})})
    tools = added_tools.offered(agent.TOOLS, workspace.added_tools)
    window = context_window(settings, not args.replay, tools)  # --replay: no server
    if compaction:
        try:
            window.restore(compaction, history)
        except ValueError as error:
            raise AgentError(f"{save}: {error}") from None
    session = Session(
        agent.SYSTEM_PROMPT,
        workspace,
        settings,
        history=history,
        save=save,
        stream=streaming(args),
        raw=args.raw,
        window=window,
        describe=functools.partial(
            describe_api_error,
            config=settings.config,
            model=settings.model,
            timeout=args.request_timeout,
            save=save,
        ),  # fmt: skip
        replayed=bool(args.replay),
    )
    session.servers = servers
    return session


def show_mcp_servers(agent, args, settings: Settings, place, installed: bool) -> int:
    """--mcp: each MCP server, where it is configured, whether it started and its tools, on
    stdout; the workdir's ask for approval as a session's would."""
    workspace_of = functools.partial(
        agent.Workspace, place.workdir, args.timeout, args.yes, args.sandbox,
        key=settings.api_key, pass_env=settings.pass_env,
        private=private_paths(settings, installed), sandbox_limits=settings.sandbox_limits,
    )  # fmt: skip
    user_settings = settings_json.user_file(str(settings.config_file))  # its deny rules hold
    rules, hook_list = settings_json.load(workspace_of(), user_settings, args.allow, args.deny,
                                          agent.TOOL_MAP)  # fmt: skip
    folder = os.path.dirname(settings.config_file)
    workspace = workspace_of(rules=rules, hooks=hooks.Hooks(hook_list))
    servers = mcp_servers.start(workspace, folder, str(settings.sessions_folder), agent.TOOL_MAP)
    if not servers:
        user_file = os.path.join(folder, mcp_servers.USER_FILE)
        display.print_line(
            f"no MCP server is configured: add one to {user_file} or to "
            f"{mcp_servers.PROJECT_FILE} in the workdir (docs/mcp.md)"
        )
        return 0
    try:
        for line in servers.report():
            display.print_line(line)
    finally:
        servers.close()
    return 0


def context_window(settings: Settings, server: bool, tools: list[dict]) -> Window:
    """The context window's keeper: its size from LLM_CONTEXT_TOKENS, else asked from the
    server (in the background; not for --replay, which has none), else known models."""
    probed = {"context_tokens": settings.context_tokens, "model": settings.model}
    if server:
        probed.update(base_url=settings.base_url, api_key=settings.api_key)
    return Window(find_window(probed), compact_at=settings.compact_at,
                  max_tokens=settings.max_tokens, tools=tools)  # fmt: skip


def resumed(path: Path, stream: events.Events) -> tuple:
    """-c or -r: the transcript's path (found by resumed_workdir), its messages (checked
    before anything is sent or added), and its last compaction record (or None)."""
    conversations.check_not_in_use(path)  # first: a live agent's last line may be half written
    try:
        lines = transcript_lines(path)
    except UnicodeDecodeError as error:
        raise AgentError(f"{path} is not UTF-8 text: {error}") from None
    check_conversation(path, lines)
    try:
        history, compaction = split_transcript([entry for _, entry in lines])
    except ValueError as error:
        raise AgentError(f"{path}: {error}") from None
    stream.notice(f"continuing the conversation in {path} ({len(history)} messages)")
    return str(path), history, compaction


def stopped(session: Session | None, save: str | None, chat: bool, exit_code: int) -> int:
    """A run cut short (Ctrl-C, an error, the budget): once a reply was paid for, the totals
    and how to go on are said, as after a run that ended well; returns exit_code."""
    if session and not session.replayed and session.stopped(chat):  # replayed: cost nothing
        say_where_saved(session, save)
    return exit_code


def say_where_saved(session, save: str | None) -> None:
    """After a conversation saved in the sessions folder (not --save's file), on a terminal:
    how to go on with it."""
    transcript = session and session.transcript
    if transcript and not save and sys.stderr.isatty() and os.path.exists(transcript.path):
        name = os.path.basename(transcript.path).removesuffix(".jsonl")
        session.events.notice(f"saved as {name}: go on with -c (the latest here) or -r {name}")


def take_back(
    config: dict, action: str, resume: str | None, force: bool, workdir: str,
    stream: events.Events,
) -> int:  # fmt: skip
    """--undo or --redo (action): in -r's conversation (resume), or the latest of the
    workdir's with a turn to take back (or put back); force: overwrite files changed since.
    Exit 1 if nothing was done (the line says why)."""
    folder = sessions_folder(config)
    if resume:
        path = conversations.resolve(resume, folder)
    else:
        path = latest_to_take_back(workdir, folder, action, stream)
    store = conversations.changes_folder(path, folder)
    name = path.name.removesuffix(conversations.SUFFIX)
    if not store.is_dir():
        raise AgentError(
            f"the conversation {name} changed no file, so nothing to {action}; -r ID names "
            "another (--sessions lists them)"
        )
    with conversations.open_for_append(path):  # locked: no agent goes on with it meanwhile
        workdirs = conversations.recorded_workdirs(path)
        how = f"--{action} --force"
        done = changes.take_back(store, action, force, how, workdirs, name, stream)
    return 0 if done else 1


def latest_to_take_back(workdir: str, folder, action: str, stream: events.Events):
    """--undo or --redo without -r: the workdir's latest conversation that has a turn to
    undo (or redo), named when a later one has none (it only read files, say); else its
    latest conversation, whose store then says why there is nothing to do."""
    found = list(conversations.conversations_of(workdir, folder))
    if not found:
        raise AgentError(
            f"there is no saved conversation of the workdir {workdir} (in {folder}), so "
            f"nothing to {action}; -r ID names another (--sessions lists them)"
        )
    for path in found:
        if changes.has_turn_to(conversations.changes_folder(path, folder), action):
            if path != found[0]:
                latest, chosen = (
                    p.name.removesuffix(conversations.SUFFIX) for p in (found[0], path)
                )
                stream.notice(
                    f"the latest conversation here, {latest}, has no turn to {action}: "
                    f"{action}ing in {chosen}, the latest that has one (-r ID picks another)"
                )
            return path
    return found[0]


def list_sessions(config: dict) -> int:
    """--sessions: the recent saved conversations, on stdout."""
    report = conversations.sessions_report(sessions_folder(config))
    return display.until_the_reader_stops(print_lines, report)


def print_lines(lines) -> int:
    for line in lines:
        display.print_line(line)
    return 0


def private_paths(settings: Settings, installed: bool) -> list[str]:
    """The user's own paths that tools and sandboxed commands never reach (Workspace.private):
    the installed command's config folder (with the key), or the lesson's config.env and
    settings.json (their folder is the project's), and the sessions folder. Real paths."""
    config = os.path.dirname(settings.config_file) if installed else settings.config_file
    rules = settings_json.user_file(str(settings.config_file))  # the user's rules and hooks
    # The lesson's folder is the project's: of it, only its config.env, settings.json, mcp.json
    mcp = os.path.join(os.path.dirname(str(settings.config_file)), mcp_servers.USER_FILE)
    paths = [config, settings.sessions_folder] + ([] if installed else [rules, mcp])
    return [os.path.realpath(path) for path in paths]


def make_private_folders(settings: Settings, installed: bool) -> None:
    """The user's own folders (the installed command's config folder, the sessions folder)
    made, owner-only, before any sandboxed command runs, so that the sandbox covers each
    exactly: one not there yet could be made by a command (in the home folder, a config.env
    the next start reads), and covering the nearest folder above it may cover nothing (the
    workdir itself)."""
    config_folder = [os.path.dirname(settings.config_file)] if installed else []
    for folder in [settings.sessions_folder, *config_folder]:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError:  # then no command, run as the same user, can make it either
            pass


def settings_files(config_file) -> list[str]:
    """The user's files that give the agent its settings and powers: config.env (where the key
    goes), settings.json (rules, hooks) and mcp.json (programs started at once), side by side."""
    folder = os.path.dirname(os.path.abspath(config_file))
    return [
        str(config_file), settings_json.user_file(config_file),
        os.path.join(folder, mcp_servers.USER_FILE),
    ]  # fmt: skip


def say_settings_changed(config_file, before: list[int] | None, stream: events.Events) -> None:
    """After a run: one line if the settings file changed during it, which the next start
    then refuses to read until the user saves it again (a command may have written it)."""
    try:
        changed = settings_guard.note_settings_changed(config_file, before)
    except OSError as error:
        stream.notice(
            f"warning: {config_file} was changed while the agent ran, and that could not be "
            f"recorded ({error.strerror or error}): look at what it sets before the next start"
        )
        return
    if changed:
        stream.notice(
            f"note: {config_file} was changed while the agent ran; the next start does not read "
            "it until you look at it and save it again (or touch it)"
        )


def say_private_inside(workdir: str, private: list[str], stream: events.Events) -> None:
    """One line when the workdir holds the user's own folders (a workdir that is the home
    folder), so the user knows why the tools refuse them."""
    folder = os.path.realpath(workdir)
    held = [path for path in private if path != folder and files.inside(folder, path)]
    if held:
        names = ", ".join(visible(os.path.relpath(path, folder)) for path in held)
        stream.notice(
            f"the workdir holds the agent's own {names}: the tools refuse them, and sandboxed "
            "commands do not see them"
        )


def streaming(args: argparse.Namespace) -> bool:
    """--stream or --no-stream if given; else stream when stderr is a terminal. Not --replay."""
    if args.replay:
        return False  # a saved reply has nothing to stream
    return sys.stderr.isatty() if args.stream is None else args.stream


def task_from_stdin(
    parser: argparse.ArgumentParser, args: argparse.Namespace, chat: bool, stream: events.Events
) -> str:
    """The task when none was given: piped stdin, or on a terminal (or IDE) the demo task.
    In a chat, none yet: chat() asks for the first message as for every other."""
    if chat:
        return ""
    if sys.stdin.isatty():
        if args.continue_last or args.resume:
            parser.error("-c and -r need the next message: give it as words, or add --chat")
        stream.notice(f"no task given; running the demo task: {DEMO_TASK}")
        return DEMO_TASK
    if someone_may_type():
        stream.notice(
            "no task given, so it is read from stdin (not a terminal): type or paste it, then "
            "end it with Ctrl-D (on Windows Ctrl-Z, then Enter)"
        )
    task = sys.stdin.read().strip()
    if not task:
        parser.error("no task: give it as words, or pipe it on stdin")
    return task


def someone_may_type() -> bool:
    """Whether a person may be typing the task on stdin (not a terminal, as an IDE's console):
    nothing is there to read yet. A pipe or a file that holds the task needs no typing hint."""
    try:
        return not select.select([sys.stdin], [], [], 0.2)[0]
    except (OSError, ValueError):  # Windows: select takes sockets only
        pass
    try:
        return not stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (OSError, ValueError):  # no file at all (a test's StringIO): nobody types there
        return False


def exit_without_collecting() -> None:
    """At the program's exit, Python collects every object it ever loaded, looking for cycles
    to finalize: with openai's models loaded that takes about 0.2 s after the answer is out,
    and 3 ms even for --help. The transcript is closed and the streams flushed by then, so the
    last exit handler freezes what is left instead: the system frees the memory at once."""
    import atexit
    import gc

    atexit.register(gc.freeze)  # registered first, so it runs after every other exit handler


def never_fail_on_output() -> None:
    """Characters the console cannot encode (Chinese on cp1252) come out as "?", never as an
    error after the work is done; undecodable piped input becomes U+FFFD. A stream that can no
    longer be changed (pdb has read from stdin already) is left as it is."""
    import io

    for stream in (sys.stdin, sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except io.UnsupportedOperation:
                pass


def missing_package(error: ModuleNotFoundError) -> str:
    package = {"dotenv": "python-dotenv"}.get(str(error.name).split(".")[0], error.name)
    return (
        f"the package {package} is not installed for this Python ({sys.executable}): activate "
        "the project's virtual environment (. .venv/bin/activate, on Windows "
        ".venv\\Scripts\\activate) or install the project with pip install -e ."
    )


def report_bug(save: str | None, key: str | None, stream: events.Events) -> int:
    """Called inside an except block: an error no user can cause; keep its traceback (without
    the key: an exception may quote what the server sent)."""
    import traceback

    for line in without_key(traceback.format_exc(), key).splitlines():  # escaped: it may quote
        stream.notice(line)  # the model's words
    transcript = f"the transcript so far is in {save}" if save else "--save FILE keeps a transcript"
    stream.notice(
        "this is a bug in the agent, not something you did: please report it on the project's "
        f"issue tracker (see the README) with the traceback above; {transcript}"
    )
    return 1
