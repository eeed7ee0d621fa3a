"""The command line: `python agent.py [options] [TASK ...]`. Reads the options and settings,
checks everything a user can get wrong before the first request (each mistake ends in one
line that says what to do), picks the conversation to start or resume, and maps how the run
ended to the exit code."""

from __future__ import annotations

import argparse
import functools
import os
import sys

from minimal_agent import (
    added_tools,
    changes,
    completions,
    cost,
    daily_tools,
    display,
    events,
    files,
    models,
    processes,
    sessions,
    settings_json,
    wire,
    wire_page,
)
from minimal_agent.context_window import Window, compact_at_setting, split_transcript
from minimal_agent.errors import AgentError, UsageError, describe_api_error, without_key
from minimal_agent.prompt import Prompt
from minimal_agent.replay import ReplayClient
from minimal_agent.session import Session
from minimal_agent.transcripts import check_conversation, show_transcript, transcript_lines
from minimal_agent.window_probe import find_window, is_deepseek

VERSION = "0.2.0"  # pyproject.toml's version
PYTHON = "python" if sys.platform == "win32" else "python3"  # the interpreter's name on PATH
DEMO_TASK = (
    "Create a file tool_demo.py containing print(17 * 23), read it back, run it with "
    f"{PYTHON}, and tell me the real output."
)
EXIT_CODES = {"finished": 0, "max_steps": 3, "budget": 3, "incomplete": 4}


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
    if installed:
        lesson.model_client.CONFIG_FILE = str(sessions.config_file())
    parser = build_parser(lesson, installed)
    args = parser.parse_args(recovered(sys.argv[1:] if argv is None else argv))
    args.workdir_given = args.workdir is not None  # -c and -r go on in their own otherwise
    args.workdir = args.workdir or default_workdir(lesson, installed)
    if args.show or args.html:
        return show_saved(parser, args, lesson.model_client)
    processes.exit_on_termination()
    # What happens, told to the readers --json and --json-events ask for (on stdout).
    stream, outcome = events.for_options(args.json, args.json_events, sys.stdout)
    code = 1
    try:
        with events.answers_on_stderr(args.json or args.json_events):
            code = run_session(lesson, parser, args, installed, stream, outcome)
    except SystemExit as end:  # a usage error, or a termination signal's handler
        code = end.code if isinstance(end.code, int) else 1
        outcome.error = outcome.error or parser.mistake
        raise
    finally:
        stream.emit("end", **events.end_record(outcome, code))
    return code


