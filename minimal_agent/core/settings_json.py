"""settings.json, in Claude Code's shape: the user's, beside config.env (permission rules and
hooks), and the project's, .minimal-agent/settings.json in the workdir, which can only take
power away: its deny and ask rules apply, and the rest of it (allow rules, hooks, anything
else) is ignored with one line. --allow and --deny add rules for one run. Read once, when the
session opens, before its workspace is made with the rules (minimal_agent/tools/permissions.py) and
hooks (minimal_agent/tools/hooks.py) they hold."""

from __future__ import annotations

import json
import os
import re

from minimal_agent.common import files, settings_guard
from minimal_agent.common.errors import AgentError, UsageError
from minimal_agent.tools import hooks, permissions

FILE_NAME = "settings.json"
PROJECT_FILE = os.path.join(".minimal-agent", FILE_NAME)  # in the workdir
LIMIT = 1024 * 1024  # bytes of a settings file read: no rule list is longer


def user_file(config_file: str) -> str:
    """The user's settings.json: beside config.env."""
    return os.path.join(os.path.dirname(os.path.abspath(config_file)), FILE_NAME)


def load(fence, user_path: str, allow: list[str], deny: list[str], tools=()
         ) -> tuple[permissions.Rules, list[hooks.Hook]]:  # fmt: skip
    """The rules and hooks in force: --deny and --allow (a mistake in one: a UsageError), the
    user's settings.json (a mistake: an AgentError naming the file), and the deny and ask rules
    of the project's file, read through fence (a workspace) as read_file reads (a mistake
    there: skipped with one line, told to fence's events). A rule naming none of tools (the
    names of the lesson's TOOL_MAP and of the added tools): one line."""
    rules = permissions.Rules()
    for kind, given in (("deny", deny), ("allow", allow)):
        for text in given:
            try:
                rules.add(kind, text, f"--{kind}")
            except ValueError as error:
                raise UsageError(f"--{kind}: {error}") from None
    settings = read_user_file(user_path)
    source = f"user settings {user_path}"
    try:
        for kind, texts in rule_lists(settings).items():
            for text in texts:
                rules.add(kind, text, "user settings")
        hook_list = hooks.read(settings.get("hooks", {}), fence.events.notice)
    except ValueError as error:
        raise AgentError(f"{source}: {error}; fix it, or move the file away") from None
    load_project_file(fence, rules)
    say_unknown_tools(rules, hook_list, set(tools), fence.events.notice)
    return rules, hook_list


CLAUDE_NAMES = {"Bash": "run_shell", "Read": "read_file", "Write": "write_file",
                "Edit": "edit_file", "Grep": "search", "Glob": "list_files"}  # fmt: skip


def say_unknown_tools(rules: permissions.Rules, hook_list: list[hooks.Hook], tools: set[str],
                      notice) -> None:  # fmt: skip
    """One line (to notice) for each rule, and each name in a hook's matcher, that names none
    of tools, so one that looks right but never matches (Claude Code's Bash(...) as it is)
    does not go unnoticed."""

    def unknown(name: str) -> bool:
        return name not in tools and not name.startswith("mcp__")

    def say(what: str, name: str) -> None:
        hint = CLAUDE_NAMES.get(name)
        instead = f": write {hint} for Claude Code's {name}" if hint else ""
        notice(
            f"{what} names no tool of this agent, so it never matches{instead} (the tools: "
            f"{', '.join(sorted(tools))})"
        )

    for kind_rules in rules.by_kind.values():
        for rule in kind_rules:
            if unknown(rule.tool) and "*" not in rule.tool:
                say(f"the rule {rule.text} ({rule.source})", rule.tool)
    for hook in hook_list:
        names = hook.matcher.pattern.split("|") if hook.matcher else []
        for name in names:
            if re.fullmatch(r"\w+", name) and unknown(name):
                say(f"the {hook.event} hook's matcher {hook.matcher.pattern!r}", name)


def read_user_file(path: str) -> dict:
    """The user's settings as a dict ({} when there is no file); one a run of the agent
    changed is refused until the user saves it again (a command may have planted it)."""
    settings_guard.refuse_settings_changed_by_a_run(path)
    try:
        with open(path, "rb") as file:
            data = file.read(LIMIT + 1)
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise AgentError(f"cannot read {path}: {error.strerror or error}") from None
    return parsed(data, path, AgentError)


def parsed(data: bytes, path: str, error_type) -> dict:
    if len(data) > LIMIT:
        raise error_type(f"{path} is over {LIMIT // 1024} KiB: no settings file is that large")
    try:
        settings = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise error_type(f"{path} is not valid JSON ({error}): fix it, or move it away") from None
    if not isinstance(settings, dict):
        raise error_type(f'{path} must hold one JSON object, such as {{"permissions": ...}}')
    return settings


def rule_lists(settings: dict) -> dict[str, list]:
    """The rule lists of settings' "permissions" (ValueError when they are not lists)."""
    permissions_part = settings.get("permissions", {})
    if not isinstance(permissions_part, dict):
        raise ValueError('"permissions" must be an object: {"allow": [...], "deny": [...]}')
    lists = {}
    for kind in permissions.KINDS:
        texts = permissions_part.get(kind, [])
        if not isinstance(texts, list):
            raise ValueError(f'"permissions" "{kind}" must be a list of rules')
        lists[kind] = texts
    return lists


def load_project_file(ws, rules: permissions.Rules) -> None:
    """The project's .minimal-agent/settings.json, read through the fence as read_file reads
    (a link leading out of the workdir, a FIFO, a folder: skipped with one line); only its
    deny and ask rules are added to rules, each broken one skipped with one line."""
    name = PROJECT_FILE.replace(os.sep, "/")
    try:
        path = ws.path(PROJECT_FILE)
        with files.open_regular(ws.folder, path) as file:
            data = file.read(LIMIT + 1)
        settings = parsed(data, name, ValueError)
        lists = rule_lists(settings)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:  # PermissionError (outside) is an OSError
        why = getattr(error, "strerror", None) or error
        ws.events.notice(f"skipped the project's {name}: {why}")
        return
    ignored = [f'"{key}"' for key in settings if key != "permissions"]
    if lists["allow"]:
        ignored.insert(0, "its allow rules")
    if ignored:
        ws.events.notice(
            f"ignored in the project's {name}: {', '.join(ignored)} (a repository can only take "
            "power away: its deny and ask rules apply; allow rules and hooks belong in your own "
            "settings.json)"
        )
    for kind in ("deny", "ask"):
        for text in lists[kind]:
            try:
                rules.add(kind, text, "project settings")
            except ValueError as error:
                ws.events.notice(f"skipped in the project's {name}: {error}")
