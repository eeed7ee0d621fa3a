"""The package's structure, read from its source: each layer imports only the layers below
it, only the views write to the terminal, and only the command line (which wires them)
imports them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "minimal_agent"
# The package's folders, lowest first: a module imports its own layer's and those below.
LAYERS = ["common", "tools", "stores", "core", "views"]
VIEWS = {"display", "prompt", "json_output"}  # the readers that show the events, the questions
WIRING = {"cli"}  # the command line, on top: makes the views and hands them to the session
CHILDREN = {"search"}  # run as a process of their own: their stdout is a pipe to the agent
STREAMS = {"stdout", "stderr", "__stdout__", "__stderr__"}


def modules() -> dict[str, ast.Module]:
    return {
        path.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", "."): ast.parse(
            path.read_text(encoding="utf-8"), str(path)
        )
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "__init__.py"
    }


def short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def writes_to_the_terminal(tree: ast.Module) -> list[str]:
    """Where a module prints, writes to sys.stdout or sys.stderr, or hands them to print()."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name) and function.id == "print":
                found.append(f"line {node.lineno}: print()")
            if isinstance(function, ast.Attribute) and function.attr in ("write", "writelines"):
                target = function.value
                if isinstance(target, ast.Attribute) and target.attr in STREAMS:
                    found.append(f"line {node.lineno}: sys.{target.attr}.{function.attr}()")
            if (
                isinstance(function, ast.Attribute)
                and function.attr == "write"
                and isinstance(function.value, ast.Name)
                and function.value.id == "os"
            ):
                found.append(f"line {node.lineno}: os.write()")
    return found


def imported_paths(tree: ast.Module) -> set[str]:
    """The package's modules a module imports, as paths under it ("core.session")."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minimal_agent"):
            inside = node.module.removeprefix("minimal_agent").lstrip(".")
            if inside in LAYERS or not inside:  # from minimal_agent.core import session
                names.update(f"{inside}.{alias.name}".lstrip(".") for alias in node.names)
            else:
                names.add(inside)
        elif isinstance(node, ast.Import):
            names.update(
                a.name.removeprefix("minimal_agent.") for a in node.names
                if a.name.startswith("minimal_agent.")
            )  # fmt: skip
    return names


def imported(tree: ast.Module) -> set[str]:
    """The package's modules a module imports (by their last name)."""
    return {short(name) for name in imported_paths(tree)}


def layer(path: str) -> int:
    """A module's layer by its folder ("core.session"): its place in LAYERS; on top, past them
    all, for the command line."""
    folder = path.split(".")[0]
    return LAYERS.index(folder) if folder in LAYERS and "." in path else len(LAYERS)


def test_each_layer_imports_only_its_own_and_those_below():
    found = {
        name: sorted(other for other in imported_paths(tree) if layer(other) > layer(name))
        for name, tree in modules().items()
    }
    found = {name: above for name, above in found.items() if above}
    assert found == {}, f"a layer imports only those before it in {LAYERS}"


def test_every_module_is_in_a_layer_but_the_command_line():
    outside = {name for name in modules() if layer(name) == len(LAYERS)}
    assert outside == WIRING
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir()} - {"__pycache__"}
    assert folders == set(LAYERS)


def test_the_layer_check_finds_an_import_from_above():
    tree = ast.parse(
        "from minimal_agent.core import session\nfrom minimal_agent.views.display import x\n"
    )
    assert imported_paths(tree) == {"core.session", "views.display"}
    assert [layer(path) for path in ("common.text", "tools.search", "views.display", "cli")] == [
        0, 1, 4, 5
    ]  # fmt: skip


def test_only_the_views_write_to_the_terminal():
    found = {
        name: places
        for name, tree in modules().items()
        if short(name) not in VIEWS | CHILDREN and (places := writes_to_the_terminal(tree))
    }
    assert found == {}, "tell the events' readers instead (an event, or events.notice)"


def test_the_check_finds_a_print_and_a_write():
    tree = ast.parse("import sys\nprint('x')\nsys.stderr.write('y')\n")
    assert writes_to_the_terminal(tree) == ["line 2: print()", "line 3: sys.stderr.write()"]


def test_only_the_command_line_imports_the_views():
    found = {
        name: sorted(imported(tree) & VIEWS)
        for name, tree in modules().items()
        if short(name) not in VIEWS | WIRING and imported(tree) & VIEWS
    }
    assert found == {}, "the views are readers of the events: the command line makes them"


def test_the_stream_of_events_stands_on_the_base_alone():
    # Every module may emit events and the views read them: the stream itself depends on no
    # store, tool or view (it imported wire once), only on the base every module shares.
    assert imported(modules()["core.events"]) <= {"errors", "text"}
