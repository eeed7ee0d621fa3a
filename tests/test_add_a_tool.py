"""Adding a tool is safe (issue 17): a learner edits a copy of agent.py as the README's "Add a
tool" says, or gets it wrong, and runs it against the stub server. A schema without a function,
a function without a schema, or either one unusable stops the agent before the first request
with one line naming the tool; a schema written as the OpenAI docs write one works end to end."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import ROOT, run_agent, stub_env
from fake_model import reply, tool_call
from lesson_edit import LESSON_TOOLS, add_tool, lesson_tools_only, tool_map_names
from stub_server import StubServer
from test_readme import add_a_tool_pieces

from minimal_agent.tools import tool_schema


def edit(app: Path, function: str = "", schema: str = "", entry: str = "") -> None:
    """The copy of agent.py in app with the lesson's three tools only (whatever a learner has
    added to the real one), then a function, a schema and a TOOL_MAP entry added, each only if
    given, as a learner types them."""
    lesson_tools_only(app / "agent.py")
    add_tool(app / "agent.py", function, schema, entry)


def readme_pieces() -> tuple[str, str, str]:
    """The README's list_dir: its function, its schema (as the README indents it), its entry."""
    function, schema, (name, function_name) = add_a_tool_pieces()
    schema_text = "\n".join("    " + line for line in json.dumps(schema, indent=4).splitlines())
    return function, schema_text + ",", f'"{name}": {function_name}'


def stopped_before_any_request(app: Path, workdir: Path) -> str:
    """Run the copy against a stub that would answer: it must end with one line and exit 1,
    the stub having seen nothing at all; returns the line."""
    with StubServer([reply("should not be asked")]) as server:
        proc = run_agent("--workdir", str(workdir), "list the files", env=stub_env(server),
                         script=app / "agent.py")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert (server.requests, server.headers, server.probes) == ([], [], [])
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: the ") and "Traceback" not in line, line
    return line


def test_a_function_without_a_schema_stops_the_agent_in_one_line(app, workdir):
    function, _, entry = readme_pieces()
    edit(app, function=function, entry=entry)  # the schema forgotten
    line = stopped_before_any_request(app, workdir)
    assert line == (
        "error: the tool 'list_dir' is in TOOL_MAP but has no schema in TOOLS, so the model "
        "cannot call it: add its schema to TOOLS (see the README's 'Add a tool')"
    )


def test_a_schema_without_a_function_stops_the_agent_in_one_line(app, workdir):
    _, schema, _ = readme_pieces()
    edit(app, schema=schema)  # neither the function nor the TOOL_MAP entry yet
    line = stopped_before_any_request(app, workdir)
    assert line == (
        "error: the tool 'list_dir' has a schema in TOOLS but no function in TOOL_MAP: add "
        '"list_dir": list_dir to TOOL_MAP (or remove its schema)'
    )


RESPONSES_API_SCHEMA = """
    {
        "type": "function",
        "name": "list_dir",
        "description": "List a folder of the workdir.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
"""


@pytest.mark.parametrize(
    "function, schema, said",
    [
        (  # the optional path without a default: a call leaving it out would fail
            "def list_dir(ws, path):\n    return path",
            None,
            "error: the function of the tool 'list_dir' has no default for 'path', which its "
            "schema does not require, so a call may leave it out: give it one (path=None) or "
            'list it in "required"',
        ),
        (  # a parameter the schema does not have
            'def list_dir(ws, hidden, path="."):\n    return path',
            None,
            "error: the function of the tool 'list_dir' cannot take what its schema lists",
        ),
        (  # the workspace forgotten
            'def list_dir(path="."):\n    return path',
            None,
            "error: the function of the tool 'list_dir' cannot take what its schema lists",
        ),
        (  # the schema copied from the Responses API's docs
            None,
            RESPONSES_API_SCHEMA,
            "error: the schema of the tool 'list_dir' in TOOLS is in the Responses API's flat "
            'form ("name" beside "type"): the Chat Completions API wants {"type": "function", '
            '"function": {"name": ..., "description": ..., "parameters": ...}}',
        ),
        (  # a type the checks do not know
            None,
            readme_pieces()[1].replace('"string"', '"str"'),
            "error: the schema of the tool 'list_dir' in TOOLS gives the parameter 'path' no type "
            "the agent knows",
        ),
    ],
    ids=["optional-without-default", "extra-parameter", "no-workspace", "flat-form", "bad-type"],
)
def test_a_tool_that_cannot_work_stops_the_agent_in_one_line(app, workdir, function, schema, said):
    readme_function, readme_schema, entry = readme_pieces()
    edit(app, function=function or readme_function, schema=schema or readme_schema, entry=entry)
    assert stopped_before_any_request(app, workdir).startswith(said)


