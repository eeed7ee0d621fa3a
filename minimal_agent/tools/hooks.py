"""Hooks: the user's own commands, run before and after tool calls and when a turn ends, in
Claude Code's shape (docs/hooks.md), from the user's settings.json only (never a project's):

    {"hooks": {"PreToolUse": [{"matcher": "run_shell|write_file",
                               "hooks": [{"type": "command", "command": "...", "timeout": 30}]}],
               "PostToolUse": [...], "Stop": [...]}}

A hook gets one JSON object on stdin (session_id, transcript_path, cwd, hook_event_name,
tool_name, tool_input, and after the call tool_response). Exit 0 goes on; exit 2 on PreToolUse
blocks the call, its stderr the model's error, and on PostToolUse adds its stderr after the
result (as does Claude Code's JSON answer on stdout that blocks or denies); any other exit,
or a hook past its time-out (killed with everything it started), is one warning line and goes
on. Hooks run as the user, in the workdir, outside any sandbox, with the environment commands
get (no key); each run is an event.
"""

from __future__ import annotations

import json
import re
import time
from typing import NamedTuple

from minimal_agent.common.text import one_line
from minimal_agent.tools import processes, tool_results

EVENTS = ("PreToolUse", "PostToolUse", "Stop")
DEFAULT_TIMEOUT = 60.0  # seconds, as in Claude Code
BLOCK = 2  # the exit code that blocks a call (PreToolUse) or speaks to the model (PostToolUse)
STDERR_KEPT = 4_000  # characters of a hook's stderr kept (its two ends)
STDOUT_KEPT = 64_000  # of its stdout, read for a JSON answer


class Hook(NamedTuple):
    event: str  # PreToolUse, PostToolUse, Stop
    matcher: re.Pattern | None  # the tool names it runs for; None: all
    command: str
    timeout: float


class Hooks:
    """The hooks in force; session_id and transcript_path are what hooks are told of the
    session (its transcript: known before the workspace that holds the hooks is made)."""

    def __init__(
        self, hooks: list[Hook] | tuple = (), session_id: str = "",
        transcript_path: str | None = None,
    ) -> None:  # fmt: skip
        self.hooks = tuple(hooks)
        self.session_id = session_id
        self.transcript_path = transcript_path

    def __bool__(self) -> bool:
        return bool(self.hooks)


def read(settings: object, say) -> list[Hook]:
    """The hooks of a settings.json's "hooks" object; ValueError saying what is wrong with it.
    Events this agent does not have are skipped with one line (said by say)."""
    if not isinstance(settings, dict):
        raise ValueError('"hooks" must be an object, such as {"PreToolUse": [...]}')
    hooks = []
    for event, groups in settings.items():
        if event not in EVENTS:
            say(f"skipped the {event} hooks: this agent runs {', '.join(EVENTS)} hooks")
            continue
        if not isinstance(groups, list):
            raise ValueError(f'"hooks" "{event}" must be a list of {{"matcher", "hooks"}} objects')
        for group in groups:
            matcher = group.get("matcher", "") if isinstance(group, dict) else None
            commands = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(matcher, str) or not isinstance(commands, list):
                raise ValueError(f'each "{event}" hook needs "hooks": [...] (and a "matcher" text)')
            try:
                pattern = None if matcher in ("", "*") else re.compile(matcher)
            except re.error as error:
                raise ValueError(f"the {event} matcher {matcher!r} is no regular expression: "
                                 f"{error}") from None  # fmt: skip
            for entry in commands:
                hooks.append(Hook(event, pattern, *command_of(entry, event)))
    return hooks


def command_of(entry: object, event: str) -> tuple[str, float]:
    """A hook's command and time-out, from {"type": "command", "command": ..., "timeout": ...}."""
    if not isinstance(entry, dict) or entry.get("type") != "command":
        raise ValueError(f'each {event} hook must be {{"type": "command", "command": "..."}}')
    command, timeout = entry.get("command"), entry.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f'a {event} hook has no "command"')
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout:
        raise ValueError(f'the {event} hook {command!r} has a "timeout" that is no seconds above 0')
    return command, float(timeout)


def before(ws, tool: str, args: dict) -> None:
    """The PreToolUse hooks for the call, in order; PermissionError (the call does not run)
    when one blocks it, with its words for the model."""
    for hook in matching(ws.hooks, "PreToolUse", tool):
        said = run(ws, hook, {"tool_name": tool, "tool_input": args}, tool)
        if said is not None:
            raise PermissionError(f"a PreToolUse hook of the user blocked this call: {said}")


def after(ws, tool: str, args: dict, result: object) -> object:
    """result, with the words of each PostToolUse hook that speaks to the model added after it."""
    post = matching(ws.hooks, "PostToolUse", tool)
    if not post:
        return result
    notes, text = [], tool_results.as_text(result)
    for hook in post:
        payload = {"tool_name": tool, "tool_input": args, "tool_response": text}
        said = run(ws, hook, payload, tool)
        if said is not None:
            notes.append(f"[a PostToolUse hook of the user says: {said}]")
    return "\n".join([text, *notes]) if notes else result


def at_stop(ws) -> None:
    """The Stop hooks, when a turn ends; their exit codes only warn (see docs/hooks.md)."""
    for hook in matching(ws.hooks, "Stop", None):
        run(ws, hook, {"stop_hook_active": False}, None)