def run_session(
    lesson, parser, args: argparse.Namespace, installed: bool, stream: events.Events,
    outcome: events.Outcome,
) -> int:  # fmt: skip
    """The run main() starts, from the settings to the exit code; outcome keeps its session
    and result, and stream gets its events, the errors' lines among them."""
    agent, model_client = lesson, lesson.model_client
    config: dict = {}  # for the error hints, whatever fails first
    session = None
    try:
        config = model_client.load_config()
        if args.sessions:
            return until_the_reader_stops(list_sessions, config)
        agent.check_tools()
        check_options(parser, args, model_client.odd_character)
        if args.undo or args.redo:
            return take_back(args, config)
        moved = resumed_workdir(args, config, args.workdir_given)
        check_paths(args)
        model = args.model or config["model"]
        check_budget(parser, args, config, model)
        if args.replay:
            client = ReplayClient(args.replay, notify=display.say)
            source = f"replaying {args.replay} (no model is asked; tools run for real)"
        else:
            client = model_client.create_client(config, timeout=args.request_timeout)
            check_retired(model, config)
            source = f"model {model} at {config['base_url']}"
        pass_env = processes.pass_env_names(config["api_key"], config["LLM_PASS_ENV"])
        limits = processes.sandbox_limits(config["LLM_SANDBOX_LIMITS"])
        private = private_paths(str(model_client.CONFIG_FILE), installed, config)
        if args.sandbox:
            processes.check_sandbox(args.workdir, limits, private)
        sandboxed = "; shell commands run in a sandbox" if args.sandbox else ""
        own = " (the conversation's own)" if args.transcript and not args.workdir_given else ""
        display.say(f"{source}; workdir {args.workdir}{own}{sandboxed}")
        if moved:
            display.say(moved)
        say_private_inside(args.workdir, private)
        args.daily_tools = daily_tools_on(config, installed)
        session = outcome.session = open_session(
            agent, args, config, model, pass_env, private, limits, stream
        )
        task = " ".join(args.task).strip() or (args.replay and client.task())
        # The installed command alone on a terminal opens a session; the lesson runs its demo.
        args.chat = args.chat or (installed and not task and sys.stdin.isatty())
        task = task or task_from_stdin(parser, args)  # with --chat, chat() asks for it
        result = outcome.result = (agent.chat if args.chat else agent.run)(
            task, client, model=model, max_steps=args.max_steps, session=session
        )
    except KeyboardInterrupt:
        display.say("interrupted")
        return stopped(session, args, 130)
    except AgentError as error:  # it may quote what the server sent: never with the key
        failed(stream, without_key(str(error), config.get("api_key")))
        return stopped(session, args, error_exit_code(error))
    except OSError as error:
        failed(stream, without_key(str(error), config.get("api_key")))
        return stopped(session, args, 1)
    except ModuleNotFoundError as error:  # started with a Python that lacks the packages
        failed(stream, missing_package(error))
        return 1
    except Exception as error:
        if type(error).__module__ == "bdb":  # pdb's q while stopped in the agent: no bug, quit
            raise
        save = session and session.transcript and session.transcript.path
        context = {"model": args.model or config.get("model"), "save": save}
        context["sent"] = session.limits if session else {}
        message = describe_api_error(error, config, timeout=args.request_timeout, **context)
        if message is None:
            stream.emit("error", error=f"a bug in the agent: {type(error).__name__}")
            return report_bug(save, config.get("api_key"))
        failed(stream, message)
        return stopped(session, args, 1)
    finally:
        if session:
            session.close()
    say_where_saved(session, args)
    return EXIT_CODES[result["stop_reason"]]


def failed(stream: events.Events, message: str) -> None:
    """An error's one line on stderr ("stopped: ..." as it is), and for the events' readers."""
    display.say(message if message.startswith("stopped:") else f"error: {message}")
    stream.emit("error", error=message)


def error_exit_code(error: AgentError) -> int:
    """The exit code of a run an AgentError ended: the budget's, a usage error's 2, else 1."""
    if type(error).__name__ == "BudgetReached":
        return EXIT_CODES["budget"]
    return 2 if isinstance(error, UsageError) else 1


def build_parser(lesson, installed: bool = False) -> argparse.ArgumentParser:
    """The options, their defaults taken from the lesson's settings (see main())."""
    config_file = lesson.model_client.CONFIG_FILE if installed else "config.env beside agent.py"
    parser = Parser(
        prog="minimal-agent" if installed else "agent.py",
        usage="%(prog)s [options] [TASK ...]",  # the options are listed below it, once
        description="A minimal LLM agent: the model calls read_file, write_file and run_shell "
        "in a workdir until the task is done. Without a TASK it reads one from piped stdin, "
        "or on a terminal runs the lesson's demo task (minimal-agent: opens a chat). Every "
        "conversation is saved, so it can be resumed (-c, -r, --sessions).",
        epilog="Exit codes: 0 finished, 1 error, 2 bad usage, 3 step limit or budget reached, "
        f"4 the answer is cut off or empty, 130 interrupted. Settings ({config_file}, or the "
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
        "(-r ID: of that one); again: one more turn back",
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


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace, odd_character) -> None:
    """Options that cannot go together, a file given where none is taken, or a --model name
    with an invisible character (odd_character: model_client's check of settings): exit 2."""
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
    if args.replay and resuming:
        parser.error("--replay starts its own conversation: drop -c/-r")
    if args.undo and args.redo:
        parser.error("--undo and --redo: give one of them")
    taking_back = "--undo" if args.undo else "--redo" if args.redo else None
    if taking_back and (args.task or args.chat or args.save or args.no_save or args.replay):
        parser.error(
            f"{taking_back} takes no task and starts no conversation: give it alone "
            "(with -r ID for a conversation other than the workdir's latest)"
        )
    if args.wire and not args.show:
        parser.error("--wire goes with --show ID_OR_FILE")
    if args.force and not taking_back:
        parser.error("--force goes with --undo or --redo")
    if args.json and args.json_events:
        parser.error("--json and --json-events both print on stdout: give one of them")
    if (args.json or args.json_events) and taking_back:
        parser.error(f"{taking_back} starts no run: drop --json and --json-events")
    if args.task and not " ".join(args.task).strip():
        parser.error("the task is only spaces: give it in words, or pipe it on stdin")


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


