"""minimal_agent/stores/wire_record.py: every request a saved conversation sent and every
response it got, kept beside its transcript, rebuilt exactly (compared with what the stub server
received, byte for byte once parsed); --show ID --wire on the terminal; --show with IDs and
whole commands."""

from __future__ import annotations

import html
import json
import re
import stat
from html.parser import HTMLParser
from pathlib import Path

from conftest import ROOT, SESSIONS, clean_env, run_in_process, stub_env
from fake_model import FakeClient, completion, reply, tool_call
from stub_server import Billed, Fail, Streamed, StubServer, stream_chunks
from test_long_conversations import (
    SUMMARY,
    Model,
    agent,
    compactions,
    part_files,
    read,
    reading,
)

import agent as lesson
from minimal_agent.core.session import Session
from minimal_agent.stores import conversations, wire_record
from minimal_agent.views import wire_page, wire_text

KEY = "sk-wire-test-0123456789abcdef"


def record_of(save: Path) -> Path:
    """A conversation's record: in the sessions folder the tests' agent uses (a --save FILE
    elsewhere), or beside a transcript that is in its sessions folder."""
    elsewhere = conversations.wire_file(save, SESSIONS)
    return elsewhere if elsewhere.exists() else conversations.wire_file(save)


def kept(save: Path) -> list[dict]:
    return list(wire_record.exchanges(record_of(save)))


def as_json(value: object) -> object:
    return json.loads(json.dumps(value))


# --- 1. Every request and response, exactly ----------------------------------------------------


def test_every_request_is_kept_exactly_through_a_compaction_and_a_resume(workdir, tmp_path):
    names = part_files(workdir, 10, 6_000)
    save = tmp_path / "run.jsonl"
    first = Model(reading(names), "llamacpp")
    with StubServer(
        first.script(), api_key=KEY, server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "--save", str(save), "Read every part.")
        assert done.returncode == 0 and stub.problems == [], done.stderr
        assert compactions(save) and stub.side_requests  # a summary was asked for in between
        received, answered = list(stub.received), list(stub.answered)

    (workdir / "small.txt").write_text("a small file\n")
    then = Model([read(50, "small.txt"), {"role": "assistant", "content": "a small file"}])
    with StubServer(
        then.script(), api_key=KEY, server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "-r", str(save), "What does small.txt say?")
        assert done.returncode == 0 and stub.problems == [], done.stderr
        received += stub.received
        answered += stub.answered

    exchanges = kept(save)
    assert [exchange["number"] for exchange in exchanges] == list(range(1, len(received) + 1))
    assert [exchange["body"] for exchange in exchanges] == received  # every field, as sent
    assert [exchange["response"] for exchange in exchanges] == answered
    assert all(exchange["seconds"] >= 0 and not exchange["streamed"] for exchange in exchanges)
    # The resumed run's first request is kept as what it adds to the last one before it.
    resumed = exchanges[-len(stub.received)]
    assert resumed["base"] == resumed["number"] - 1 and resumed["same"] > 1
    assert [m["role"] for m in resumed["new"]] == ["assistant", "user"]  # the answer, the task
    text = record_of(save).read_text()
    assert KEY not in text and "authorization" not in text.lower()


def test_a_long_run_keeps_at_most_twice_what_its_transcript_keeps(workdir, tmp_path):
    """40 steps, each reading a file: kept whole, the requests alone would hold the history 40
    times over (about 20 times the transcript)."""
    names = part_files(workdir, 39, 2_000)
    steps = [reply(None, tool_call("read_file", {"path": n}, f"c{i}")) for i, n in enumerate(names)]
    client = FakeClient(*steps, reply("All 39 read."))
    save = tmp_path / "long.jsonl"
    result = lesson.run(
        "Read every part.", client, model="deepseek-flash", max_steps=40,
        workspace=lesson.Workspace(workdir), save=save,
    )  # fmt: skip
    assert result["steps"] == 40
    record = record_of(save)
    exchanges = kept(save)
    assert [exchange["body"] for exchange in exchanges] == as_json(client.requests)
    everything = sum(len(json.dumps(request)) for request in client.requests)
    assert record.stat().st_size <= 2 * save.stat().st_size < everything / 5