def matching(hooks: Hooks, event: str, tool: str | None) -> list[Hook]:
    return [
        hook for hook in hooks.hooks
        if hook.event == event and (hook.matcher is None or tool is None
                                    or hook.matcher.fullmatch(tool))
    ]  # fmt: skip


def run(ws, hook: Hook, fields: dict, tool: str | None) -> str | None:
    """Run one hook with its JSON on stdin. Its words for the model when it blocks the call
    (PreToolUse) or speaks after it (PostToolUse), by exit 2 (its stderr) or a JSON answer on
    stdout; else None. A warning line for any other exit and a time-out (the hook killed
    with all it started); an event for each run."""
    payload = {
        "session_id": ws.hooks.session_id,
        "transcript_path": ws.hooks.transcript_path,
        "cwd": ws.folder,
        "hook_event_name": hook.event,
        **fields,
    }
    started = time.monotonic()
    code, stdout, stderr = run_command(hook, json.dumps(payload).encode(), ws)
    said = None
    if hook.event != "Stop" and code == BLOCK:
        said = stderr.strip() or "(it gave no reason)"
    elif hook.event != "Stop" and code == 0:
        said = json_answer(stdout, hook.event)
    name = one_line(hook.command, 60)
    if code not in (0, BLOCK) or (code == BLOCK and hook.event == "Stop"):
        outcome = "warning"
        why = f"ran past its time-out ({hook.timeout:g} s) and was killed with all it started" \
            if code is None else f"exited with {code}"  # fmt: skip
        last = stderr.strip().splitlines()[-1:] or [""]
        detail = f": {one_line(last[0], 120)}" if last[0] else ""
        ws.events.notice(f"warning: the {hook.event} hook {name} {why}{detail}; going on")
    elif said is None:
        outcome = "ok"
    elif hook.event == "PreToolUse":
        outcome = "blocked"
        ws.events.notice(f"      the PreToolUse hook {name} blocked the call")
    else:
        outcome = "feedback"
        ws.events.notice(f"      the PostToolUse hook {name} speaks to the model after the result")
    ws.events.emit(
        "hook", hook_event=hook.event, tool=tool, command=hook.command, exit_code=code,
        timed_out=code is None, outcome=outcome, seconds=round(time.monotonic() - started, 3),
    )  # fmt: skip
    return said


def json_answer(stdout: str, event: str) -> str | None:
    """The reason in Claude Code's JSON answer on stdout, where it takes power away:
    {"decision": "block", "reason": ...}, or before a call {"hookSpecificOutput":
    {"permissionDecision": "deny", "permissionDecisionReason": ...}}; else None (an "allow"
    or "ask" answer is not followed: the rules decide that)."""
    try:
        answer = json.loads(stdout)
    except ValueError:
        return None
    if not isinstance(answer, dict):
        return None
    specific = answer.get("hookSpecificOutput")
    if event == "PreToolUse" and isinstance(specific, dict):
        if specific.get("permissionDecision") == "deny":
            return str(specific.get("permissionDecisionReason") or "(it gave no reason)")
    if answer.get("decision") == "block":
        return str(answer.get("reason") or "(it gave no reason)")
    return None


def run_command(hook: Hook, stdin: bytes, ws) -> tuple[int | None, str, str]:
    """The hook's command by the shell in ws.folder, in a process group of its own, with the
    environment commands get outside the sandbox; killed with everything it started at its
    time-out, and anything it left running killed when it exits. Its exit code (None: timed
    out), stdout and stderr (each's two ends, when long)."""
    import subprocess
    import threading

    env = processes.command_environment(ws, sandboxed=False)
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    with processes.signals_held() as let_through:
        before = processes.known_descendants() if processes.ON_LINUX else set()
        if processes.ON_WINDOWS:
            flags = subprocess.CREATE_NEW_PROCESS_GROUP
            proc = subprocess.Popen(hook.command, shell=True, cwd=ws.folder, env=env,
                                    creationflags=flags, **pipes)  # fmt: skip
        else:
            if processes.ON_LINUX:
                processes.become_subreaper()
            proc = subprocess.Popen(hook.command, shell=True, cwd=ws.folder, env=env,
                                    start_new_session=True, **pipes)  # fmt: skip
        stdout, stderr = processes.Output(STDOUT_KEPT // 2), processes.Output(STDERR_KEPT // 2)
        threads = [
            threading.Thread(target=feed, args=(proc.stdin, stdin), daemon=True),
            threading.Thread(target=stdout.read, args=(proc.stdout,), daemon=True),
            threading.Thread(target=stderr.read, args=(proc.stderr,), daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            with let_through():
                proc.wait(hook.timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
        finally:
            processes.kill_everything(proc.pid, before)  # at the time-out, and what it left
            proc.wait()
            for thread in threads:
                thread.join(1)  # nothing holds the pipes any more
    return code, stdout.text(), stderr.text()


def feed(pipe, data: bytes) -> None:
    """Write the hook's stdin and close it; a hook that does not read it is no error."""
    try:
        pipe.write(data)
        pipe.close()
    except OSError:  # BrokenPipeError: it exited without reading
        pass
