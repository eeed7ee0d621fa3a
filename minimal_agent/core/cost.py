"""What a reply cost: DeepSeek's price table and peak hours, or the user's own prices.

Each reply is priced from its cache-hit, cache-miss and completion tokens at the time the server
stamped on it (`created`, Unix seconds, UTC). DeepSeek charges twice the off-peak price from 01:00
to 04:00 and from 06:00 to 10:00 UTC, Monday to Friday (start inclusive, end exclusive); every
other hour is off-peak.

Chinese public holidays are off-peak all day, but which days they are cannot be known offline:
their peak hours are priced as peak here, so on those days the figure is an upper bound, never an
under-count.

LLM_PRICE_INPUT, LLM_PRICE_CACHED_INPUT and LLM_PRICE_OUTPUT (per 1M tokens, in LLM_CURRENCY)
price any other server, or replace the table's entries for a model in it. They are flat (no peak
hours): they describe the user's own server or contract. A model with neither a table entry nor
these settings has no price (None): callers show its tokens only.

Pure (no I/O) and only the standard library at the top, so `agent.py --help` stays fast.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Mapping
from typing import NamedTuple

from minimal_agent.core import models

PEAK_FACTOR = 2
PEAK_HOURS = (range(1, 4), range(6, 10))  # UTC hours, Monday to Friday

CURRENCIES = {"USD": "$", "CNY": "¥"}  # the first is the default
# The override settings, in the order of a price triple (hit, miss, output).
OVERRIDES = ("LLM_PRICE_CACHED_INPUT", "LLM_PRICE_INPUT", "LLM_PRICE_OUTPUT")
SETTINGS = ("LLM_CURRENCY", *OVERRIDES)  # every setting prices_for reads


class PriceError(ValueError):
    """A price setting that cannot be used; the one-line message names it and what to set."""


class Prices(collections.namedtuple("Prices", "currency off_peak peak")):
    """A model's prices per 1M tokens in `currency`, each a (cache hit, cache miss, output)
    triple: `off_peak` outside DeepSeek's peak hours, `peak` within them (equal when flat)."""

    __slots__ = ()

    def cost(self, usage, created: float | None) -> float:
        """What a reply with this usage, stamped `created`, cost (see reply_cost)."""
        return reply_cost(usage, created, self)


def prices_for(model: str, settings: Mapping[str, str | None]) -> Prices | None:
    """The prices of `model` under the LLM_CURRENCY and LLM_PRICE_* values in `settings`
    (name -> text; a missing, empty or None value is unset), or None when it has no known price.
    Raises PriceError for a setting that cannot be used."""
    currency = currency_setting(settings)
    given = [price_setting(settings, name, currency) for name in OVERRIDES]
    entry = models.off_peak_prices(model)
    if entry is not None:
        table = entry[currency]
        off_peak = tuple(table[i] if price is None else price for i, price in enumerate(given))
        peak = tuple(
            table[i] * PEAK_FACTOR if price is None else price for i, price in enumerate(given)
        )
        return Prices(currency, off_peak, peak)
    if given == [None, None, None]:
        return None
    hit, miss, output = given
    pairs = (("LLM_PRICE_INPUT", miss), ("LLM_PRICE_OUTPUT", output))
    missing = [name for name, price in pairs if price is None]
    if missing:
        raise PriceError(
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing: to price "
            f"{model}, which is not in the price table, set both LLM_PRICE_INPUT and "
            f"LLM_PRICE_OUTPUT (per 1M tokens, in {currency}), or neither to show tokens only"
        )
    flat = (miss if hit is None else hit, miss, output)
    return Prices(currency, flat, flat)


def currency_setting(settings: Mapping[str, str | None]) -> str:
    """LLM_CURRENCY, upper-cased; USD when unset."""
    text = (settings.get("LLM_CURRENCY") or "").strip()
    if not text:
        return next(iter(CURRENCIES))
    if text.upper() not in CURRENCIES:
        raise PriceError(f"LLM_CURRENCY must be {' or '.join(CURRENCIES)}, not {text!r}")
    return text.upper()


def price_setting(settings: Mapping[str, str | None], name: str, currency: str) -> float | None:
    """The price a setting gives (per 1M tokens), or None when it is unset."""
    text = (settings.get(name) or "").strip()
    if not text:
        return None
    try:
        price = float(text)
    except ValueError:
        price = -1.0
    if not (math.isfinite(price) and price >= 0):
        raise PriceError(f"{name} must be a number >= 0 ({currency} per 1M tokens), not {text!r}")
    return price