def no_price(model: str, budget: str) -> str:
    return (
        f"{budget} needs the model's price, and {model} has none known: set LLM_PRICE_INPUT and "
        "LLM_PRICE_OUTPUT (per million tokens) for it"
    )


def looks_like_a_file(word: str) -> bool:
    """Whether the first word after -c names a transcript (the old `--continue FILE` syntax): a
    file that exists, or one word ending in .jsonl (a typo of one would else become the task)."""
    return os.path.isfile(word) or (word.endswith(".jsonl") and len(word.split()) == 1)


def default_workdir(lesson, installed: bool) -> str:
    """Where the tools act without --workdir: the installed command's current folder, the
    lesson's playground for python agent.py."""
    return os.getcwd() if installed else lesson.WORKDIR


def resumed_workdir(args: argparse.Namespace, config: dict, given: bool) -> str | None:
    """-c or -r: the conversation's transcript found (args.transcript; None for a new one),
    and the workdir it goes on in: the one it recorded last, unless --workdir names another
    (given); then the line that says its history was about the other folder is returned."""
    args.transcript = None
    if not (args.continue_last or args.resume):
        return None
    folder = sessions_folder(config)
    if args.resume:
        args.transcript = sessions.resolve(args.resume, folder)
    else:
        args.transcript = sessions.latest_for(args.workdir, folder)
        if args.transcript is None:
            raise AgentError(
                f"there is no saved conversation of the workdir {args.workdir} (in {folder}) to "
                "continue: start one with a task; --sessions lists the saved ones"
            )
    recorded = sessions.recorded_workdirs(args.transcript)
    if not recorded:  # an older transcript: the workdir as given
        return None
    if not given:
        args.workdir = recorded[-1]
        return None
    if os.path.normcase(os.path.realpath(args.workdir)) == os.path.normcase(recorded[-1]):
        return None
    return (
        f"note: this conversation's history is about the workdir {recorded[-1]}; its tools "
        f"now act in {args.workdir} (--workdir)"
    )


def check_paths(args: argparse.Namespace) -> None:
    """Refuse a --workdir or --save that cannot work, naming the option, before any request.
    A --workdir given that does not exist is a mistyped one (exit 2); only a default is made."""
    workdir, save = args.workdir, args.save
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise AgentError(f"--workdir {workdir} is a file, not a folder: give a folder")
    if not os.path.exists(workdir) and args.workdir_given:
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
    sessions.check_new_save(save)