def test_a_stream_is_kept_as_the_reply_its_chunks_made_and_their_count(workdir, tmp_path):
    message = reply(None, tool_call("read_file", {"path": "a.txt"}, "call00001"), reasoning="Hm.")
    script = [Streamed(message), Streamed(reply("It says hi.", reasoning="Done."))]
    (workdir / "a.txt").write_text("hi\n")
    save = tmp_path / "s.jsonl"
    with StubServer(script, api_key=KEY) as stub:
        env = stub_env(stub)
        done = run_in_process(
            "--workdir", str(workdir), "--stream", "--thinking", "on", "--effort", "max",
            "--save", str(save), "Read a.txt", env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    exchanges = kept(save)
    assert [exchange["body"] for exchange in exchanges] == stub.received
    assert exchanges[0]["body"]["thinking"] == {"type": "enabled"}  # extra_body, as sent
    assert exchanges[0]["body"]["reasoning_effort"] == "max"
    for exchange, answer in zip(exchanges, stub.answered, strict=True):
        assert exchange["streamed"] and exchange["body"]["stream"] is True
        assert exchange["chunks"] == len(stream_chunks(answer))
        got = exchange["response"]["choices"][0]["message"]
        sent = answer["choices"][0]["message"]
        assert got["content"] == sent["content"]
        assert got["reasoning_content"] == sent["reasoning_content"]
        made = [{k: v for k, v in c.items() if k != "index"} for c in got.get("tool_calls") or []]
        assert made == (sent.get("tool_calls") or [])  # the chunks' calls, put together
        assert answer["usage"].items() <= exchange["response"]["usage"].items()


def test_a_refused_request_is_kept_with_what_went_wrong(workdir, tmp_path):
    save = tmp_path / "r.jsonl"
    with StubServer([Fail(400, f"bad request from {KEY}")], api_key=KEY) as stub:
        done = run_in_process(
            "--workdir", str(workdir), "--no-stream", "--save", str(save), "Hi", env=stub_env(stub)
        )
    assert done.returncode == 1
    (exchange,) = kept(save)
    assert exchange["body"] == stub.received[0] and exchange["response"] is None
    assert "400" in exchange["error"] and "bad request" in exchange["error"]
    assert KEY not in record_of(save).read_text()


def test_an_unsaved_conversation_keeps_no_record(workdir, tmp_path):
    client = FakeClient(reply("hi"))
    session = Session("system", lesson.Workspace(workdir))
    lesson.run("Hi", client, model="m", session=session)
    assert session.wire is None
    assert list(tmp_path.rglob("*.wire")) == []


def test_the_record_is_beside_the_undo_store_and_never_taken_for_a_conversation(tmp_path):
    transcript = tmp_path / "abc234.jsonl"
    assert conversations.wire_file(transcript) == tmp_path / "abc234.wire"
    store = conversations.changes_folder(transcript, tmp_path)
    assert conversations.wire_file(transcript).parent == store.parent
    transcript.write_text(json.dumps({"role": "user", "content": "x"}) + "\n")
    conversations.wire_file(transcript).write_text("{}\n")
    assert [path for path, _ in conversations.transcript_files(tmp_path)] == [transcript]
    assert conversations.resolve("abc", tmp_path) == transcript


def test_a_record_cut_off_by_a_crash_is_read_and_appended_to(workdir, tmp_path):
    save = tmp_path / "c.jsonl"
    first = Session(lesson.SYSTEM_PROMPT, lesson.Workspace(workdir), save=save)
    lesson.run("Hi", FakeClient(reply("one")), model="m", session=first)
    first.close()  # the transcript's lock let go, as at the agent's end
    record = record_of(save)
    with open(record, "ab") as file:
        file.write(b'{"exchange": 2, "started": "2026')  # the agent was killed here
    assert len(kept(save)) == 1
    history = [m for m in map(json.loads, save.read_text().splitlines()) if "role" in m]
    client = FakeClient(completion(reply("two"), usage=None))
    lesson.run("Again", client, model="m", workspace=lesson.Workspace(workdir), save=save,
               history=history)  # fmt: skip
    exchanges = kept(save)
    assert [exchange["number"] for exchange in exchanges] == [1, 2]
    assert exchanges[1]["body"] == as_json(client.requests[0])
    assert exchanges[1]["base"] == 1 and exchanges[1]["same"] == 2  # the system prompt, task
    assert [m["content"] for m in exchanges[1]["new"]] == ["one", "Again"]


# --- 2. --show takes IDs and shows commands whole --------------------------------------------

SPACED = "echo 'a    b'"
LONG = "printf '%s\\n' " + " ".join(f"word{n}" for n in range(60))  # past any shortening


def shell_run(tmp_path: Path) -> Path:
    """A saved conversation (abc234 in a sessions folder of its own) with two commands."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    calls = [tool_call("run_shell", {"command": SPACED}, "c1"),
             tool_call("run_shell", {"command": LONG}, "c2")]  # fmt: skip
    messages = [
        {"role": "user", "content": "run them"},
        reply(None, *calls),
        {"role": "tool", "tool_call_id": "c1", "content": "exit code 0\na    b\n"},
        {"role": "tool", "tool_call_id": "c2", "content": "exit code 0\n"},
        reply("Done."),
    ]
    path = folder / "abc234.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


def test_show_takes_the_ids_sessions_prints(tmp_path):
    path = shell_run(tmp_path)
    env = clean_env(LLM_SESSIONS_DIR=str(path.parent))
    by_id = run_in_process("--show", "abc", env=env)  # the ID's first characters, as -r takes
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout == run_in_process("--show", str(path), env=env).stdout
    unknown = run_in_process("--show", "zzz", env=env)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert "--sessions lists" in unknown.stderr and "Traceback" not in unknown.stderr
    missing = run_in_process("--html", str(path.parent / "gone.jsonl"), env=env)
    assert missing.returncode == 1 and missing.stderr == (
        f"error: {path.parent / 'gone.jsonl'}: no such file: --html takes a transcript file or "
        "a conversation's ID (--sessions lists them)\n"
    )


def test_show_shows_commands_whole_spaces_and_all(tmp_path):
    shown = run_in_process("--show", str(shell_run(tmp_path)), env=clean_env())
    calls = [line for line in shown.stdout.splitlines() if " calls " in line]
    assert calls == [
        f"  2 assistant calls run_shell(command={SPACED!r}) [c1]",
        f"  2 assistant calls run_shell(command={LONG!r}) [c2]",
    ]


# --- 3. --show ID --wire -----------------------------------------------------------------------

HOSTILE = "\x1b]0;pwned\x07\x1b[2J<script>alert(1)</script> \u202eevil"


def priced_run(workdir: Path, tmp_path: Path, *script, stream: bool = False) -> Path:
    """A conversation against the stub with DeepSeek's prices (Billed: known token counts),
    saved to tmp_path/run.jsonl."""
    save = tmp_path / "run.jsonl"
    with StubServer(list(script), api_key=KEY) as stub:
        done = run_in_process(
            "--workdir", str(workdir), "--stream" if stream else "--no-stream", "--yes",
            "--save", str(save), "Write a.txt, then run a command.", env=stub_env(stub),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return save


def writing_script() -> list:
    write = tool_call("write_file", {"path": "a.txt", "content": "hi\n"}, "call_w1")
    run = tool_call("run_shell", {"command": SPACED}, "call_r2")
    return [
        Billed(reply(None, write, reasoning="Write it."), T_OFF_PEAK, hit=0, miss=1000,
               completion=20),
        Billed(reply(None, run, reasoning="Run it."), T_OFF_PEAK, hit=900, miss=200,
               completion=20),
        Billed(reply(HOSTILE, reasoning="Done."), T_OFF_PEAK, hit=1000, miss=300, completion=10),
    ]  # fmt: skip


T_OFF_PEAK = 1_790_000_000 + 6 * 3600  # a time stamp; the price of its hour is the one used


def test_show_wire_prints_each_request_and_response_with_the_lessons_path(workdir, tmp_path):
    save = priced_run(workdir, tmp_path, *writing_script())
    shown = run_in_process("--show", str(save), "--wire", env=clean_env())
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert out.count(">>> request ") == 3 and out.count("<<< response ") == 3
    # What is new is printed, the rest counted: the system prompt and the tools once.
    assert out.count(lesson.SYSTEM_PROMPT[:60]) == 1
    assert out.count('"description": "Read a text file in the workdir."') == 1
    assert "... model, tools: as in request 1, not repeated ..." in out
    assert "... the first 2 messages, as in request 1 (" in out
    # The lesson's path: the arguments string, the dict, the call, the tool message.
    assert '  |     "{\\"path\\": \\"a.txt\\", \\"content\\": \\"hi\\\\n\\"}"' in out.splitlines()
    assert "  | args = json.loads(arguments)  -> {'path': 'a.txt', 'content': 'hi\\n'}" in out
    assert "  | TOOL_MAP[\"write_file\"](ws, path='a.txt', content='hi\\n')" in out
    assert '"tool_call_id": "call_w1", "content": \'Wrote 3 characters' in out
    assert f'  | TOOL_MAP["run_shell"](ws, command={SPACED!r})' in out  # its spaces kept
    # Each response's tokens, cache hits and cost (the transcript's priced usage).
    usages = [line for line in out.splitlines() if line.startswith("  usage: ")]
    assert usages[1].startswith("  usage: prompt tokens 1,100 (cache hits 900), completion ")
    assert all(", cost $0.0" in line for line in usages), usages
    # The model's text, escaped for the terminal: no escape sequence, no bidi override.
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\u001b]0;pwned" in out and "\\u202eevil" in out


def test_show_wire_of_a_conversation_without_a_record_is_one_line(tmp_path):
    path = shell_run(tmp_path)
    shown = run_in_process("--show", str(path), "--wire", env=clean_env())
    assert shown.returncode == 1 and shown.stdout == ""
    assert shown.stderr.count("\n") == 1 and "no record of its requests" in shown.stderr
    alone = run_in_process("--wire", env=clean_env())
    assert alone.returncode == 2 and "--wire goes with --show" in alone.stderr


# --- 4. The page ---------------------------------------------------------------------------------

EVIL_FILE = (
    '</textarea></pre></details><script>alert(2)</script><a href="javascript:alert(3)">click</a>'
    '<div class="call" id="c1-0">a fake call</div><section class="exchange" id="x9">fake</section>'
)
EVIL_ID = 'x"><script>alert(1)</script>'
EVIL_ANSWER = '<a href="javascript:alert(5)">x</a></pre><script>alert(6)</script><img src=x>'


def hostile_page(workdir: Path, tmp_path: Path) -> tuple[Path, str]:
    """A page made from a scripted run where the model and a file write hostile text."""
    (workdir / "evil.html").write_text(EVIL_FILE)
    client = FakeClient(
        completion(
            reply(None, tool_call("read_file", {"path": "evil.html"}, EVIL_ID), reasoning="</a>"),
            usage={
                "prompt_tokens": 900,
                "completion_tokens": 30,
                "total_tokens": 930,
                "prompt_cache_hit_tokens": 0,
                "prompt_cache_miss_tokens": 900,
            },
        ),  # fmt: skip
        reply(None, tool_call("<img src=x onerror=alert(4)>", "not json <b>", "call_2")),
        reply(EVIL_ANSWER, reasoning="<style>body { display: none }</style>"),
    )
    save = tmp_path / "evil.jsonl"
    lesson.run("Read evil.html <script>alert(7)</script>", client, model="deepseek-flash",
               workspace=lesson.Workspace(workdir), save=save)  # fmt: skip
    out = tmp_path / "page.html"
    assert wire_page.write_page(save, out, SESSIONS) == str(out)
    return out, out.read_text(encoding="utf-8")


class Parsed(HTMLParser):
    """A page's tags, attributes and text, as a browser's parser reads them."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def test_the_page_shows_hostile_text_and_nothing_in_it_acts(workdir, tmp_path):
    _, page = hostile_page(workdir, tmp_path)
    parsed = Parsed(page)
    names = [tag for tag, _ in parsed.tags]
    assert names.count("style") == 1 and names.count("meta") == 4
    assert not {"script", "img", "textarea", "iframe", "link", "base", "form"} & set(names)
    attributes = [name for _, attrs in parsed.tags for name in attrs]
    assert not [name for name in attributes if name.startswith("on") or name == "src"]
    ids = [attrs["id"] for _, attrs in parsed.tags if "id" in attrs]
    assert len(ids) == len(set(ids))  # the lookalike markup added none
    hrefs = [attrs["href"] for tag, attrs in parsed.tags if tag == "a"]
    assert hrefs and all(href.startswith("#") and href[1:] in ids for href in hrefs)
    assert [a["class"] for t, a in parsed.tags if t == "section"] == ["exchange"] * 3
    assert len([a for t, a in parsed.tags if a.get("class") == "call"]) == 2
    policy = [a["content"] for t, a in parsed.tags if a.get("http-equiv")]
    assert policy == [wire_page.POLICY] and "default-src 'none'" in policy[0]
    text = "".join(parsed.text)
    for hostile in (EVIL_FILE, EVIL_ANSWER, "<style>body { display: none }</style>",
                    "alert(7)", "<img src=x onerror=alert(4)>"):  # fmt: skip
        assert hostile in text  # shown as text, whole
    assert json.dumps(EVIL_ID) in text
    assert "The answer (no tool calls: the loop ends)" in text


def test_the_pages_own_policy_lets_no_script_run(workdir, tmp_path):
    """Issue 40: the policy as the page carries it, not as the module spells it: nothing is
    allowed but inline style, so a script that got past the escaping could not run."""
    _, page = hostile_page(workdir, tmp_path)
    [policy] = [attrs["content"] for _, attrs in Parsed(page).tags
                if attrs.get("http-equiv") == "Content-Security-Policy"]  # fmt: skip
    directives = dict(part.strip().partition(" ")[::2] for part in policy.split(";"))
    assert directives["default-src"] == "'none'"
    for name in ("script-src", "script-src-elem", "script-src-attr", "worker-src"):
        assert directives.get(name, "'none'") == "'none'", policy
    allowed = {name: value for name, value in directives.items() if value != "'none'"}
    assert allowed == {"style-src": "'unsafe-inline'"}, policy


def test_the_page_marks_the_compaction_and_what_the_summary_replaced(workdir, tmp_path):
    names = part_files(workdir, 10, 6_000)
    save = tmp_path / "run.jsonl"
    model = Model(reading(names), "llamacpp")
    with StubServer(model.script(), server="llamacpp", window=4_096,
                    compactions_allowed=True) as stub:  # fmt: skip
        done = agent(stub, workdir, "--save", str(save), "Read every part.")
    assert done.returncode == 0, done.stderr
    page = Path(wire_page.write_page(save, tmp_path / "p.html", SESSIONS)).read_text()
    text = "".join(Parsed(page).text)
    assert text.count("The context was compacted here") == len(compactions(save)) >= 1
    kinds = {record["kind"] for record in compactions(save)}
    assert kinds == {"summary", "tool results"}
    assert "earlier turns replaced by the model's summary" in text
    assert "old tool results replaced by short notes" in text
    assert re.search(r"Messages \d+–\d+ of request \d+ are not sent from here on", text)
    assert SUMMARY in text
    assert "side request (summary)" in text  # on the timeline
    assert "a call made before this record began" not in text  # results sent anew: linked
    shown = run_in_process("--show", str(save), "--wire", env=clean_env()).stdout
    summaries = shown.count("  a side request without tools: the summary a compaction asked for")
    assert summaries == len(stub.side_requests) >= 1


def test_html_writes_the_page_of_an_id_and_never_over_a_file_of_the_users(tmp_path, workdir):
    folder = tmp_path / "sessions"
    folder.mkdir()
    lesson.run("Hi", FakeClient(reply("Hello.")), model="m", workspace=lesson.Workspace(workdir),
               save=folder / "xyz789.jsonl")  # fmt: skip
    env = clean_env(LLM_SESSIONS_DIR=str(folder))
    out = tmp_path / "page.html"
    done = run_in_process("--html", "xyz", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"wrote {out}: open it in a browser\n"
    assert "Hello." in out.read_text() and stat.S_IMODE(out.stat().st_mode) == 0o600
    again = run_in_process("--html", "xyz", str(out), env=env)  # its own page: written anew
    assert again.returncode == 0, again.stderr
    mine = tmp_path / "mine.html"
    mine.write_text("<p>my notes</p>")
    refused = run_in_process("--html", "xyz", str(mine), env=env)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "is no page the agent wrote" in refused.stderr
    assert mine.read_text() == "<p>my notes</p>"


def test_reused_call_ids_link_each_call_to_its_own_tool_message(workdir, tmp_path):
    """Servers that number the calls of each reply from call_0 use the same id again."""
    (workdir / "a.txt").write_text("A")
    (workdir / "b.txt").write_text("B")
    client = FakeClient(
        reply(None, tool_call("read_file", {"path": "a.txt"}, "call_0")),
        reply(None, tool_call("read_file", {"path": "b.txt"}, "call_0")),
        reply("A and B."),
    )
    save = tmp_path / "ids.jsonl"
    lesson.run("Read both.", client, model="m", workspace=lesson.Workspace(workdir), save=save)
    paths = wire_text.lesson_paths(kept(save))
    answers = [(paths[n][0]["answer"][0], paths[n][0]["answer"][2]["content"]) for n in (1, 2)]
    assert answers == [(2, "A"), (3, "B")]
    page = Parsed(Path(wire_page.write_page(save, tmp_path / "ids.html", SESSIONS)).read_text())
    links = {a["href"] for t, a in page.tags if t == "a"}
    assert {"#m2-3", "#m3-5", "#c1-0", "#c2-0"} <= links


def test_an_edited_record_is_one_line_or_plain_text_never_markup(workdir, tmp_path):
    save = tmp_path / "e.jsonl"
    lesson.run("Hi", FakeClient(reply("Hello.")), model="m", workspace=lesson.Workspace(workdir),
               save=save)  # fmt: skip
    record = record_of(save)
    line = json.loads(record.read_text())
    forged = {"chunks": "<em>9</em>", "started": ["<i>"], "seconds": "<u>1</u>", "streamed": "x"}
    record.write_text(json.dumps({**line, **forged}) + "\n")
    page = Parsed(Path(wire_page.write_page(save, tmp_path / "e.html", SESSIONS)).read_text())
    assert not {"em", "i", "u"} & {tag for tag, _ in page.tags}
    record.write_text(json.dumps({**line, "exchange": '1"><script>alert(1)</script>'}) + "\n")
    refused = run_in_process("--html", str(save), str(tmp_path / "f.html"), env=clean_env())
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "line 1 is not an exchange as the agent writes them" in refused.stderr
    assert not (tmp_path / "f.html").exists()


def test_undo_leaves_the_record_of_a_conversation_saved_in_its_workdir(workdir):
    save = workdir / "run.jsonl"  # --save inside the workdir: the record is there too
    write = tool_call("write_file", {"path": "a.txt", "content": "hi\n"}, "call_1")
    with StubServer([reply(None, write), reply("Written.")], api_key=KEY) as stub:
        env = stub_env(stub)
        done = run_in_process(
            "--workdir", str(workdir), "--no-stream", "--save", str(save), "Write a.txt", env=env
        )
        assert done.returncode == 0, done.stderr
        record = record_of(save)
        kept_before = record.read_bytes()
        undone = run_in_process("--workdir", str(workdir), "--undo", "-r", str(save), env=env)
    assert undone.returncode == 0, undone.stderr
    assert not (workdir / "a.txt").exists()
    assert record.read_bytes() == kept_before  # not taken for a change of the workdir's


def test_the_example_conversation_has_its_record_and_page(tmp_path):
    """A learner without a key sees the demo run's requests and responses."""
    example = ROOT / "examples" / "tool_demo.jsonl"
    history = [m for m in map(json.loads, example.read_text().splitlines()) if "role" in m]
    exchanges = kept(example)
    assert [len(x["body"]["messages"]) for x in exchanges] == [2, 4, 6, 8]
    for exchange in exchanges:  # each request: the conversation so far, as the transcript has it
        messages = exchange["body"]["messages"]
        assert messages == history[: len(messages)]
        reply_message = exchange["response"]["choices"][0]["message"]
        assert reply_message["content"] == history[len(messages)]["content"]
    out = tmp_path / "demo.html"
    done = run_in_process("--html", str(example), str(out), env=clean_env())
    assert done.returncode == 0, done.stderr
    assert "TOOL_MAP[\"run_shell\"](ws, command='python3 tool_demo.py')" in html.unescape(
        out.read_text()
    )


def test_a_record_that_cannot_be_written_never_ends_the_conversation(workdir, tmp_path, capsys):
    save = tmp_path / "w.jsonl"
    record_of(save).write_text('{"exchange": "not one"}\n')  # edited by hand
    result = lesson.run("Hi", FakeClient(reply("Hello.")), model="m", save=save,
                        workspace=lesson.Workspace(workdir))  # fmt: skip
    assert result["text"] == "Hello." and result["stop_reason"] == "finished"
    said = [line for line in capsys.readouterr().err.splitlines() if "not kept" in line]
    assert said == [
        "warning: the requests and responses are not kept from here on: "
        f"{record_of(save)} line 1 is not an exchange as the agent writes them, or its "
        "request refers to one that is not among the 3 before it"
    ]