def test_the_readmes_tool_runs_end_to_end(app, workdir):
    function, schema, entry = readme_pieces()
    edit(app, function=function, schema=schema, entry=entry)
    (workdir / "notes.txt").write_text("hi")
    (workdir / "src").mkdir()
    script = [
        reply(None, tool_call("list_dir", {}, "c1"), tool_call("list_dir", {"path": "src"}, "c2")),
        reply("notes.txt and src/"),
    ]
    with StubServer(script) as server:
        proc = run_agent("--workdir", str(workdir), "list the files", env=stub_env(server),
                         script=app / "agent.py")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert server.problems == []
    results = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert results == ["notes.txt\nsrc/", ""]  # path left out: the default "." applied


# A tool as the OpenAI docs write one: no "required" (every parameter optional), an integer, an
# enum, a boolean and an array. Its function says what it was given, so the test can see it.
OPENAI_STYLE_FUNCTION = '''
def find_notes(ws, query="", limit=10, order="name", case_sensitive=False, extensions=None):
    """Find notes in the workdir (here: report the arguments as given)."""
    given = {"query": query, "limit": limit, "order": order, "case_sensitive": case_sensitive}
    return json.dumps({**given, "extensions": extensions}, sort_keys=True)
'''
OPENAI_STYLE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "find_notes",
        "description": "Find notes in the workdir that mention a word.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "The word to look for."},
                "limit": {"type": "integer", "description": "At most this many notes."},
                "order": {"type": "string", "enum": ["name", "size", "modified"]},
                "case_sensitive": {"type": "boolean"},
                "extensions": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}
FIELDS = (
    "find_notes takes a JSON object with the fields query (a string), limit (an integer), "
    "order (one of ['name', 'size', 'modified']), case_sensitive (a boolean), extensions "
    "(an array)"
)


def test_a_schema_as_the_openai_docs_write_one_works_end_to_end(app, workdir):
    schema = "\n".join(
        "    " + line for line in json.dumps(OPENAI_STYLE_SCHEMA, indent=4).splitlines()
    )
    edit(app, function=OPENAI_STYLE_FUNCTION, schema=schema + ",",
         entry='"find_notes": find_notes')  # fmt: skip
    every = {"query": "todo", "limit": 3, "order": "modified", "case_sensitive": True,
             "extensions": [".md", ".txt"]}  # fmt: skip
    calls = [
        tool_call("find_notes", every, "c1"),
        tool_call("find_notes", {"query": "todo"}, "c2"),  # the optional ones left out
        tool_call("find_notes", {}, "c3"),  # none at all: no "required", so that is fine
        tool_call(
            "find_notes",
            {"limit": "3", "order": "newest", "case_sensitive": "yes", "extensions": ".md"},
            "c4",
        ),  # fmt: skip
        tool_call("find_notes", {"limit": True, "extensions": [".md", 7], "colour": "red"}, "c5"),
    ]
    script = [reply(None, *calls, reasoning=""), reply("Found them.", reasoning="")]
    with StubServer(script) as server:
        proc = run_agent("--workdir", str(workdir), "find my notes", env=stub_env(server),
                         script=app / "agent.py")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Found them.\n"
    assert server.problems == []
    assert server.requests[0]["tools"][-1] == OPENAI_STYLE_SCHEMA  # sent as written
    results = {m["tool_call_id"]: m["content"] for m in server.requests[1]["messages"]
               if m["role"] == "tool"}  # fmt: skip
    defaults = {"query": "", "limit": 10, "order": "name", "case_sensitive": False,
                "extensions": None}  # fmt: skip
    assert json.loads(results["c1"]) == every  # each argument received as sent, typed
    assert json.loads(results["c2"]) == {**defaults, "query": "todo"}  # the defaults applied
    assert json.loads(results["c3"]) == defaults
    assert results["c4"] == (
        f"Error: {FIELDS}: 'limit' is a string, not an integer; 'order' is 'newest', not one of "
        "['name', 'size', 'modified']; 'case_sensitive' is a string, not a boolean; "
        "'extensions' is a string, not an array"
    )
    assert results["c5"] == (
        f"Error: {FIELDS}: unexpected 'colour'; 'limit' is a boolean, not an integer; "
        "'extensions' item 1 is an integer, not a string"
    )


