"""--html ID [OUT.html]: a saved conversation's requests and responses (stores/wire_record.py)
as one page a learner clicks through in a browser: the steps on a timeline; each request's new
messages, its unchanged prefix folded; each response as a JSON tree that folds, the path to
its tool calls open and marked; for each call, the lesson's path from the arguments string to
the tool message, linked both ways; tokens and cost; where the context was compacted.

One file: its style inline, no script at all, no link but to its own parts, so it works from
file:// and nothing it holds can reach the network. Every text the model, a tool or a file
wrote is escaped (html.escape), and the page's Content-Security-Policy forbids any script and
any load, so that what escaping might miss could not run either.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from minimal_agent.common import files
from minimal_agent.common.errors import AgentError
from minimal_agent.core import cost
from minimal_agent.stores import wire_record
from minimal_agent.stores.transcripts import transcript_lines
from minimal_agent.views import wire_text

MARK = "<!-- minimal-agent: a conversation's requests and responses -->"  # its pages, rewritable
POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
TOOL_CALLS_PATH = ("choices", 0, "message", "tool_calls", int, "function", "arguments")

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #fafafa; }
main { margin-left: 15rem; padding: 1rem 2rem 40vh; max-width: 60rem; }
nav { position: fixed; top: 0; bottom: 0; width: 13rem; overflow: auto; padding: 1rem;
      border-right: 1px solid #ddd; background: #fff; font-size: 13px; }
nav ol { padding-left: 1.6rem; margin: 0; } nav li { margin: .25rem 0; }
nav .compacted { color: #a15c00; }
section.exchange { background: #fff; border: 1px solid #ddd; border-radius: 6px;
                   padding: .5rem 1rem 1rem; margin: 1rem 0; }
section.exchange:target, li:target, div.call:target { outline: 3px solid #4a90e2; }
pre, code { font: 13px/1.4 ui-monospace, monospace; white-space: pre-wrap;
            overflow-wrap: anywhere; }
pre { background: #f4f4f6; padding: .4rem .6rem; margin: .2rem 0; border-radius: 4px; }
.meta { color: #555; font-size: 13px; }
.new { background: #e8f6e8; border-left: 4px solid #2e8b2e; }
ol.messages > li { padding: .2rem .5rem; margin: .3rem 0; }
.role { font-weight: 600; } .badge { font-size: 11px; background: #2e8b2e; color: #fff;
        border-radius: 3px; padding: 0 .3rem; margin-left: .4rem; }
.compaction { background: #fff4e0; border-left: 4px solid #e69500; padding: .4rem .8rem; }
.tree ul { list-style: none; padding-left: 1.2rem; margin: 0; }
.tree summary { cursor: pointer; }
.marked > summary, .marked > .leaf { background: #fff3b0; }
div.call { border: 1px solid #e6c200; border-radius: 4px; padding: .3rem .8rem; margin: .5rem 0; }
.error { color: #a00; }
@media (max-width: 48rem) {  /* a phone: the timeline above the steps, the text full width */
  nav { position: static; width: auto; max-height: 40vh; border-right: 0;
        border-bottom: 1px solid #ddd; }
  main { margin-left: 0; padding: .5rem .75rem 40vh; }
  section.exchange { padding: .4rem .6rem .8rem; }
  .tree ul { padding-left: .8rem; }
}
"""