def open_session(
    agent,
    args: argparse.Namespace,
    config: dict,
    model: str,
    pass_env: frozenset[str],
    private: list[str],
    limits: dict,
    stream: events.Events | None = None,
) -> Session:
    """The session for this start: a new conversation saved in the sessions folder (or
    --save's file, or nowhere), or a saved one to resume; prices, budget and window set.
    agent is the lesson's module (see main()); pass_env, what commands get anyway; private,
    the user's own paths out of the tools' reach; limits, the sandbox's; stream, where the
    session's events go."""
    try:
        prices = cost.prices_for(model, config)
    except cost.PriceError as error:
        raise AgentError(str(error)) from None
    max_cost = args.max_cost or money_setting(config, "LLM_MAX_COST")
    if max_cost and not prices:
        raise AgentError(no_price(model, "--max-cost" if args.max_cost else "LLM_MAX_COST"))
    workspace = agent.Workspace(args.workdir, args.timeout, args.yes, args.sandbox)
    workspace.key, workspace.pass_env = config["api_key"], pass_env  # kept from commands
    workspace.private, workspace.sandbox_limits = private, limits  # before AGENTS.md is read
    workspace.confirm_writes = args.confirm_writes or yes_setting(config, "LLM_CONFIRM_WRITES")
    if args.daily_tools:
        daily_tools.add_to(workspace, agent.TOOL_MAP)
    user_settings = settings_json.user_file(str(agent.model_client.CONFIG_FILE))
    settings_json.load(workspace, user_settings, args.allow, args.deny, agent.TOOL_MAP)
    history, compaction, save = None, None, args.save
    if args.continue_last or args.resume:
        save, history, compaction = resumed(args)
    elif not (args.no_save or args.replay or save):
        save = sessions.new_transcript(sessions_folder(config))
    max_tokens = args.max_tokens or max_tokens_setting(config)
    typed = None if args.no_save else sessions.history_file(sessions_folder(config))
    server = None if args.replay else config
    tools = added_tools.offered(agent.TOOLS, workspace.added_tools)
    window = context_window(config, model, max_tokens, server, tools)
    if compaction:
        try:
            window.restore(compaction, history)
        except ValueError as error:
            raise AgentError(f"{save}: {error}") from None
    return Session(
        agent.SYSTEM_PROMPT,
        workspace,
        model=model,
        history=history,
        save=save,
        sessions_folder=sessions_folder(config),
        stream=streaming(args),
        raw=args.raw,
        max_tokens=max_tokens,
        thinking=args.thinking or choice_setting(config, "LLM_THINKING", ("on", "off")),
        effort=args.effort or choice_setting(config, "LLM_EFFORT", completions.EFFORTS),
        prices=prices,
        max_cost=max_cost,
        window=window,
        describe=functools.partial(
            describe_api_error, config=config, model=model, timeout=args.request_timeout, save=save
        ),
        events=stream,
        prompt=Prompt(typed, config["api_key"]),  # --no-save: no history of typed lines
        replayed=bool(args.replay),
    )


def context_window(
    config: dict, model: str, max_tokens: int | None, server: dict | None, tools: list[dict]
) -> Window:
    """The context window's keeper: its size from LLM_CONTEXT_TOKENS, else asked from the
    server (in the background; not for --replay, which has none), else known models."""
    settings = {"context_tokens": config.get("LLM_CONTEXT_TOKENS"), "model": model}
    if server:
        settings.update(base_url=server["base_url"], api_key=server["api_key"])
    try:
        size = find_window(settings)
        compact_at = compact_at_setting(config.get("LLM_COMPACT_AT"))
    except ValueError as error:
        raise AgentError(str(error)) from None
    return Window(size, compact_at=compact_at, max_tokens=max_tokens, tools=tools)


def resumed(args: argparse.Namespace) -> tuple:
    """-c or -r: the transcript's path, its messages (checked before anything is sent or
    added), and its last compaction record (or None)."""
    path = args.transcript  # found by resumed_workdir
    sessions.check_not_in_use(path)  # first: a live agent's last line may be half written
    try:
        lines = transcript_lines(path)
    except UnicodeDecodeError as error:
        raise AgentError(f"{path} is not UTF-8 text: {error}") from None
    check_conversation(path, lines)
    try:
        history, compaction = split_transcript([entry for _, entry in lines])
    except ValueError as error:
        raise AgentError(f"{path}: {error}") from None
    display.say(f"continuing the conversation in {path} ({len(history)} messages)")
    return str(path), history, compaction


def stopped(session: Session | None, args: argparse.Namespace, exit_code: int) -> int:
    """A run cut short (Ctrl-C, an error, the budget): once a reply was paid for, the totals
    and how to go on are said, as after a run that ended well; returns exit_code."""
    if session and not args.replay and session.stopped(args.chat):  # replies replayed cost nothing
        say_where_saved(session, args)
    return exit_code