# --- tool_schema on its own: what the start-up check and the argument check say ----------


def schema_of(**properties) -> dict:
    return {"type": "object", "properties": properties}


def test_an_optional_parameter_needs_a_default_and_a_required_one_does_not():
    def tool(ws, path, depth):
        return path

    mistake = tool_schema.signature_mistake(tool, schema_of(path={"type": "string"},
                                                            depth={"type": "integer"}))  # fmt: skip
    assert mistake and "no default for 'path'" in mistake
    required = {**schema_of(path={"type": "string"}, depth={"type": "integer"}),
                "required": ["path", "depth"]}  # fmt: skip
    assert tool_schema.signature_mistake(tool, required) is None


def test_a_function_taking_keyword_arguments_takes_any_parameter():
    def tool(ws, **given):
        return given

    assert tool_schema.signature_mistake(tool, schema_of(anything={"type": "string"})) is None


def test_a_tool_map_entry_that_is_no_function_is_named():
    mistake = tool_schema.signature_mistake("list_dir", schema_of())
    assert mistake == (
        "in TOOL_MAP is 'list_dir', not a function: map the name to the function itself, "
        "without quotes"
    )


@pytest.mark.parametrize(
    "tool, said",
    [
        (
            {
                "type": "function",
                "function": {
                    "name": "t",
                    "parameters": {"type": "object", "properties": {}, "required": "path"},
                },
            },  # fmt: skip
            """has "required": 'path'; it must be a list of parameter names""",
        ),
        (
            {
                "type": "function",
                "function": {
                    "name": "t",
                    "parameters": {"type": "object", "properties": {}, "required": ["path"]},
                },
            },  # fmt: skip
            "lists 'path' as required, but it is not one of its properties",
        ),
        ({"function": {"name": "t"}}, 'is not {"type": "function", "function": {...}}'),
    ],
)
def test_schema_mistakes_are_named(tool, said):
    assert tool_schema.schema_mistake(tool) == said


def test_a_nullable_type_any_of_and_an_enum_of_booleans_are_checked_as_json_sees_them():
    schema = schema_of(
        note={"type": ["string", "null"]},
        size={"anyOf": [{"type": "integer"}, {"type": "string", "enum": ["small", "large"]}]},
        flag={"enum": [True, False]},
    )
    assert (
        tool_schema.schema_mistake(
            {"type": "function", "function": {"name": "t", "parameters": schema}}
        )
        is None
    )
    assert (
        tool_schema.arguments_problem("t", schema, {"note": None, "size": 3, "flag": True}) is None
    )
    assert tool_schema.arguments_problem("t", schema, {"size": "large"}) is None
    problem = tool_schema.arguments_problem("t", schema, {"size": "huge", "flag": 1})
    assert problem.endswith(
        "'size' is a string, not an integer or one of ['small', 'large']; 'flag' is 1, not one "
        "of [True, False]"
    )