def write_page(
    transcript: str | os.PathLike,
    out: str | os.PathLike | None = None,
    folder: str | os.PathLike | None = None,
) -> str:
    """Write the page of the conversation in transcript to out (default: its ID.html in the
    current folder) and return out; AgentError if the conversation has no record, or out is
    a file this agent did not write. folder: the sessions folder, where its record is."""
    exchanges = wire_record.read_record(transcript, folder)
    target = Path(out) if out else Path(Path(transcript).name.removesuffix(".jsonl") + ".html")
    if target.is_dir():
        raise AgentError(f"{target} is a folder: give the page a file name, such as page.html")
    try:
        files.refuse_link(target)  # before it is read: a FIFO would never answer
    except OSError as error:
        raise AgentError(f"cannot write {target}: {error.strerror}") from None
    if target.exists() and not is_page(target):
        raise AgentError(f"{target} exists and is no page the agent wrote: give another name")
    try:
        entries = [entry for _, entry in transcript_lines(transcript, tolerant=True)]
    except AgentError:
        entries = []  # the requests alone still make the page
    page = render(exchanges, entries, Path(transcript).name.removesuffix(".jsonl"))
    try:
        # The owner's only (as files.replacing makes it), as the transcript is: it holds the
        # whole conversation.
        with files.replacing(target) as (file, _):
            file.write(page.encode("utf-8"))
    except OSError as error:
        raise AgentError(f"cannot write {target}: {error.strerror or error}") from None
    return str(target)


def is_page(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return MARK in file.read(300)
    except OSError:
        return False


def e(text: object) -> str:
    """Text for the page: & < > " ' escaped, so it is shown, never read as markup."""
    return html.escape(str(text), quote=True)


def render(exchanges: list[dict], entries: list[dict], name: str) -> str:
    """The whole page (see the module's docstring)."""
    paths = wire_text.lesson_paths(exchanges)
    answered = {  # where each tool message is new -> the call it answers
        step["answer"][:2]: (n, step["index"]) for n, steps in paths.items() for step in steps
        if step["answer"]
    }  # fmt: skip
    made: dict[str, list[tuple[int, int]]] = {}  # each call id -> its calls, in order
    for n, steps in paths.items():
        for step in steps:
            if isinstance(step["id"], str):
                made.setdefault(step["id"], []).append((n, step["index"]))
    calls = (answered, made)
    priced = [entry for entry in entries if entry.get("event") == "usage"]
    usages = {x["number"]: wire_text.usage_of(x, priced) for x in exchanges}
    records = [entry for entry in entries if entry.get("event") == "compaction"]
    compacted = compaction_points(exchanges, records)
    session = next((entry for entry in entries if entry.get("event") == "session"), {})
    sections = [
        exchange_section(x, paths[x["number"]], calls, usages[x["number"]], compacted)
        for x in exchanges
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            MARK,
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">',
            '<meta name="referrer" content="no-referrer">',
            f"<title>Conversation {e(name)}: requests and responses</title>",
            f"<style>{STYLE}</style></head><body>",
            timeline(exchanges, paths, compacted),
            "<main>",
            header(name, session, exchanges, usages),
            *sections,
            "</main></body></html>",
        ]
    )


def header(name: str, session: dict, exchanges: list[dict], usages: dict) -> str:
    known = [usage for usage in usages.values() if usage]
    tokens = {k: sum(u[k] for u in known) for k in ("prompt_tokens", "cache_hit_tokens",
                                                   "completion_tokens")}  # fmt: skip
    currencies = {u["currency"] for u in known if u["cost"] is not None}
    money = ""
    if len(currencies) == 1:
        spent = sum(u["cost"] for u in known if u["cost"] is not None)
        money = f", cost {e(cost.money(spent, currencies.pop()))}"
    where = ""
    if isinstance(session.get("workdir"), str):
        where = f" in <code>{e(session['workdir'])}</code>"
    model = (
        f" with <code>{e(session['model'])}</code>" if isinstance(session.get("model"), str) else ""
    )
    return (
        f"<h1>Conversation {e(name)}</h1>"
        f'<p class="meta">{len(exchanges)} requests{model}{where}: prompt tokens '
        f"{tokens['prompt_tokens']:,} (cache hits {tokens['cache_hit_tokens']:,}), completion "
        f"tokens {tokens['completion_tokens']:,}{money}.</p>"
        "<p>Each request is shown with what it adds to the one before (new messages marked); "
        "each response as the JSON the server sent, folded, with the path to its tool calls "
        "open and marked, and for each call the lesson's path: the <code>arguments</code> "
        "string, <code>json.loads</code>, the call of <code>TOOL_MAP</code>, the tool message "
        "that carries its <code>tool_call_id</code>.</p>"
    )