def say_where_saved(session, args: argparse.Namespace) -> None:
    """After a conversation saved in the sessions folder, on a terminal: how to go on with it."""
    transcript = session and session.transcript
    if transcript and not args.save and sys.stderr.isatty() and os.path.exists(transcript.path):
        name = os.path.basename(transcript.path).removesuffix(".jsonl")
        display.say(f"saved as {name}: go on with -c (the latest here) or -r {name}")


def take_back(args: argparse.Namespace, config: dict) -> int:
    """--undo or --redo: in the workdir's latest conversation, or -r's; exit 1 if nothing
    was done (the line says why)."""
    folder = sessions_folder(config)
    action = "undo" if args.undo else "redo"
    if args.resume:
        path = sessions.resolve(args.resume, folder)
    else:
        path = sessions.latest_for(args.workdir, folder)
        if path is None:
            raise AgentError(
                f"there is no saved conversation of the workdir {args.workdir} (in {folder}), "
                f"so nothing to {action}; -r ID names another (--sessions lists them)"
            )
    store = sessions.changes_folder(path, folder)
    name = path.name.removesuffix(sessions.SUFFIX)
    if not store.is_dir():
        raise AgentError(
            f"the conversation {name} changed no file, so nothing to {action}; -r ID names "
            "another (--sessions lists them)"
        )
    with sessions.open_for_append(path):  # locked: no agent goes on with it meanwhile
        workdirs = sessions.recorded_workdirs(path)
        how = f"--{action} --force"
        done = changes.take_back(store, action, args.force, how, workdirs, name)
    return 0 if done else 1


def show_saved(parser: argparse.ArgumentParser, args: argparse.Namespace, model_client) -> int:
    """--show ID_OR_FILE (with --wire: its requests and responses) and --html ID_OR_FILE
    [OUT.html]: the conversation found as -r finds it, shown; exit 1 with one line if it
    cannot be."""
    if args.show and args.html:
        parser.error("--show prints on the terminal and --html writes a page: give one of them")
    if args.html and len(args.html) > 2:
        parser.error(
            "--html takes a conversation's ID (or transcript file) and, after it, OUT.html"
        )
    try:
        folder = sessions_folder(model_client.load_config())
        option = "--show" if args.show else "--html"
        path = sessions.resolve(args.show or args.html[0], folder, option)
        if args.html:
            out = args.html[1] if len(args.html) > 1 else None
            page = wire_page.write_page(path, out, folder)
            display.say(f"wrote {page}: open it in a browser")
            return 0
        if args.wire:
            return until_the_reader_stops(wire.show_wire, path, folder)
    except AgentError as error:
        display.say(f"error: {error}")
        return 1
    return until_the_reader_stops(show_transcript, str(path))


def yes_setting(config: dict, name: str) -> bool:
    """A setting that is on or off: 1, true, yes, on; or 0, false, no, off, unset."""
    text = (config.get(name) or "").lower()
    if text not in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
        raise AgentError(f"{name} must be 1 (on) or 0 (off), not {text!r}")
    return text in ("1", "true", "yes", "on")


def daily_tools_on(config: dict, installed: bool) -> bool:
    """Whether the session adds the daily tools (edit_file, search, list_files, read_file's
    offset and limit): LLM_DAILY_TOOLS if set, else on for the installed command only."""
    if not config.get("LLM_DAILY_TOOLS"):
        return installed
    return yes_setting(config, "LLM_DAILY_TOOLS")


def list_sessions(config: dict) -> int:
    for line in sessions.sessions_report(sessions_folder(config)):
        print(line)
    return 0