def with_required(schema_text: str) -> str:
    """The README's schema with "required": ["path"] added to its parameters."""
    return schema_text.replace('"properties": {', '"required": ["path"],\n"properties": {', 1)


@pytest.mark.parametrize(
    "wrong, right, schema",
    [
        ("propertes", "properties", readme_pieces()[1]),
        ("requried", "required", with_required(readme_pieces()[1])),
        ("descripton", "description", readme_pieces()[1]),
        ("parameter", "parameters", readme_pieces()[1]),
        ("tpye", "type", readme_pieces()[1]),
    ],
    ids=["propertes", "requried", "descripton", "parameter", "tpye"],
)
def test_a_misspelled_key_stops_the_agent_in_one_line_naming_it(app, workdir, wrong, right, schema):
    # Each misspelled once, the first time the README's schema has it: a key JSON Schema
    # does not know is ignored, so the model would get a tool without its parameters (or
    # required ones as optional), and the learner find out only when a call fails, or never.
    readme_function, _, entry = readme_pieces()
    edit(app, function=readme_function, schema=schema.replace(f'"{right}"', f'"{wrong}"', 1),
         entry=entry)  # fmt: skip
    line = stopped_before_any_request(app, workdir)
    named = f"error: the schema of the tool 'list_dir' in TOOLS has the key \"{wrong}\""
    assert line.startswith(named), line
    assert line.endswith(f'likely a misspelling of "{right}": correct it'), line


@pytest.mark.parametrize(
    "tool, said",
    [
        (
            {"type": "function", "function": {"name": "t", "Description": "Says hi."}},
            'has the key "Description" in "function", likely a misspelling of "description"',
        ),
        (
            {"type": "function", "function": {"name": "t", "parameters": schema_of(
                person={"type": "object", "properties": {"home": {"typ": "string"}}})}},
            """has the key "typ" in the parameter 'person.home', likely a misspelling of "type\"""",
        ),
        (
            {"type": "function", "function": {"name": "t", "parameters": schema_of(
                tags={"type": "array", "items": {"type": "string", "descriptions": "A tag."}})}},
            """has the key "descriptions" in the items of the parameter 'tags', likely a """
            """misspelling of "description\"""",
        ),
    ],
    ids=["in-function", "in-a-nested-parameter", "in-items"],
)  # fmt: skip
def test_a_misspelled_key_is_found_where_it_is(tool, said):
    assert tool_schema.schema_mistake(tool) == f"{said}: correct it"


def test_keys_that_json_schema_knows_and_the_learners_own_parameter_names_are_no_misspellings():
    # A parameter may be called "type" or "propertes"; maxProperties, patternProperties and
    # propertyNames are spelled like properties but are JSON Schema's own; x- keys are vendors'.
    schema = schema_of(
        type={"type": "string", "x-type": "path", "title": "Type"},
        propertes={"type": "object", "maxProperties": 3, "propertyNames": {"pattern": "^a"},
                   "patternProperties": {"^a": {"type": "string"}}},
    )  # fmt: skip
    tool = {"type": "function", "function": {"name": "t", "strict": False, "parameters": schema}}
    assert tool_schema.schema_mistake(tool) is None
    tool["function"][7] = "a key that is no string"  # json.dumps would write "7": not a typo
    assert tool_schema.schema_mistake(tool) is None


def test_two_schemas_of_one_tool_are_refused(monkeypatch):
    import agent
    from minimal_agent.common.errors import AgentError

    monkeypatch.setattr(agent, "TOOLS", [*agent.TOOLS, agent.TOOLS[0]])
    with pytest.raises(AgentError, match="the tool 'read_file' has two schemas in TOOLS"):
        agent.check_tools()