def timeline(exchanges: list[dict], paths: dict, compacted: dict) -> str:
    items = []
    for exchange in exchanges:
        number = exchange["number"]
        names = [str(step["name"]) for step in paths[number]]
        if exchange["error"] is not None:
            what = "no response"
        elif names:
            what = ", ".join(names)
        else:
            what = "answer" if exchange["fields"].get("tools") else "side request (summary)"
        mark = ' <span class="compacted">(compacted)</span>' if number in compacted else ""
        items.append(f'<li><a href="#x{number}">{e(what)}</a>{mark}</li>')
    return f"<nav><b>Requests</b><ol>{''.join(items)}</ol></nav>"


def compaction_points(exchanges: list[dict], records: list[dict]) -> dict[int, dict]:
    """The requests of the conversation (those with tools) that do not extend the one before
    it: {number: {"previous": that exchange, "record": the transcript's compaction record
    (taken in order) or {}}}."""
    points, previous = {}, None
    for exchange in exchanges:
        if not exchange["fields"].get("tools") or exchange["error"] is not None:
            continue
        if previous and exchange["same"] < len(previous["body"]["messages"]):
            points[exchange["number"]] = {
                "previous": previous, "record": records.pop(0) if records else {}
            }  # fmt: skip
        previous = exchange
    return points


def exchange_section(exchange, path, calls, usage, compacted) -> str:
    number = exchange["number"]
    how = f"streamed in {exchange['chunks']} chunks" if exchange["streamed"] else "not streamed"
    parts = [
        f'<section class="exchange" id="x{number}">',
        f"<h2>Request {number}</h2>",
        f'<p class="meta">sent {e(exchange["started"])}, {e(exchange["seconds"])} s until the '
        f"response, {how}; {e(wire_text.usage_line(usage)) if exchange['response'] else ''}</p>",
    ]
    if number in compacted:
        parts.append(compaction_note(exchange, compacted[number]))
    parts += [request_part(exchange, usage, calls), response_part(exchange, path)]
    return "\n".join([*parts, "</section>"])


def compaction_note(exchange: dict, point: dict) -> str:
    previous, record = point["previous"], point["record"]
    same, before = exchange["same"], len(previous["body"]["messages"])
    kind = {"summary": "earlier turns replaced by the model's summary",
            "tool results": "old tool results replaced by short notes"}.get(
        record.get("kind"), "the conversation sent anew")  # fmt: skip
    tokens = ""
    if record.get("tokens_before") is not None:
        tokens = (
            f" (about {e(record['tokens_before'])} &rarr; {e(record.get('tokens_after'))} tokens)"
        )
    replaced = groups(previous["origins"][same:before], same + 1)
    return (
        f'<div class="compaction"><b>The context was compacted here</b>: {e(kind)}{tokens}. '
        f'Messages {same + 1}&ndash;{before} of <a href="#x{previous["number"]}">request '
        f"{previous['number']}</a> are not sent from here on: the messages marked new below "
        f"are sent in their place. They were: {replaced}</div>"
    )


def groups(origins: list[int], first: int) -> str:
    """Runs of messages by the request that sent them first: messages 3-7 (request 2), ..."""
    runs: list[list[int]] = []
    for index, origin in enumerate(origins, first):
        if runs and runs[-1][2] == origin:
            runs[-1][1] = index
        else:
            runs.append([index, index, origin])
    return "; ".join(
        f"{'message' if a == b else 'messages'} {a}{'' if a == b else f'&ndash;{b}'} "
        f'(new in <a href="#x{origin}">request {origin}</a>)'
        for a, b, origin in runs
    )


