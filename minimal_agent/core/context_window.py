"""Keep the conversation inside the model's context window.

How large the window is, is window_probe.py's question. A server's "the context is full" error
is recognized here, at the end: is_context_overflow(), window_in_error().

Compaction, pure functions over chat messages (never changed in place): estimate_tokens(),
elide_tool_results() (step 1: the oldest tool results become short notes), summary_split(),
summary_request() and summary_conversation() (step 2: older turns become a summary the model
writes in one request). result_cap() keeps one tool result from filling the window;
truncated() and truncation_warning() notice a server (Ollama) that cut the conversation
silently.

Window holds the state across requests. The full history is append only and never changed
here; what is sent is Window.view(messages): the compacted prefix of the last compaction, then
every message that came after it. Each request's view extends the last one, so a provider's
prefix cache keeps hitting, until the next compaction starts a new prefix. A compaction
gives a record for the transcript, {"event": "compaction", "kind", "covers", "messages",
"tokens_before", "tokens_after"}, from which Window.restore() rebuilds the state on resume.

Token counts are estimates: the last reply's prompt_tokens (the server's own count for what it
was sent, tools and template included) plus the UTF-8 bytes of the JSON of every message added
since, divided by 3. Tokenizers average about 4 bytes a token on English and code and less
than 3 bytes a token only on unusual text (long runs of digits, base64, some scripts), so
bytes / 3 over-estimates in the common case: compaction comes a little early rather than too
late. Where it is wrong anyway, the server's overflow error is the backstop (on_overflow).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping

from minimal_agent.common.text import one_line, short_arguments
from minimal_agent.core.replies import without_thinking

# --- Settings ---------------------------------------------------------------------------------

DEFAULT_COMPACT_AT = 0.9  # LLM_COMPACT_AT: compact when the estimate reaches this share
AIM = 0.7  # a compaction aims at this share of the threshold (0.9 -> 63% of the window), so
# the next one is many steps away
BYTES_PER_TOKEN = 3  # see the module's docstring
SMALLEST_WINDOW = 2_048  # below this estimate no window needs knowing yet: the agent's tools
# and system prompt alone take a third of it
MIN_RESULT_CHARS = 1_000  # result_cap() never goes below this
SUMMARY_TOKENS = (512, 8_192)  # the summary's max_tokens: an eighth of the window, within these
ELIDED = "[elided to save context"  # how every note that replaced a tool result begins
SUMMARY_HEADING = "Summary of the earlier conversation"
SUMMARY_END = "(The summary ends here. The user's latest message:)"


# --- Settings read from the environment (the caller passes their text) ------------------------


def compact_at_setting(text: str | float | None) -> float:
    """LLM_COMPACT_AT as a share of the window (0 < x <= 1); unset: 0.9. ValueError, one line,
    otherwise."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return DEFAULT_COMPACT_AT
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not 0 < share <= 1:  # nan fails too
        raise ValueError(
            "LLM_COMPACT_AT must be a number above 0 and at most 1 (the share of the context "
            f"window at which the conversation is compacted, such as 0.9), not {text!r}"
        )
    return share


def context_tokens_setting(text: str | int | None) -> int | None:
    """LLM_CONTEXT_TOKENS as a whole number of tokens, or None when unset. ValueError, one
    line, otherwise."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    try:
        tokens = int(text.strip().replace("_", "")) if isinstance(text, str) else int(text)
    except ValueError:
        tokens = 0
    if tokens <= 0 or isinstance(text, bool):
        raise ValueError(
            "LLM_CONTEXT_TOKENS must be a whole number above 0 (the model's context window in "
            f"tokens, such as 131072), not {text!r}"
        )
    return tokens


# --- Token estimates --------------------------------------------------------------------------


def json_bytes(value: object) -> int:
    """The UTF-8 bytes of value as compact JSON."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


