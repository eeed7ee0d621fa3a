"""Permission rules: what runs without asking, what always asks, and what never runs, in Claude
Code's syntax with this agent's tool names (docs/permissions.md). The rules come from the
user's settings.json, --allow and --deny, and (deny and ask only) the project's
.minimal-agent/settings.json (minimal_agent/core/settings_json.py reads them).

    run_shell                 every command
    run_shell(git status)     exactly that command
    run_shell(git diff:*)     the command, or it with more words
    run_shell(npm run *)      a wildcard: * stands for any text (a trailing " *" may be nothing)
    write_file(src/**)        a path, in gitignore's glob syntax (a name without / at any depth)
    mcp__git                  every tool of the MCP server git; mcp__git__git_status one of them

Deny rules are looked at first, then ask, then allow: the first match decides, and --yes never
overrides a deny or an ask. A command is cut into its simple commands (at ; & && || | |&): a
deny or ask rule that matches any of them decides, and an allow rule must match every one.
A command that cannot be cut with certainty (substitutions, redirections, subshells, a newline,
a comment) is never allowed by a rule: it asks. approve() is the one place where a call that
needs the user's say is decided (run_shell's, every MCP tool's); refuse_denied() holds every
other call to the deny rules.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import sys
from typing import NamedTuple

KINDS = ("deny", "ask", "allow")  # the order the rules are looked at in
RULE = re.compile(r"([A-Za-z0-9_*-]+)(?:\((.*)\))?", re.DOTALL)
SEPARATORS = {";", "&", "&&", "||", "|", "|&"}  # between simple commands
PUNCTUATION = set("();<>|&")  # shlex's punctuation_chars: a token of them only is an operator
# What sh reads in ways shlex does not, so that a command holding it cannot be cut with
# certainty: substitutions ($(...), backticks, <(...), >(...)), $'...' and $"..." quoting,
# and control characters (a newline among them).
UNCERTAIN = re.compile(r"\$\(|`|<\(|>\(|\$'|\$\"|[\x00-\x08\x0a-\x1f\x7f]")
WINDOWS_OPERATORS = set('&|<>^%!()"\n\r')  # cmd.exe's: a command with any of them asks
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
WRAPPERS = {"sudo", "env", "command", "exec", "nice", "nohup", "time", "xargs", "builtin"}


class Rule(NamedTuple):
    text: str  # as written
    tool: str  # a tool's name, mcp__SERVER, or a name with * in it
    content: str | None  # what is inside the parentheses; None: every use of the tool
    source: str  # where it was written: "user settings", "--allow", "project settings", ...


def parse(text: object, source: str) -> Rule:
    """A rule as written (such as run_shell(git diff:*)), or ValueError saying what is wrong."""
    match = RULE.fullmatch(text) if isinstance(text, str) else None
    if not match or match.group(2) == "":
        raise ValueError(
            f"the rule {text!r} ({source}) is not TOOL or TOOL(what), such as run_shell, "
            "run_shell(git diff:*), read_file(.env) or mcp__git"
        )
    content = match.group(2)
    if content is not None and match.group(1) == "run_shell":
        try:
            shlex.split(content.removesuffix(":*"))
        except ValueError as error:
            raise ValueError(f"the rule {text!r} ({source}): {error}") from None
    return Rule(text, match.group(1), content, source)


class Rules:
    """The rules in force, by kind, each in the order it was read."""

    def __init__(self) -> None:
        self.by_kind: dict[str, list[Rule]] = {kind: [] for kind in KINDS}

    def add(self, kind: str, text: object, source: str) -> None:
        self.by_kind[kind].append(parse(text, source))

    def __bool__(self) -> bool:
        return any(self.by_kind.values())


def approve(ws, tool: str, args: dict, shown: str) -> None:
    """Return when the call may run; else PermissionError with a message for the model. The
    deny rules, then the ask rules, then the allow rules decide; where none does, --yes (or
    "a" earlier) lets it run, else the user is asked on the terminal with shown (the command,
    or the MCP tool and its arguments)."""
    refuse_denied(ws, tool, args)
    asking = first_match(ws.rules, "ask", tool, args, ws.folder)
    if asking:
        tell(ws, tool, "ask", [asking])
    else:
        allowing = allowed_by(ws.rules, tool, args, ws.folder)
        if allowing:
            tell(ws, tool, "allow", allowing)
            return
    if asking is None and ws.approve_all:  # --yes
        return
    sandboxed = ws.sandbox and tool == "run_shell"  # an MCP server of the user's runs outside
    if not ws.user.approves_command(shown, sandboxed, asking and asking.text):
        what = "command" if tool == "run_shell" else "call"
        raise PermissionError(f"the user did not approve this {what}, so it was not run")


def refuse_denied(ws, tool: str, args: dict) -> None:
    """PermissionError naming the deny rule that matches this call, if one does; for every
    tool call, before it runs (agent.execute_tool_call)."""
    rule = first_match(ws.rules, "deny", tool, args, ws.folder)
    if rule:
        tell(ws, tool, "deny", [rule])
        raise PermissionError(
            f"denied by the rule {rule.text} ({rule.source}), so it was not run: do not try it "
            "another way; ask the user if it is needed"
        )


def offered(ws, tool: str) -> bool:
    """False when a deny rule names the tool whole (run_shell, mcp__git, mcp__git__git_status):
    such a tool is not offered to the model at all."""
    return not any(rule.content is None and names(rule, tool) for rule in ws.rules.by_kind["deny"])


def tell(ws, tool: str, decision: str, rules: list[Rule]) -> None:
    """A rule's decision: on the step line, and as an event (into the transcript and
    --json-events)."""
    said = ", ".join(f"{rule.text} ({rule.source})" for rule in rules)
    if decision == "ask":
        ws.events.notice(f"      the rule {said} asks")
    else:
        verb = "denied" if decision == "deny" else "allowed"
        ws.events.notice(f"      {verb} by the rule {said}")
    ws.events.emit(
        "permission", tool=tool, decision=decision, rules=[rule.text for rule in rules],
        sources=[rule.source for rule in rules],
    )  # fmt: skip


def first_match(rules: Rules, kind: str, tool: str, args: dict, workdir: str) -> Rule | None:
    """The first deny (or ask) rule that matches the call: one that names the tool and, if it
    has parentheses, matches any simple command of run_shell's command, or the call's path."""
    for rule in rules.by_kind[kind]:
        if not names(rule, tool):
            continue
        if rule.content is None or any(
            content_matches(rule, subject) for subject in subjects(tool, args, workdir)
        ):
            return rule
    return None


def allowed_by(rules: Rules, tool: str, args: dict, workdir: str) -> list[Rule]:
    """The allow rules that together allow the call (each simple command of a shell command
    allowed by one), or [] when they do not."""
    candidates = [rule for rule in rules.by_kind["allow"] if names(rule, tool)]
    whole = [rule for rule in candidates if rule.content is None]
    if whole or not candidates:
        return whole[:1]
    if tool == "run_shell":
        pieces = simple_commands(str(args.get("command", "")))
        if not pieces:
            return []  # not cut with certainty: it asks
        used = []
        for piece in pieces:
            rule = next((r for r in candidates if command_matches(r.content, piece)), None)
            if rule is None:
                return []
            used += [rule] if rule not in used else []
        return used
    found = subjects(tool, args, workdir)  # a path: as given and as it really is, both
    for rule in candidates:
        if found and all(content_matches(rule, subject) for subject in found):
            return [rule]
    return []


def names(rule: Rule, tool: str) -> bool:
    """Whether the rule is about the tool: its name, its MCP server's (mcp__git for
    mcp__git__git_status), or a name with * matching it."""
    if rule.tool == tool:
        return True
    server = rule.tool.startswith("mcp__") and rule.tool.count("__") == 1
    if server and tool.startswith(rule.tool + "__"):
        return True
    return "*" in rule.tool and fnmatch.fnmatchcase(tool, rule.tool)


def subjects(tool: str, args: dict, workdir: str) -> list:
    """What a deny or ask rule's parentheses are matched against: each simple command of
    run_shell's command (as tokens), else the call's path as given and as it really is."""
    if tool == "run_shell":
        command = str(args.get("command", ""))
        return (simple_commands(command) or []) + loose_commands(command)
    path = args.get("path")
    if not isinstance(path, str):
        return []
    return [("path", relative) for relative in workdir_paths(path, workdir)]


def content_matches(rule: Rule, subject) -> bool:
    if isinstance(subject, tuple):  # ("path", a path relative to the workdir)
        return rule.tool != "run_shell" and bool(glob_pattern(rule.content).fullmatch(subject[1]))
    return rule.tool == "run_shell" and command_matches(rule.content, subject)


def command_matches(content: str, tokens: list[str]) -> bool:
    """Whether a run_shell rule's content matches a simple command (its words): exactly,
    as a prefix (git diff:*, at a word's end), or as a wildcard (npm run *)."""
    if content.endswith(":*"):
        prefix = shlex.split(content[:-2])
        return tokens[: len(prefix)] == prefix
    if "*" not in content:
        return tokens == shlex.split(content)
    text = " ".join(tokens)
    pattern = " ".join(shlex.split(content))
    optional_tail = pattern.endswith(" *")
    body = pattern[:-2] if optional_tail else pattern
    regex = ".*".join(re.escape(part) for part in body.split("*"))
    return bool(re.fullmatch(regex + ("(?: .*)?" if optional_tail else ""), text, re.DOTALL))


def simple_commands(command: str) -> list[list[str]] | None:
    """The simple commands of a shell command, each as its words (quotes removed, as the
    program gets them), cut at ; & && || | |&; None when it cannot be cut with certainty:
    a substitution, a redirection, a subshell or group in parentheses, a comment, a control
    character or newline, unbalanced quotes, or nothing at all."""
    command = command.strip(" \t\n")  # a newline at either end separates nothing
    if sys.platform == "win32":  # cmd.exe's syntax: only a plain command is certain
        words = command.split()
        return None if WINDOWS_OPERATORS & set(command) or not words else [words]
    if UNCERTAIN.search(command):
        return None
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote
        return None
    pieces, current = [], []
    for token in tokens:
        if token and set(token) <= PUNCTUATION:
            if token not in SEPARATORS:
                return None  # a redirection, ( ), ;; ...
            pieces.append(current)
            current = []
        elif token.startswith("#"):
            return None  # a comment: sh and shlex may disagree on where a word starts
        else:
            current.append(token)
    pieces = [piece for piece in pieces + [current] if piece]
    return pieces or None


def loose_commands(command: str) -> list[list[str]]:
    """For deny and ask rules, the simple commands a command may run, found boldly: quotes
    dropped and every operator, substitution and bracket taken as a cut, leading VAR=value
    words and wrappers (sudo, env, xargs, ...) skipped. It may find more than sh runs; a
    rule against a program is a fence against the model's habits, never a sandbox."""
    flat = re.sub(r"\$\(|[`'\"(){}\n\r;&|<>]", " ; ", command)
    pieces, current = [], []
    for word in flat.split() + [";"]:
        if word == ";":
            pieces.append(current)
            current = []
        elif current or not (ASSIGNMENT.match(word) or word in WRAPPERS or word.startswith("-")):
            current.append(word)
    return [piece for piece in pieces if piece]


def workdir_paths(path: str, workdir: str) -> list[str]:
    """A call's path relative to the workdir, with / between names: as given (tidied) and as
    it really is (links followed), each when it lies inside the workdir."""
    found = []
    for candidate in (os.path.join(workdir, path), os.path.realpath(os.path.join(workdir, path))):
        relative = os.path.relpath(os.path.normpath(candidate), workdir)
        if relative != ".." and not relative.startswith(".." + os.sep):
            found.append(relative.replace(os.sep, "/"))
    return list(dict.fromkeys(found))


def glob_pattern(pattern: str) -> re.Pattern:
    """A path rule as gitignore reads a pattern: * and ? within a name, ** across folders; a
    pattern with no / but at its end matches at any depth; one that matches a folder matches
    all in it. ./ and / at its start both mean the workdir."""
    pattern = pattern.removeprefix("./")
    anchored = "/" in pattern.rstrip("/")
    pattern = pattern.strip("/")
    parts, index = [], 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            parts.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            parts.append(".*")
            index += 2
        else:
            char = pattern[index]
            parts.append("[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char))
            index += 1
    return re.compile(("" if anchored else "(?:.*/)?") + "".join(parts) + "(?:/.*)?", re.DOTALL)