def request_part(exchange: dict, usage: dict | None, calls: dict) -> str:
    base, same = exchange["base"], exchange["same"]
    fields = exchange["fields"]
    names = ", ".join(fields)
    if exchange["fields_changed"]:
        shown = tree(fields, "the request's other fields", set())
        fields_part = f"<p>{e(names)}{' (changed)' if base else ''}:</p>{shown}"
    else:
        fields_part = f'<p>{e(names)}: as in <a href="#x{base}">request {base}</a>.</p>'
    prefix = ""
    if same:
        size = len(json.dumps(exchange["body"]["messages"][:same]))
        cache = ""
        if usage:
            cache = (
                f"; the server's cache served {usage['cache_hit_tokens']:,} of its "
                f"{usage['prompt_tokens']:,} prompt tokens"
            )
        prefix = (
            f'<details class="prefix"><summary>messages 1&ndash;{same}: as in '
            f"request {base} ({size:,} bytes of JSON, not repeated){cache}</summary>"
            f"<p>{groups(exchange['origins'][:same], 1)}</p></details>"
        )
    items = [
        message_item(exchange["number"], i, m, calls) for i, m in enumerate(exchange["new"], same)
    ]
    listed = f'<ol class="messages" start="{same + 1}">{"".join(items)}</ol>' if items else ""
    return f"<h3>Request</h3>{fields_part}<p><b>messages</b>:</p>{prefix}{listed}"


def latest_call(made: dict, call_id: object, number: int) -> tuple[int, int] | None:
    """The last call with call_id made before request number: the one a tool message sent
    again answers (a compacted conversation sends it anew)."""
    earlier = [call for call in made.get(call_id, []) if call[0] < number]
    return earlier[-1] if isinstance(call_id, str) and earlier else None


def message_item(number: int, index: int, message: object, calls: dict) -> str:
    """A new message of request number (its index from 0); a tool message linked to the call
    it answers (calls: (number, index) -> (exchange, index of the call) for the tool messages
    that answered a call, and each call id -> its calls)."""
    if not isinstance(message, dict):
        return f'<li class="new"><pre>{e(json.dumps(message))}</pre></li>'
    role = message.get("role")
    body = []
    if role == "tool":
        call_id = message.get("tool_call_id")
        answered, made_by_id = calls
        made = answered.get((number, index)) or latest_call(made_by_id, call_id, number)
        call = "a call made before this record began"
        if made:
            call = (
                f'<a href="#c{made[0]}-{made[1]}">tool call {made[1] + 1} of response {made[0]}</a>'
            )
        body.append(
            f"<p>tool_call_id <code>{e(json.dumps(call_id))}</code>: the result of {call}</p>"
        )
    for field in ("reasoning_content", "reasoning"):
        if isinstance(message.get(field), str):
            body.append(
                f"<details><summary>{field} ({len(message[field]):,} characters)</summary>"
                f"<pre>{e(message[field])}</pre></details>"
            )
    content = message.get("content")
    if isinstance(content, str):
        body.append(f"<pre>{e(content)}</pre>")
    elif content is not None:
        body.append(f"<pre>{e(json.dumps(content, indent=2, ensure_ascii=False))}</pre>")
    for call in message.get("tool_calls") or []:
        body.append(f"<p>calls:</p><pre>{e(json.dumps(call, indent=2, ensure_ascii=False))}</pre>")
    others = {k: v for k, v in message.items() if k not in SHOWN_FIELDS}
    if others:
        body.append(f"<pre>{e(json.dumps(others, indent=2, ensure_ascii=False))}</pre>")
    return (
        f'<li class="new" id="m{number}-{index}"><span class="role">{e(role)}</span>'
        f'<span class="badge">new</span>{"".join(body)}</li>'
    )


SHOWN_FIELDS = {"role", "tool_call_id", "reasoning_content", "reasoning", "content", "tool_calls"}