def tokens_in_bytes(size: int) -> int:
    return -(-size // BYTES_PER_TOKEN)


def estimate_tokens(
    messages: list[dict], prompt_tokens: int | None = None, counted: int = 0, overhead: int = 0
) -> int:
    """The prompt tokens of sending messages: prompt_tokens (the last reply's count, for the
    first `counted` of them, as that request sent them) plus an over-estimate for the rest;
    without prompt_tokens, an over-estimate for all, plus overhead (the tools' schemas)."""
    if prompt_tokens is None:
        return tokens_in_bytes(json_bytes(messages)) + overhead
    added = messages[counted:]
    return prompt_tokens + (tokens_in_bytes(json_bytes(added)) if added else 0)


def result_cap(window: int | None, default: int) -> int:
    """The most characters one tool result may have: a quarter of the window at about 3
    characters a token, never more than default (the agent's own cap), never less than
    MIN_RESULT_CHARS."""
    if not window:
        return default
    return max(MIN_RESULT_CHARS, min(default, window * BYTES_PER_TOKEN // 4))


# --- Step 1: the oldest tool results become notes ---------------------------------------------


def elide_tool_results(
    messages: list[dict], target: int | None = None, *, force: bool = False, overhead: int = 0
) -> list[dict]:
    """The messages with the oldest tool results replaced by short notes, oldest first, until
    estimate_tokens(result) + overhead is at most target (None: every one that can go).

    Each note keeps its tool_call_id and says which call it answered, how long the result was,
    and that the tool can be called again. Everything else is the same message objects, so
    assistant messages (tool calls, reasoning) stay byte for byte. The latest step (the tool
    results after the last assistant message) stays whole unless force (/compact). A result
    shorter than its note stays too. A new list; messages is not changed.
    """
    calls = {
        call.get("id"): call
        for message in messages
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    }
    latest = last_index(messages, "assistant")
    result = list(messages)
    sizes = [json_bytes(message) for message in result]
    total = sum(sizes) + len(sizes) + 1  # the commas and brackets of the array
    for index, message in enumerate(result):
        if target is not None and tokens_in_bytes(total) + overhead <= target:
            break
        if message.get("role") != "tool" or (index > latest and not force):
            continue
        content = message.get("content")
        if not isinstance(content, str) or content.startswith(ELIDED):
            continue
        note = elision_note(calls.get(message.get("tool_call_id")), len(content))
        if len(note) >= len(content):
            continue
        result[index] = {**message, "content": note}
        size = json_bytes(result[index])
        total += size - sizes[index]
        sizes[index] = size
    return result


def elision_note(call: dict | None, length: int) -> str:
    """What a tool result is replaced by."""
    return (
        f"{ELIDED}: the result of {call_text(call)} was {length:,} characters long; call the "
        "tool again if you need it]"
    )


def call_text(call: dict | None, width: int = 120) -> str:
    """A tool call as name(key='value', ...), arguments shortened."""
    if not isinstance(call, dict):
        return "this tool call"
    function = call.get("function") or {}
    name, arguments = function.get("name") or "?", str(function.get("arguments") or "")
    return f"{name}({one_line(short_arguments(arguments), width)})"


def last_index(messages: list[dict], role: str) -> int:
    """The index of the last message with role, or -1."""
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == role), -1)


# --- Step 2: older turns become a summary -----------------------------------------------------

SUMMARY_INSTRUCTIONS = (
    "You write the summary that replaces the earlier part of a conversation between a user and "
    "a coding agent: it no longer fits the model's context window. The agent goes on from your "
    "summary alone, so keep what it needs: what the user asked for and any constraints they "
    "set, decisions made, the files read, created or changed (exact paths), commands run and "
    "what they showed, errors and how they were dealt with, what is done and what is left to "
    "do. Tool results appear shortened; say what they showed where it matters. Be specific and "
    "brief. Write plain text, with no preamble."
)


def summary_split(
    messages: list[dict], tail_tokens: int | None = None, *, force: bool = False
) -> tuple[list[dict], list[dict], list[dict]]:
    """(head, older, tail) for a summary: head is the system prompt (kept), older what the
    summary is written from, tail what is kept whole after the summary.

    The tail is the latest step (the last assistant message, its tool results) and the last
    user message: every message from that user message on if they come to at most tail_tokens
    (None: no limit), else that user message and the latest step only, the steps between them
    going into the summary (older then holds that user message too, for the summary's sake).
    force (/compact): the tail is the latest step only, and so are whatever follows it.
    """
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    body = messages[len(head) :]
    step, user = last_index(body, "assistant"), last_index(body, "user")
    if step < 0:  # no reply yet: nothing but user messages to summarise
        start = max(user, 0)
        return head, body[:start], body[start:]
    if force or user < 0 or user > step:
        return head, body[:step], body[step:]
    turn = body[user:]
    if user > 0 and (tail_tokens is None or estimate_tokens(turn) <= tail_tokens):
        return head, body[:user], turn
    return head, body[:step], [body[user], *body[step:]]


def summary_request(older: list[dict], budget: int) -> list[dict]:
    """The messages of the one request (no tools) that asks for the summary of older, at most
    budget tokens by estimate_tokens: the conversation as text, shortened to fit (tool results
    first, then long texts, then the oldest messages but the first left out)."""
    calls = {
        call.get("id"): call
        for message in older
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    }
    ask = "Summarise this conversation:\n\n<conversation>\n{}\n</conversation>"
    system = {"role": "system", "content": SUMMARY_INSTRUCTIONS}

    def request(text: str) -> list[dict]:
        return [system, {"role": "user", "content": ask.format(text)}]

    def fits(text: str) -> bool:
        return estimate_tokens(request(text)) <= budget

    blocks: list[str] = []
    for text_limit, result_limit in ((8_000, 2_000), (4_000, 800), (2_000, 300), (600, 120)):
        blocks = [as_text(message, calls, text_limit, result_limit) for message in older]
        if fits("\n\n".join(blocks)):
            return request("\n\n".join(blocks))
    # Still too long: leave out the oldest messages, but the first (usually the task).
    first, rest = blocks[:1], blocks[1:]
    while rest:
        rest.pop(0)
        gap = f"[... {len(blocks) - 1 - len(rest)} messages left out ...]"
        text = "\n\n".join([*first, gap, *rest])
        if fits(text):
            return request(text)
    # A single huge message: its middle left out until the rest fits.
    text = "\n\n".join(blocks)
    chars = len(text)
    while chars > 0:
        chars = min(chars - 1, int(chars * 0.9))
        if fits(middle_out(text, chars)):
            return request(middle_out(text, chars))
    return request("[... the conversation is too long to quote ...]")


def as_text(message: dict, calls: dict, text_limit: int, result_limit: int) -> str:
    """One message as plain text for the summary request (reasoning left out)."""
    role = message.get("role")
    content = text_of(message.get("content"))
    if role == "tool":
        call = calls.get(message.get("tool_call_id"))
        return f"[tool result of {call_text(call)}]\n{middle_out(content, result_limit)}"
    lines = [f"[{role}]"]
    if content:
        lines.append(middle_out(content, text_limit))
    for call in message.get("tool_calls") or []:
        lines.append(f"(calls {call_text(call, 300)})")
    return "\n".join(lines)


def text_of(content: object) -> str:
    """A message's content as text (content parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def middle_out(text: str, limit: int) -> str:
    """text with its middle left out (and said so) if it is longer than limit characters."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]}\n[... {len(text) - 2 * keep} characters left out ...]\n{text[-keep:]}"


def summary_conversation(head: list[dict], summary: str, tail: list[dict]) -> list[dict]:
    """The compacted conversation: head (the system prompt), a user message carrying the
    summary, labelled as such, then the tail. A tail that begins with a user message has the
    summary put before its text instead: some servers (Gemma's template) refuse two user
    messages in a row. ValueError if the summary is empty."""
    text = without_thinking(summary or "").strip()
    if not text:
        raise ValueError("the model's summary of the conversation is empty")
    note = (
        f"{SUMMARY_HEADING} (it no longer fitted the model's context window, so it was "
        "replaced by this summary; tool results from then are not shown: call a tool again if "
        f"you need one):\n\n{text}"
    )
    if not (tail and tail[0].get("role") == "user"):
        return [*head, {"role": "user", "content": note}, *tail]
    note += f"\n\n{SUMMARY_END}\n\n"
    content = tail[0].get("content")
    if isinstance(content, list):  # content parts: the note as one more, first
        joined = [{"type": "text", "text": note}, *content]
    else:
        joined = note + text_of(content)
    return [*head, {**tail[0], "content": joined}, *tail[1:]]


# --- Silent truncation (Ollama) ---------------------------------------------------------------


def truncated(before: int | None, after: int | None, only_grew: bool, added: int = 0) -> bool:
    """Whether the server cut the conversation: this reply's prompt_tokens (after) fell below
    the previous request's (before) plus added, the fewest tokens the messages added since can
    have (0 if unknown; added_at_least() gives one), although the conversation only grew. A
    small shortfall is allowed for (a template may render the last message differently once
    more follows). Ollama drops the oldest messages only until the prompt fits, so once the
    window is full the count stays near it rather than falling: added is what shows that."""
    if not only_grew or before is None or after is None:
        return False
    return after < before + added - max(32, before // 50)


def added_at_least(messages: list[dict]) -> int:
    """Fewer tokens than messages can have: a token is at most 8 bytes of their JSON for any
    text a tokenizer has seen (runs of spaces and common words are 4 to 8)."""
    return json_bytes(messages) // 8 if messages else 0


def truncation_warning(before: int, after: int, server: str | None = None) -> str:
    """One line for the user: the server dropped the start of the conversation; how to give
    the model a larger window (server: "ollama", "llamacpp", or None for both)."""
    ways = {
        "ollama": "Ollama: num_ctx in the model's Modelfile or OLLAMA_CONTEXT_LENGTH=N for the "
        "server",
        "llamacpp": "llama.cpp: llama-server -c N",
    }
    chosen = [ways[server]] if server in ways else list(ways.values())
    return (
        f"warning: the server seems to have cut the conversation to fit its context window "
        f"(this request counted {after:,} prompt tokens, the previous one {before:,}, though "
        "the conversation only grew): the model no longer sees its start. Give the model a "
        f"larger window ({'; '.join(chosen)}), or set LLM_CONTEXT_TOKENS to the window the "
        "server has, so the agent compacts in time"
    )


# --- The state across requests ----------------------------------------------------------------

Summarize = Callable[[list[dict], int], "str | None"]  # (request messages, max_tokens) -> text


class Window:
    """What is sent to the model, request after request, for one conversation.

    size: the window in tokens, None if unknown, or a function that returns it (find_window()),
    called when the size is first needed. compact_at: the share of the window at which to
    compact. max_tokens: the request's max_tokens, which counts against the window (DeepSeek).
    tools: the request's tool schemas (they count too).

    Before each request: before_request(messages, summarize) (a compaction record or None),
    then view(messages) is what to send. After the reply: after_reply(view, prompt_tokens). On
    an overflow error: on_overflow(error, messages, summarize), then send view() again if it
    gave a record. /compact: compact(messages, summarize). Resuming: restore(record, messages).
    """

    def __init__(
        self,
        size: int | None | Callable[[], int | None] = None,
        *,
        compact_at: float = DEFAULT_COMPACT_AT,
        max_tokens: int | None = None,
        tools: list[dict] | None = None,
    ) -> None:
        self.compact_at = compact_at_setting(compact_at)
        self._size = size
        self.max_tokens = max_tokens
        self.overhead = tokens_in_bytes(json_bytes(tools)) if tools else 0
        self.prefix: list[dict] = []  # the last compaction's conversation ([]: none yet)
        self.start = 0  # the full history's messages from here on follow the prefix
        self.known: tuple[int, int] | None = None  # (messages sent, prompt_tokens) of the last
        # reply, for the view as it is now (None after a compaction)

    @property
    def size(self) -> int | None:
        if callable(self._size):
            self._size = self._size()
        return self._size

    @size.setter
    def size(self, tokens: int | None) -> None:
        self._size = tokens

    @property
    def limit(self) -> int | None:
        """Compact when the prompt and max_tokens together reach this many tokens."""
        return int(self.size * self.compact_at) if self.size else None

    @property
    def target(self) -> int | None:
        """A compaction aims at this many prompt tokens."""
        return max(0, int(self.limit * AIM) - self.reserve) if self.size else None

    @property
    def reserve(self) -> int:
        """The tokens max_tokens keeps for the reply (at most half the window)."""
        return min(self.max_tokens or 0, (self.size or 0) // 2)

    @property
    def summary_max_tokens(self) -> int:
        low, high = SUMMARY_TOKENS
        return max(low, min(high, (self.size or 0) // 8))

    def view(self, messages: list[dict]) -> list[dict]:
        """What to send: the compacted prefix, then the messages after what it covers (a new
        list; messages is not changed)."""
        return [*self.prefix, *messages[self.start :]]

    def estimate(self, messages: list[dict]) -> int:
        """Estimated prompt tokens of sending view(messages)."""
        view = self.view(messages)
        if self.known and self.known[0] <= len(view):
            return estimate_tokens(view, self.known[1], self.known[0])
        return estimate_tokens(view, overhead=self.overhead)

    def needs_compaction(self, messages: list[dict]) -> bool:
        """Whether the next request would reach the threshold. While the estimate is small,
        the window is not asked for (nor waited for)."""
        estimate = self.estimate(messages)
        if estimate + (self.max_tokens or 0) < SMALLEST_WINDOW or not self.size:
            return False
        return estimate + self.reserve >= self.limit

    def before_request(self, messages: list[dict], summarize: Summarize | None = None):
        """Compact if the next request would reach the threshold: the oldest tool results
        first; if that is not enough and summarize is given, the older turns into a summary.
        summarize(request_messages, max_tokens) sends one request without tools and returns
        the reply's text (None or "" if it could not). If the request would still not fit the
        window, the latest step's tool results go too (see on_overflow). Returns the compaction
        record for the transcript, or None if nothing was compacted."""
        if not self.needs_compaction(messages):
            return None
        return self._shrunk(messages, summarize, self.target, self.size - self.reserve)

    def compact(self, messages: list[dict], summarize: Summarize | None = None):
        """/compact: everything said so far, the last turn's tool results included; with
        summarize, into a summary, else every tool result into a note. The record, or None if
        there was nothing to compact."""
        return self._compact(messages, summarize, None, force=True)

    def on_overflow(self, error: object, messages: list[dict], summarize=None):
        """The server said the request does not fit: learn the window from the error (or take
        it to be smaller than what was sent), and compact below it. The record, or None if
        nothing more can be compacted (then the error stands). The latest step's tool results
        go too if nothing else is enough: one result larger than the window (a big file read
        before the window was known) is what overflows most often; the model can call the tool
        again, and gets a result capped for the smaller window then."""
        sent = self.estimate(messages) + self.reserve
        named = window_in_error(error)
        if named:
            self.size = named
        elif not self.size or sent < self.size:
            self.size = sent  # the window is smaller than this, or it would have fitted
        target = min(self.target, max(0, int(sent * AIM) - self.reserve))
        return self._shrunk(messages, summarize, target, target)

    def _shrunk(self, messages, summarize, target: int, most: int):
        """Compact towards target; if the view is still above most tokens, the latest step's
        tool results become notes too. The record, or None if nothing changed."""
        before = self.estimate(messages)
        record = self._compact(messages, summarize, target)
        view = self.view(messages)
        if self._tokens(view) <= most:
            return record
        elided = elide_tool_results(view, target, force=True, overhead=self.overhead)
        if all(new is old for new, old in zip(elided, view, strict=True)):
            return record
        return self._record(messages, elided, record["kind"] if record else "tool results", before)

    def _compact(self, messages, summarize, target, force: bool = False):
        view = self.view(messages)
        before = self.estimate(messages)
        elided = elide_tool_results(view, target, force=force, overhead=self.overhead)
        changed = any(new is not old for new, old in zip(elided, view, strict=True))
        if summarize is not None and (target is None or self._tokens(elided) > target):
            summarised = self._summarised(view, summarize, target, force, before)
            if summarised is not None and self._tokens(summarised) < self._tokens(view):
                return self._record(messages, summarised, "summary", before)
        return self._record(messages, elided, "tool results", before) if changed else None

    def _summarised(self, view, summarize, target, force, before) -> list[dict] | None:
        """The view with its older turns replaced by the model's summary, or None."""
        goal = target if target is not None else self.limit or before
        room = goal - self._tokens(view[:1]) - self.summary_max_tokens  # for the kept tail
        head, older, tail = summary_split(view, max(0, room), force=force)
        replaced = [message for message in older if not any(message is kept for kept in tail)]
        if not replaced:
            return None  # nothing the summary would replace
        if not force and estimate_tokens(replaced) <= self.summary_max_tokens:
            return None  # no longer than a summary may be (a summary, summarised again)
        # The request must fit the window. Unknown (/compact), the view's size will do: it was
        # sent before, and its text is shorter than its JSON.
        budget = (self.limit or max(before, SMALLEST_WINDOW)) - self.summary_max_tokens
        summary = summarize(summary_request(older, max(budget, 0)), self.summary_max_tokens)
        if not without_thinking(summary or "").strip():
            return None
        compacted = summary_conversation(head, summary, tail)
        if force or (target is not None and self._tokens(compacted) > target):
            # The tail alone is too long: its tool results go too, the latest step's included.
            compacted = elide_tool_results(compacted, target, force=True, overhead=self.overhead)
        return compacted

    def _tokens(self, messages: list[dict]) -> int:
        return estimate_tokens(messages, overhead=self.overhead)

    def _record(self, messages, compacted: list[dict], kind: str, before: int) -> dict:
        self.prefix, self.start, self.known = list(compacted), len(messages), None
        return {
            "event": "compaction",
            "kind": kind,
            "covers": len(messages),
            "messages": list(compacted),
            "tokens_before": before,
            "tokens_after": self._tokens(compacted),
        }

    def after_reply(
        self, sent: list[dict], prompt_tokens: int | None, server: str | None = None
    ) -> str | None:
        """Note the reply's prompt_tokens for the view that was sent; returns a warning if the
        server cut the conversation silently (and then takes the window to be no larger than
        what it did take, so the next request compacts). server names the way to a larger
        window in the warning ("ollama", "llamacpp")."""
        if prompt_tokens is None:
            return None
        warning = None
        if self.known and self.known[0] <= len(sent):
            # A new user message may shrink the prompt honestly (templates that drop earlier
            # turns' reasoning), so only a step within a turn is judged.
            added = sent[self.known[0] :]
            only_grew = all(message.get("role") != "user" for message in added)
            before = self.known[1]
            if truncated(before, prompt_tokens, only_grew, added_at_least(added)):
                warning = truncation_warning(before, prompt_tokens, server)
                taken = max(before, prompt_tokens)
                if not self.size or self.size > taken:
                    self.size = taken
        self.known = (len(sent), prompt_tokens)
        return warning

    def restore(self, record: Mapping, messages: list[dict] | None = None) -> None:
        """Go on from a compaction record of the transcript (the last one): its messages are
        sent instead of the first `covers` messages of the history. ValueError, one line, if
        the record does not fit messages."""
        compacted, covers = record.get("messages"), record.get("covers")
        if not isinstance(compacted, list) or not all(isinstance(m, dict) for m in compacted):
            raise ValueError("the compaction record has no list of messages")
        if isinstance(covers, bool) or not isinstance(covers, int) or covers < 0:
            raise ValueError(f"the compaction record covers {covers!r} messages, not a count")
        if messages is not None and covers > len(messages):
            raise ValueError(
                f"the compaction record covers {covers} messages, but the history has only "
                f"{len(messages)}"
            )
        self.prefix, self.start, self.known = list(compacted), covers, None


def split_transcript(entries: list[dict]) -> tuple[list[dict], dict | None]:
    """A transcript's entries (messages and events, in file order) as its messages and its
    last compaction record. ValueError, one line, if a record does not cover exactly the
    messages before it."""
    messages: list[dict] = []
    record = None
    for entry in entries:
        if entry.get("event") == "compaction":
            if entry.get("covers") != len(messages):
                raise ValueError(
                    f"a compaction record covers {entry.get('covers')!r} messages, but "
                    f"{len(messages)} come before it"
                )
            record = entry
        elif "event" not in entry:
            messages.append(entry)
    return messages, record


def describe(record: Mapping, window: int | None = None) -> str:
    """One line for the user about a compaction."""
    what = {
        "tool results": "old tool results replaced by short notes",
        "summary": "earlier turns replaced by a summary",
    }.get(record.get("kind"), str(record.get("kind")))
    of = f" of a {window:,}-token window" if window else ""
    return (
        f"context: compacted the conversation ({what}): about {record['tokens_before']:,} -> "
        f"{record['tokens_after']:,} tokens{of}"
    )


# --- A full context: whether the server said the conversation does not fit -------------

OVERFLOW = (  # what a server says when the conversation does not fit its context window
    r"maximum context length is"  # DeepSeek, vLLM (and OpenAI)
    r"|exceed_context_size_error|exceeds the available context size"  # llama.cpp
    r"|prompt is longer than the context length"  # Ollama with context shift off
    r"|context_length_exceeded"  # OpenAI's code
)


def is_context_overflow(error: object) -> bool:
    """Whether an API error (openai.APIStatusError, or anything with status_code, body or
    message) says the conversation does not fit the model's context window."""
    status = getattr(error, "status_code", None)
    if isinstance(status, int) and status < 400:
        return False
    return re.search(OVERFLOW, error_text(error), re.IGNORECASE) is not None


def window_in_error(error: object) -> int | None:
    """The window an overflow error names (DeepSeek, vLLM: "maximum context length is N";
    llama.cpp: n_ctx), or None (Ollama names none)."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and whole(inner.get("n_ctx")):
            return whole(inner["n_ctx"])
    text = error_text(error)
    match = re.search(r"maximum context length is (\d+)|context size \((\d+) tokens\)", text)
    return whole(int(match.group(1) or match.group(2))) if match else None


def error_text(error: object) -> str:
    parts = [str(getattr(error, "message", "") or "")]
    body = getattr(error, "body", None)
    if body is not None:
        parts.append(body if isinstance(body, str) else json.dumps(body, default=str))
    parts.append(str(error))
    return "\n".join(parts)


def whole(value: object) -> int | None:
    """value if it is a whole number of tokens above 0, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value >= 1 and value == int(value) else None