# A tool of a learner's own, beside the README's: the suite may depend on neither.
WORD_COUNT_FUNCTION = '''
def word_count(ws, path):
    """How many words a file of the workdir holds."""
    return str(len(read_file(ws, path).split()))
'''
WORD_COUNT_SCHEMA = """
    {
        "type": "function",
        "function": {
            "name": "word_count",
            "description": "Count the words of a file in the workdir.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "The file."}},
                "required": ["path"],
            },
        },
    },
"""
# Which tests a learner's new tool can reach, chosen test by test from their source: those
# whose own code, or a helper, constant or fixture of the tests folder they use, names
# agent.TOOLS or TOOL_MAP, reads the tools a request offered (["tools"]), names two of the
# lesson's tools in one list or string ("the tools: read_file, run_shell, write_file"), or reads
# agent.py's text. Chosen by their text, so a new test of that kind is run too (a fixed list of
# files missed the rules', hooks' and daily tools' tests), and by test, not by file: a whole file
# brought along its slow tests that no edit of agent.py reaches.
READS_TEXT = {"read_text", "read_bytes", "open", "getsource", "getsourcelines"}


def names_lesson_tools(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return sum(name in node.value for name in LESSON_TOOLS) >= 2
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return sum(isinstance(item, ast.Constant) and item.value in LESSON_TOOLS
                   for item in node.elts) >= 2  # fmt: skip
    return False


def parametrized_values(statement: ast.stmt) -> set[int]:
    """The ids of the nodes in a test's @pytest.mark.parametrize values: a test run once for
    read_file and once for write_file depends on neither the list of tools nor its length."""
    values = set()
    for decorator in getattr(statement, "decorator_list", []):
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("parametrize"):
            values |= {id(node) for value in decorator.args[1:] for node in ast.walk(value)}
    return values


def reaches_the_tools(statement: ast.stmt) -> bool:
    """Whether a statement's own expressions (not the statements inside it) reach the tools."""
    nodes = [
        node
        for field in ast.iter_child_nodes(statement)
        if not isinstance(field, (ast.stmt, ast.excepthandler))
        for node in ast.walk(field)
    ]
    words = {node.id for node in nodes if isinstance(node, ast.Name)}
    words |= {node.attr for node in nodes if isinstance(node, ast.Attribute)}
    strings = [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    keys = [n.slice for n in nodes if isinstance(n, ast.Subscript)]
    run_with = parametrized_values(statement)
    return bool(
        words & {"TOOLS", "TOOL_MAP"}
        or any(isinstance(key, ast.Constant) and key.value == "tools" for key in keys)
        or any(names_lesson_tools(node) for node in nodes if id(node) not in run_with)
        or (words & READS_TEXT and any("agent.py" in text for text in strings))
    )


class ParsedModule:
    """A module of the tests folder: what it defines at its top level, what it imports from
    the folder's other modules, its autouse fixtures."""

    def __init__(self, path: Path):
        self.tree = ast.parse(path.read_text(encoding="utf-8"))
        self.defined: dict[str, ast.stmt] = {}
        self.imported: dict[str, tuple[str, str]] = {}
        self.autouse: list[str] = []
        for statement in self.tree.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defined[statement.name] = statement
                if any("autouse=True" in ast.unparse(d) for d in statement.decorator_list):
                    self.autouse.append(statement.name)
            elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else []
                for target in [*targets, getattr(statement, "target", None)]:
                    for node in ast.walk(target) if target else ():
                        if isinstance(node, ast.Name):
                            self.defined[node.id] = statement
            elif isinstance(statement, ast.ImportFrom) and statement.module:
                if (path.parent / f"{statement.module}.py").exists():
                    for alias in statement.names:
                        self.imported[alias.asname or alias.name] = (statement.module, alias.name)


def chosen_for_a_learners_edit(folder: Path) -> list[str]:
    """The node ids (tests/FILE::TEST) of the tests in folder that reach the tools."""
    modules: dict[str, ParsedModule] = {}

    def module(name: str) -> ParsedModule:
        if name not in modules:
            modules[name] = ParsedModule(folder / f"{name}.py")
        return modules[name]

    read: dict[int, tuple[bool, list[tuple[str, ast.stmt]]]] = {}

    def read_once(where: str, code: ast.stmt) -> tuple[bool, list[tuple[str, ast.stmt]]]:
        """Whether code's own statements reach the tools, and what of the folder it uses."""
        if id(code) not in read:
            reached = any(reaches_the_tools(s) for s in ast.walk(code) if isinstance(s, ast.stmt))
            used = {node.id for node in ast.walk(code) if isinstance(node, ast.Name)}
            if isinstance(code, ast.FunctionDef):  # its fixtures, and a test's autouse ones
                used |= {argument.arg for argument in code.args.args} | set(module(where).autouse)
            uses = []
            for word in used:
                if word in module(where).defined:
                    uses.append((where, module(where).defined[word]))
                elif word in module(where).imported:
                    other, original = module(where).imported[word]
                    if original in module(other).defined:
                        uses.append((other, module(other).defined[original]))
                elif word in module("conftest").defined:
                    uses.append(("conftest", module("conftest").defined[word]))
            read[id(code)] = reached, uses
        return read[id(code)]

    def reaches(where: str, test: ast.FunctionDef) -> bool:
        to_read, done = [(where, test)], set()
        while to_read:
            where, code = to_read.pop()
            if id(code) not in done:
                done.add(id(code))
                reached, uses = read_once(where, code)
                if reached:
                    return True
                to_read += uses
        return False

    return [
        f"tests/{path.name}::{statement.name}"
        for path in sorted(folder.glob("test_*.py"))
        for statement in module(path.stem).tree.body
        if isinstance(statement, ast.FunctionDef) and statement.name.startswith("test_")
        and reaches(path.stem, statement)
    ]  # fmt: skip


def learner_adds_tools(agent_py: Path) -> None:
    """The README's "Add a tool" done as it says, unless this checkout holds list_dir already
    (a learner who took the step, then runs pytest), and a tool of the learner's own."""
    names = tool_map_names(agent_py)
    if "list_dir" not in names:
        add_tool(agent_py, *readme_pieces())
    if "word_count" not in names:
        add_tool(agent_py, WORD_COUNT_FUNCTION, WORD_COUNT_SCHEMA, '"word_count": word_count')


def failures_in(copy: Path, tests: list[str]) -> tuple[list[str], str]:
    """Run the tests (node ids) in the copy as the README says (pytest); each failing test as
    "its id: the first line of what it said", and the tail of pytest's output."""
    report = copy / "report.xml"
    # One process (-n 0): the suite around this test keeps the cores busy, and each worker
    # would import and collect everything again.
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         f"--junitxml={report}", *tests],
        cwd=copy, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    tail = (proc.stdout + proc.stderr)[-3000:]
    if not report.exists():
        return [f"pytest ended with exit code {proc.returncode} before running a test"], tail
    failed = []
    for case in ET.parse(report).iter("testcase"):
        for outcome in case:
            if outcome.tag in ("failure", "error"):
                said = (outcome.get("message") or outcome.text or "").strip().splitlines()
                name = f"{case.get('classname')}.{case.get('name')}"
                failed.append(f"{name}: {said[0] if said else outcome.tag}")
    if proc.returncode != 0 and not failed:
        failed.append(f"pytest ended with exit code {proc.returncode}")
    return failed, tail


@pytest.mark.long
@pytest.mark.timeout(300)
def test_a_learner_who_adds_a_tool_keeps_the_suite_green(tmp_path):
    # A copy of the checkout (a learner's edits and all) where the learner has added the
    # README's list_dir as "Add a tool" says (unless it is there already) and a tool of their
    # own; then the tests that reach the tools or agent.py's text, run as "Test your change"
    # says: none may depend on the shipped file's text or tools. The checkout as it is needs no
    # copy: this suite runs those same tests on it.
    copy = tmp_path / "project"
    unneeded = (".git", "*venv", "__pycache__", "*.egg-info", ".*_cache", ".hypothesis")
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*unneeded))
    # Of .hypothesis/, only its table of what UTF-8 encodes (conftest.pytest_configure): 1.2 s
    # of CPU to make again; its examples stay out, they are the checkout's.
    table = ROOT / ".hypothesis" / "unicode_data"
    if table.is_dir():
        shutil.copytree(table, copy / ".hypothesis" / table.name)
    learner_adds_tools(copy / "agent.py")
    this_test = f"tests/{Path(__file__).name}::test_a_learner_who_adds_a_tool_keeps_the_suite_green"
    tests = [test for test in chosen_for_a_learners_edit(copy / "tests") if test != this_test]
    failed, tail = failures_in(copy, tests)
    assert not failed, (
        f"in a copy of the checkout with the README's tool and one of their own, "
        f"{len(failed)} test(s) fail: {failed[0]}\n"
        + "\n".join(failed[1:])
        + f"\n\npytest's output ends:\n{tail}"
    )