def is_peak(created: float) -> bool:
    """Whether DeepSeek's peak price applied at `created` (Unix seconds): 01:00-04:00 or
    06:00-10:00 UTC on a Monday to Friday. A Chinese public holiday counts as peak (see above)."""
    moment = time.gmtime(created)
    return moment.tm_wday < 5 and any(moment.tm_hour in hours for hours in PEAK_HOURS)


def reply_cost(usage, created: float | None, prices: Prices) -> float:
    """What one reply cost, in prices.currency. `usage` is the SDK's usage object or a dict of
    its fields (see token_counts); `created` is the reply's Unix time, and a reply without one
    is priced as peak (an upper bound). Misses are the prompt tokens that were not hits, so no
    token is billed twice; reasoning tokens are already part of the completion tokens."""
    counts = token_counts(usage)
    hit = counts["cache_hit_tokens"]
    miss = max(counts["prompt_tokens"] - hit, 0)
    price_hit, price_miss, price_output = (
        prices.peak if created is None or is_peak(created) else prices.off_peak
    )
    total = hit * price_hit + miss * price_miss + counts["completion_tokens"] * price_output
    return total / 1_000_000


def money(amount: float, currency: str) -> str:
    """An amount for display, to the hundredth of a cent (or fen): $0.0042, ¥1.2500."""
    if currency not in CURRENCIES:
        raise PriceError(f"the currency must be {' or '.join(CURRENCIES)}, not {currency!r}")
    return f"{CURRENCIES[currency]}{amount:.4f}"


class Tokens(NamedTuple):
    """The tokens of a reply (token_counts gives them as a dict), or of many added up."""

    prompt_tokens: int = 0
    cache_hit_tokens: int = 0
    completion_tokens: int = 0


class Totals(NamedTuple):  # not a dataclass: its import (inspect) slows every start
    """What a turn, or the whole session, used: its requests (steps), its tool calls, its
    tokens, what they cost (in the prices' currency), and how many replies reported no usage
    (unknown: then what they cost cannot be known). A value: the session replaces its own."""

    steps: int = 0
    tool_calls: int = 0
    usage: Tokens = Tokens()
    cost: float = 0.0
    unknown: int = 0

    def with_reply(self, counts: dict[str, int], spent: float | None, known: bool) -> Totals:
        """These totals with a reply's token counts (token_counts) and cost added."""
        usage = Tokens(*(total + counts[name] for name, total in self.usage._asdict().items()))
        return self._replace(usage=usage, cost=self.cost + (spent or 0),
                             unknown=self.unknown + (not known))  # fmt: skip

    def fields(self) -> dict:
        """As run() and chat() return them: usage as a dict."""
        return {**self._asdict(), "usage": self.usage._asdict()}


def token_counts(usage) -> dict[str, int]:
    """{"prompt_tokens", "cache_hit_tokens", "completion_tokens"} of a reply's usage: the SDK's
    usage object (DeepSeek's fields are in its model_extra) or a dict; None counts as nothing.

    The hits are DeepSeek's prompt_cache_hit_tokens, else the OpenAI-style
    prompt_tokens_details.cached_tokens (the same count; never both added), else 0.
    """
    hit = count(usage, "prompt_cache_hit_tokens")
    if hit is None:
        hit = count(field(usage, "prompt_tokens_details"), "cached_tokens")
    prompt = count(usage, "prompt_tokens")
    if prompt is None:  # hit + miss is the prompt on DeepSeek
        prompt = (hit or 0) + (count(usage, "prompt_cache_miss_tokens") or 0)
    return Tokens(prompt, hit or 0, count(usage, "completion_tokens") or 0)._asdict()


def usage_known(usage) -> bool:
    """Whether a reply's usage gives its token counts (some servers send none, or nulls)."""
    return any(count(usage, name) is not None for name in ("prompt_tokens", "completion_tokens"))


def field(record, name: str):
    """A field of a dict or an object (an attribute, or an extra field of a pydantic model)."""
    if record is None:
        return None
    if isinstance(record, Mapping):
        return record.get(name)
    value = getattr(record, name, None)
    if value is None:
        value = (getattr(record, "model_extra", None) or {}).get(name)
    return value


def count(record, name: str) -> int | None:
    """A token count field as a whole number >= 0, or None when it is absent or not a number."""
    value = field(record, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return max(int(value), 0)
