"""Editing a copy of agent.py as a learner types a new tool into it: the function above TOOLS,
its schema as the last item of TOOLS, its entry last in TOOL_MAP. The places are found by
parsing the copy, never by its exact text, so the tests that edit a copy keep working after a
learner's own edits (the README's "Add a tool" pasted in, a tool of their own, lines moved)."""

from __future__ import annotations

import ast
from pathlib import Path

LESSON_TOOLS = ("read_file", "write_file", "run_shell")


def lesson_tools_only(path: Path) -> None:
    """The copy at path with TOOLS and TOOL_MAP holding the lesson's three tools only, whatever
    a learner added (their functions stay: unused, they change nothing)."""
    source = path.read_text(encoding="utf-8")
    tools, tool_map = assignment(source, "TOOLS"), assignment(source, "TOOL_MAP")
    kept = [
        ast.get_source_segment(source, item)
        for item in tools.elts
        if tool_name(item) in LESSON_TOOLS
    ]
    entries = [
        f"{ast.get_source_segment(source, key)}: {ast.get_source_segment(source, value)}"
        for key, value in zip(tool_map.keys, tool_map.values, strict=True)
        if isinstance(key, ast.Constant) and key.value in LESSON_TOOLS
    ]
    new_tools = "[\n" + "".join(f"    {item},\n" for item in kept) + "]"
    new_map = "{" + ", ".join(entries) + "}"
    # The later statement first, so the earlier one's offsets still hold.
    for node, text in sorted(
        [(tools, new_tools), (tool_map, new_map)], key=lambda pair: -start(source, pair[0])
    ):
        source = source[: start(source, node)] + text + source[end(source, node) :]
    path.write_text(source, encoding="utf-8")


def tool_map_names(path: Path) -> list[str]:
    """The tool names the copy at path has in TOOL_MAP (the README's list_dir, once a learner
    has added it)."""
    tool_map = assignment(path.read_text(encoding="utf-8"), "TOOL_MAP")
    return [key.value for key in tool_map.keys if isinstance(key, ast.Constant)]


def add_tool(path: Path, function: str = "", schema: str = "", entry: str = "") -> None:
    """Add a function above TOOLS, a schema (source text of one TOOLS item) at the end of
    TOOLS and an entry ('"name": function') at the end of TOOL_MAP, each only if given."""
    source = path.read_text(encoding="utf-8")
    tools, tool_map = assignment(source, "TOOLS"), assignment(source, "TOOL_MAP")
    edits = []  # (offset, text), applied from the last offset back
    if entry:
        edits.append(before_closing(source, tool_map, entry, " "))
    if schema:
        edits.append(before_closing(source, tools, schema.strip().rstrip(","), "\n    "))
    if function:
        edits.append((statement_start(source, "TOOLS"), function.strip() + "\n\n\n"))
    for offset, text in sorted(edits, reverse=True):
        source = source[:offset] + text + source[offset:]
    path.write_text(source, encoding="utf-8")


def assignment(source: str, name: str) -> ast.List | ast.Dict:
    """The value of the top-level `name = ...` of the source."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == name for target in node.targets
        ):
            return node.value
    raise AssertionError(f"agent.py has no top-level {name} = ...")


def statement_start(source: str, name: str) -> int:
    """Where the line of the top-level `name = ...` begins, above the comments just over it."""
    lines = source.splitlines(keepends=True)
    number = assignment(source, name).lineno - 1
    while number > 0 and lines[number - 1].startswith("#"):
        number -= 1
    return sum(len(line) for line in lines[:number])


def before_closing(source: str, node: ast.List | ast.Dict, item: str, indent: str) -> tuple:
    """The edit (offset, text) that adds item as the last element of a list or dict literal."""
    elements = node.elts if isinstance(node, ast.List) else node.values
    trailing = "," if isinstance(node, ast.List) else ""
    if not elements:
        return end(source, node) - 1, f"{indent}{item}{trailing}"
    after = end(source, elements[-1])
    comma = source.find(",", after, end(source, node) - 1)
    if comma == -1:
        return after, f",{indent}{item}{trailing}"
    return comma + 1, f"{indent}{item}{trailing}"


def tool_name(item: ast.expr) -> str | None:
    """The "name" inside the "function" of a TOOLS item written as a dict literal."""
    if not isinstance(item, ast.Dict):
        return None
    for key, value in zip(item.keys, item.values, strict=True):
        if (
            isinstance(key, ast.Constant)
            and key.value == "function"
            and isinstance(value, ast.Dict)
        ):
            for inner_key, inner in zip(value.keys, value.values, strict=True):
                if isinstance(inner_key, ast.Constant) and inner_key.value == "name":
                    return inner.value if isinstance(inner, ast.Constant) else None
    return None


def offset(source: str, line: int, column: int) -> int:
    """The character offset of ast's (line, UTF-8 byte column)."""
    lines = source.splitlines(keepends=True)
    before = lines[line - 1].encode("utf-8")[:column].decode("utf-8")
    return sum(len(text) for text in lines[: line - 1]) + len(before)


def start(source: str, node: ast.AST) -> int:
    return offset(source, node.lineno, node.col_offset)


def end(source: str, node: ast.AST) -> int:
    return offset(source, node.end_lineno, node.end_col_offset)