def response_part(exchange: dict, path: list[dict]) -> str:
    if exchange["error"] is not None:
        return f'<h3>Response</h3><p class="error">No response: {e(exchange["error"])}</p>'
    shown = tree(exchange["response"], "response", {step["index"] for step in path}, top=True)
    steps = "".join(call_part(exchange["number"], step, len(path)) for step in path)
    if not path and exchange["fields"].get("tools"):
        steps = (
            f"<p>The answer (no tool calls: the loop ends):</p><pre>{e(answer_of(exchange))}</pre>"
        )
    return f'<h3>Response</h3><div class="response">{shown}</div>{steps}'


def answer_of(exchange: dict) -> str:
    try:
        content = exchange["response"]["choices"][0]["message"]["content"]
    except (TypeError, KeyError, IndexError):
        content = None
    return content if isinstance(content, str) else json.dumps(content)


def call_part(number: int, step: dict, count: int) -> str:
    i = step["index"]
    parsed = (
        e(json.dumps(step["parsed"], indent=2, ensure_ascii=False))
        if step["problem"] is None
        else f'<span class="error">{e(step["problem"])}</span>'
    )
    if step["answer"] is None:
        result = "<p>No tool message was sent for it: the run ended first.</p>"
    else:
        at, index, message = step["answer"]
        result = (
            f'<p>&rarr; <a href="#m{at}-{index}">the tool message</a> (message {index + 1} of '
            f"request {at}), <code>tool_call_id</code> <code>{e(json.dumps(step['id']))}</code>:"
            f"</p><pre>{e(message.get('content'))}</pre>"
        )
    return (
        f'<div class="call" id="c{number}-{i}"><p><b>Tool call {i + 1} of {count}</b> '
        f"<code>{e(json.dumps(step['id']))}</code></p>"
        f"<p><code>resp.choices[0].message.tool_calls[{i}].function.arguments</code> is a "
        f"string of JSON text:</p><pre>{e(json.dumps(step['arguments'], ensure_ascii=False))}"
        f"</pre><p><code>args = json.loads(arguments)</code> makes it a dict:</p>"
        f"<pre>{parsed}</pre><p>and the loop calls:</p>"
        f"<pre>{e(wire_text.python_call(step['name'], step['parsed']))}</pre>{result}</div>"
    )


def tree(value: object, label: str, marked_calls: set[int], top: bool = False,
         path: tuple = ()) -> str:  # fmt: skip
    """value as nested details/summary: folded, but for the way to choices[0].message and to
    each tool call's arguments (open, and the calls' marked) in a response (top)."""
    on_way = top and on_path(path, marked_calls)
    marked = on_way and len(path) >= 4
    opened = " open" if top and (not path or on_way) else ""
    cls = ' class="marked"' if marked else ""
    key = f'<span class="key">{e(label)}</span>'
    if isinstance(value, dict):
        items = [tree(v, json.dumps(k, ensure_ascii=False), marked_calls, top, (*path, k))
                 for k, v in value.items()]  # fmt: skip
        brief = f"{{{len(value)} key{'s' if len(value) != 1 else ''}}}"
    elif isinstance(value, list):
        items = [tree(v, f"[{i}]", marked_calls, top, (*path, i)) for i, v in enumerate(value)]
        brief = f"[{len(value)} item{'s' if len(value) != 1 else ''}]"
    else:
        leaf = e(json.dumps(value, ensure_ascii=False))
        return f'<li{cls}><span class="leaf">{key}: <code>{leaf}</code></span></li>'
    inner = f"<details{opened}><summary>{key} {brief}</summary><ul>{''.join(items)}</ul></details>"
    if not path:
        return f'<div class="tree"><ul><li>{inner}</li></ul></div>'
    return f"<li{cls}>{inner}</li>"


def on_path(path: tuple, marked_calls: set[int]) -> bool:
    """Whether path leads to choices[0].message, or along it to a tool call's arguments."""
    for step, wanted in zip(path, TOOL_CALLS_PATH, strict=False):
        if wanted is int:
            if step not in marked_calls:
                return False
        elif step != wanted:
            return False
    return len(path) <= len(TOOL_CALLS_PATH)