PLANTED = """
import pytest
import agent
from conftest import ROOT, run_agent
from fake_model import tool_call

THE_THREE = ["read_file", "write_file", "run_shell"]


@pytest.fixture
def lesson_names():
    return ("read_file", "write_file", "run_shell")


def offered(request):
    return [tool["function"]["name"] for tool in request["tools"]]


def test_counts_the_tools():
    assert len(agent.TOOLS) == 3


def test_counts_what_a_request_offered(request):
    assert len(offered(request)) == 3


def test_names_them_in_a_constant(request):
    assert [tool["function"]["name"] for tool in request.node.tools] == THE_THREE


def test_names_them_in_a_line():
    assert run_agent("--help").stderr.endswith("the tools: read_file, run_shell, write_file")


def test_names_them_in_a_fixture(lesson_names):
    assert lesson_names


def test_reads_agent_py():
    assert (ROOT / "agent.py").read_text().count("def ") == 9


def test_calls_one_tool():
    assert tool_call("read_file", {"path": "a"}) and run_agent("hi")


@pytest.mark.parametrize("tool", ["read_file", "write_file"])
def test_runs_for_each_of_two_tools(tool):
    assert tool_call(tool, {})
"""


def test_the_tests_a_learners_tool_reaches_are_chosen_and_the_others_are_not(tmp_path):
    # A test of each way of hard-coding the lesson's tools must be chosen: run in the edited
    # copy, it fails, and so does the learner's-edit test.
    for name in ("conftest.py", "fake_model.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / name)
    (tmp_path / "test_planted.py").write_text(PLANTED, encoding="utf-8")
    chosen = [test.split("::")[1] for test in chosen_for_a_learners_edit(tmp_path)]
    assert chosen == [
        "test_counts_the_tools",
        "test_counts_what_a_request_offered",
        "test_names_them_in_a_constant",
        "test_names_them_in_a_line",
        "test_names_them_in_a_fixture",
        "test_reads_agent_py",
    ]


def test_the_tests_that_named_the_tools_as_a_list_are_chosen():
    # The five that once kept a learner's first edit from a green suite (the daily tools',
    # the rules' and the hooks'), with the lesson's own.
    chosen = chosen_for_a_learners_edit(ROOT / "tests")
    assert {
        "tests/test_daily_tools.py::test_python_agent_py_offers_the_lessons_three_unless_the_setting_says_otherwise",
        "tests/test_daily_tools.py::test_the_installed_command_offers_the_daily_tools",
        "tests/test_hooks.py::test_a_matcher_naming_no_tool_of_the_agent_says_so_in_one_line",
        "tests/test_permissions.py::test_a_tool_denied_whole_is_not_offered_to_the_model",
        "tests/test_permissions.py::test_a_rule_naming_no_tool_of_the_agent_says_so_in_one_line",
        "tests/test_loop.py::test_a_broken_call_gets_an_error_the_model_can_read",
        "tests/test_readme.py::test_the_tour_still_works_after_lines_are_added_above_run",
        "tests/test_readme_example.py::test_list_dir_shows_files_and_folders",
    } <= set(chosen)  # fmt: skip