def until_the_reader_stops(show, *args) -> int:
    """show(*args), printing on stdout; a reader that has had enough (`--sessions | head -1`)
    ends it quietly, with exit code 0, as it ends `ls | head -1`."""
    try:
        code = show(*args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # Else Python's exit flushes the rest into the closed pipe again, and says so.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def private_paths(config_file: str, installed: bool, settings: dict) -> list[str]:
    """The user's own paths that tools and sandboxed commands never reach (Workspace.private):
    the installed command's config folder (with the key), or the lesson's config.env and
    settings.json (their folder is the project's), and the sessions folder. Real paths."""
    config = os.path.dirname(config_file) if installed else config_file
    rules = settings_json.user_file(config_file)  # beside config.env: the user's rules and hooks
    paths = [config, sessions_folder(settings)] + ([] if installed else [rules])
    return [os.path.realpath(path) for path in paths]


def say_private_inside(workdir: str, private: list[str]) -> None:
    """One line when the workdir holds the user's own folders (a workdir that is the home
    folder), so the user knows why the tools refuse them."""
    folder = os.path.realpath(workdir)
    held = [path for path in private if path != folder and files.inside(folder, path)]
    if held:
        names = ", ".join(display.visible(os.path.relpath(path, folder)) for path in held)
        display.say(
            f"the workdir holds the agent's own {names}: the tools refuse them, and sandboxed "
            "commands do not see them"
        )


def sessions_folder(config: dict):
    """Where conversations are saved: LLM_SESSIONS_DIR (config.env or the environment), else
    the platform's usual place for the user's state."""
    chosen = config.get("LLM_SESSIONS_DIR")
    return sessions.sessions_dir({**os.environ, **({"LLM_SESSIONS_DIR": chosen} if chosen else {})})


def money_setting(config: dict, name: str) -> float | None:
    """A setting that is an amount of money above 0, or None when it is not set."""
    text = config.get(name) or ""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0
    if not 0 < value < float("inf"):
        raise AgentError(f"{name} must be an amount above 0, such as 0.50, not {text!r}")
    return value


def streaming(args: argparse.Namespace) -> bool:
    """--stream or --no-stream if given; else stream when stderr is a terminal. Not --replay."""
    if args.replay:
        return False  # a saved reply has nothing to stream
    return sys.stderr.isatty() if args.stream is None else args.stream


def choice_setting(config: dict, name: str, choices: tuple[str, ...]) -> str | None:
    """A setting that is one of choices (case ignored), or None when it is not set."""
    text = (config.get(name) or "").lower()
    if text and text not in choices:
        raise AgentError(f"{name} must be {' or '.join(choices)}, not {config[name]!r}")
    return text or None


def max_tokens_setting(config: dict) -> int | None:
    """LLM_MAX_TOKENS as a number, or None when it is not set."""
    text = config["max_tokens"]
    if text and not (text.isdigit() and int(text) > 0):
        raise AgentError(f"LLM_MAX_TOKENS must be a whole number above 0, not {text!r}")
    return int(text) if text else None


def task_from_stdin(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The task when none was given: piped stdin, or on a terminal (or IDE) the demo task.
    With --chat, none yet: chat() asks for the first message as for every other."""
    if args.chat:
        return ""
    if sys.stdin.isatty():
        if args.continue_last or args.resume:
            parser.error("-c and -r need the next message: give it as words, or add --chat")
        display.say(f"no task given; running the demo task: {DEMO_TASK}")
        return DEMO_TASK
    display.say(
        "no task given, so it is read from stdin (not a terminal): type or paste it, then end "
        "it with Ctrl-D (on Windows Ctrl-Z, then Enter)"
    )
    task = sys.stdin.read().strip()
    if not task:
        parser.error("no task: give it as words, or pipe it on stdin")
    return task


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


def report_bug(save: str | None, key: str | None) -> int:
    """Called inside an except block: an error no user can cause; keep its traceback (without
    the key: an exception may quote what the server sent)."""
    import traceback

    for line in without_key(traceback.format_exc(), key).splitlines():  # escaped: it may quote
        display.say(line)  # the model's words
    transcript = f"the transcript so far is in {save}" if save else "--save FILE keeps a transcript"
    display.say(
        "this is a bug in the agent, not something you did: please report it on the project's "
        f"issue tracker (see the README) with the traceback above; {transcript}"
    )
    return 1
