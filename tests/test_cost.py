"""minimal_agent/core/cost.py: what a reply cost. Expected amounts are worked out by hand from
DeepSeek's table (per 1M tokens, off-peak; peak is twice): flash USD 0.003 / 0.15 / 0.60, v4-pro USD
0.022 / 0.66 / 1.98, flash CNY 0.02 / 1 / 4 (cache hit / cache miss / output)."""

from __future__ import annotations

import calendar
import subprocess
import sys
from pathlib import Path

import pytest
from openai.types import CompletionUsage

from minimal_agent.core import cost, models

M = 1_000_000


def utc(*moment: int) -> int:
    """Unix seconds of a UTC date and time: utc(2026, 11, 18, 2) is Wednesday 02:00."""
    return calendar.timegm((*moment, *(0,) * (6 - len(moment))))


WEDNESDAY_2AM = utc(2026, 11, 18, 2)  # peak
SATURDAY_2AM = utc(2026, 11, 21, 2)  # off-peak: the weekend


def deepseek_usage(hit: int, miss: int, completion: int) -> dict:
    """A usage as DeepSeek sends it (both fields: hit + miss = prompt)."""
    return {
        "prompt_tokens": hit + miss,
        "completion_tokens": completion,
        "total_tokens": hit + miss + completion,
        "prompt_cache_hit_tokens": hit,
        "prompt_cache_miss_tokens": miss,
        "prompt_tokens_details": {"cached_tokens": hit},
    }


FLASH = cost.prices_for("deepseek-flash", {})


# --- Peak hours ---------------------------------------------------------------------------


def test_the_dates_used_are_the_weekdays_they_claim():
    assert calendar.weekday(2026, 11, 18) == calendar.WEDNESDAY
    assert calendar.weekday(2026, 11, 20) == calendar.FRIDAY
    assert calendar.weekday(2026, 11, 21) == calendar.SATURDAY


@pytest.mark.parametrize(
    "moment, peak",
    [
        ((0, 59, 59), False),
        ((1, 0, 0), True),
        ((3, 59, 59), True),
        ((4, 0, 0), False),
        ((5, 59, 0), False),
        ((5, 59, 59), False),
        ((6, 0, 0), True),
        ((9, 59, 59), True),
        ((10, 0, 0), False),
        ((12, 0, 0), False),
        ((23, 59, 59), False),
    ],
)
def test_peak_hours_start_inclusive_end_exclusive(moment, peak):
    assert cost.is_peak(utc(2026, 11, 18, *moment)) is peak


def test_friday_is_peak_and_saturday_and_sunday_are_not():
    assert cost.is_peak(utc(2026, 11, 20, 9, 59, 59))  # Friday
    assert not cost.is_peak(utc(2026, 11, 21, 1))  # Saturday
    assert not cost.is_peak(utc(2026, 11, 22, 6))  # Sunday
    assert cost.is_peak(utc(2026, 11, 16, 1))  # Monday


def test_a_boundary_prices_the_reply_on_its_side():
    usage = deepseek_usage(0, M, 0)  # 1M misses: 0.15 off-peak, 0.30 peak
    assert cost.reply_cost(usage, utc(2026, 11, 18, 0, 59, 59), FLASH) == pytest.approx(0.15)
    assert cost.reply_cost(usage, utc(2026, 11, 18, 1), FLASH) == pytest.approx(0.30)
    assert cost.reply_cost(usage, utc(2026, 11, 18, 10), FLASH) == pytest.approx(0.15)
    assert cost.reply_cost(usage, utc(2026, 11, 20, 6), FLASH) == pytest.approx(0.30)  # Friday
    assert cost.reply_cost(usage, utc(2026, 11, 21, 6), FLASH) == pytest.approx(0.15)  # Saturday


# --- Pricing a reply ----------------------------------------------------------------------


def test_one_million_of_each_at_peak_and_off_peak():
    assert cost.reply_cost(deepseek_usage(0, M, 0), WEDNESDAY_2AM, FLASH) == pytest.approx(0.30)
    assert cost.reply_cost(deepseek_usage(M, 0, 0), WEDNESDAY_2AM, FLASH) == pytest.approx(0.006)
    assert cost.reply_cost(deepseek_usage(0, 0, M), WEDNESDAY_2AM, FLASH) == pytest.approx(1.20)
    assert cost.reply_cost(deepseek_usage(0, 0, M), SATURDAY_2AM, FLASH) == pytest.approx(0.60)


def test_weekday_and_saturday_with_known_counts():
    usage = deepseek_usage(hit=200_000, miss=300_000, completion=50_000)
    # peak: 0.2 * 0.006 + 0.3 * 0.30 + 0.05 * 1.20 = 0.0012 + 0.09 + 0.06
    assert cost.reply_cost(usage, WEDNESDAY_2AM, FLASH) == pytest.approx(0.1512)
    # off-peak: 0.2 * 0.003 + 0.3 * 0.15 + 0.05 * 0.60 = 0.0006 + 0.045 + 0.03
    assert cost.reply_cost(usage, SATURDAY_2AM, FLASH) == pytest.approx(0.0756)
    assert FLASH.cost(usage, SATURDAY_2AM) == pytest.approx(0.0756)


def test_a_real_deepseek_reply_at_weekday_2am():
    usage = deepseek_usage(hit=610, miss=1419, completion=40)
    # 610 * 0.006 + 1419 * 0.30 + 40 * 1.20 = 3.66 + 425.7 + 48 = 477.36 per 1M
    amount = cost.reply_cost(usage, WEDNESDAY_2AM, FLASH)
    assert amount == pytest.approx(0.00047736)
    assert cost.money(amount, "USD") == "$0.0005"


def test_hits_are_billed_once():
    """aider's bug: hits billed at the hit price and again as part of the prompt."""
    usage = deepseek_usage(hit=M, miss=M, completion=0)
    assert cost.reply_cost(usage, SATURDAY_2AM, FLASH) == pytest.approx(0.003 + 0.15)


def test_reasoning_tokens_are_not_added_to_the_completion_tokens():
    usage = {
        "prompt_tokens": 0,
        "completion_tokens": M,
        "completion_tokens_details": {"reasoning_tokens": 600_000},
    }
    assert cost.reply_cost(usage, SATURDAY_2AM, FLASH) == pytest.approx(0.60)


def test_the_openai_shape_cached_tokens():
    usage = {
        "prompt_tokens": 2 * M,
        "completion_tokens": 0,
        "prompt_tokens_details": {"cached_tokens": M},
    }
    assert cost.reply_cost(usage, SATURDAY_2AM, FLASH) == pytest.approx(0.003 + 0.15)


def test_no_cache_information_means_every_prompt_token_is_a_miss():
    usage = {"prompt_tokens": M, "completion_tokens": 0, "prompt_tokens_details": None}
    assert cost.reply_cost(usage, SATURDAY_2AM, FLASH) == pytest.approx(0.15)
    assert cost.reply_cost({"prompt_tokens": M}, SATURDAY_2AM, FLASH) == pytest.approx(0.15)


def test_a_reply_without_a_time_is_priced_as_peak():
    assert cost.reply_cost(deepseek_usage(0, M, 0), None, FLASH) == pytest.approx(0.30)


def test_no_usage_costs_nothing():
    assert cost.reply_cost(None, WEDNESDAY_2AM, FLASH) == 0
    assert cost.reply_cost({}, WEDNESDAY_2AM, FLASH) == 0


def test_deepseek_v4_pro():
    prices = cost.prices_for("deepseek-v4-pro", {})
    usage = deepseek_usage(hit=M, miss=M, completion=M)
    assert prices.cost(usage, SATURDAY_2AM) == pytest.approx(0.022 + 0.66 + 1.98)
    assert prices.cost(usage, WEDNESDAY_2AM) == pytest.approx(0.044 + 1.32 + 3.96)


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4-flash-vision-exp"])
def test_legacy_names_are_billed_as_flash(model):
    prices = cost.prices_for(model, {})
    assert prices == FLASH
    assert prices.cost(deepseek_usage(0, 0, M), WEDNESDAY_2AM) == pytest.approx(1.20)


def test_cny():
    prices = cost.prices_for("deepseek-flash", {"LLM_CURRENCY": "CNY"})
    assert prices.currency == "CNY"
    usage = deepseek_usage(hit=M, miss=M, completion=M)
    assert prices.cost(usage, SATURDAY_2AM) == pytest.approx(0.02 + 1 + 4)
    assert prices.cost(usage, WEDNESDAY_2AM) == pytest.approx(0.04 + 2 + 8)
    pro = cost.prices_for("deepseek-v4-pro", {"LLM_CURRENCY": "CNY"})
    assert pro.cost(usage, WEDNESDAY_2AM) == pytest.approx(0.30 + 9 + 27)


def test_usd_is_the_default_currency():
    assert FLASH.currency == "USD"
    assert cost.prices_for("deepseek-flash", {"LLM_CURRENCY": ""}).currency == "USD"
    assert cost.prices_for("deepseek-flash", {"LLM_CURRENCY": " usd "}).currency == "USD"


# --- The SDK's usage object ---------------------------------------------------------------


def test_the_sdk_object_with_deepseek_fields_in_model_extra():
    usage = CompletionUsage.model_validate(deepseek_usage(hit=610, miss=1419, completion=40))
    assert usage.model_extra["prompt_cache_hit_tokens"] == 610
    counts = {"prompt_tokens": 2029, "cache_hit_tokens": 610, "completion_tokens": 40}
    assert cost.token_counts(usage) == counts
    assert cost.reply_cost(usage, WEDNESDAY_2AM, FLASH) == pytest.approx(0.00047736)


def test_the_sdk_object_with_only_cached_tokens():
    usage = CompletionUsage(
        prompt_tokens=2029,
        completion_tokens=40,
        total_tokens=2069,
        prompt_tokens_details={"cached_tokens": 610},
    )
    counts = {"prompt_tokens": 2029, "cache_hit_tokens": 610, "completion_tokens": 40}
    assert cost.token_counts(usage) == counts


def test_the_sdk_object_without_cache_information():
    usage = CompletionUsage(prompt_tokens=100, completion_tokens=5, total_tokens=105)
    counts = {"prompt_tokens": 100, "cache_hit_tokens": 0, "completion_tokens": 5}
    assert cost.token_counts(usage) == counts


def test_token_counts_of_dicts():
    assert cost.token_counts(deepseek_usage(3, 4, 5)) == {
        "prompt_tokens": 7,
        "cache_hit_tokens": 3,
        "completion_tokens": 5,
    }
    # DeepSeek's own field wins over the OpenAI-style one; they are never added
    both = {"prompt_tokens": 7, "prompt_cache_hit_tokens": 3, "prompt_tokens_details": {}}
    assert cost.token_counts(both)["cache_hit_tokens"] == 3
    # hit + miss stand in for a missing prompt_tokens
    split = {"prompt_cache_hit_tokens": 3, "prompt_cache_miss_tokens": 4}
    assert cost.token_counts(split)["prompt_tokens"] == 7
    assert cost.token_counts(None) == {
        "prompt_tokens": 0,
        "cache_hit_tokens": 0,
        "completion_tokens": 0,
    }


# --- LLM_PRICE_* overrides ----------------------------------------------------------------


def test_full_override_of_a_table_model_is_flat():
    settings = {"LLM_PRICE_INPUT": "1", "LLM_PRICE_CACHED_INPUT": "0.1", "LLM_PRICE_OUTPUT": "2"}
    prices = cost.prices_for("deepseek-flash", settings)
    usage = deepseek_usage(hit=M, miss=M, completion=M)
    assert prices.cost(usage, WEDNESDAY_2AM) == pytest.approx(0.1 + 1 + 2)
    assert prices.cost(usage, SATURDAY_2AM) == pytest.approx(0.1 + 1 + 2)


def test_partial_override_of_a_table_model_replaces_only_that_entry():
    prices = cost.prices_for("deepseek-flash", {"LLM_PRICE_OUTPUT": "5"})
    usage = deepseek_usage(hit=M, miss=M, completion=M)
    # hit and miss from the table (doubled at peak), output flat
    assert prices.cost(usage, WEDNESDAY_2AM) == pytest.approx(0.006 + 0.30 + 5)
    assert prices.cost(usage, SATURDAY_2AM) == pytest.approx(0.003 + 0.15 + 5)
    only_input = cost.prices_for("deepseek-flash", {"LLM_PRICE_INPUT": "1"})
    assert only_input.cost(usage, WEDNESDAY_2AM) == pytest.approx(0.006 + 1 + 1.20)


def test_overrides_are_in_the_chosen_currency():
    settings = {"LLM_CURRENCY": "CNY", "LLM_PRICE_OUTPUT": "10"}
    prices = cost.prices_for("deepseek-flash", settings)
    assert prices.cost(deepseek_usage(M, M, M), SATURDAY_2AM) == pytest.approx(0.02 + 1 + 10)


def test_an_unknown_model_with_input_and_output_prices():
    settings = {"LLM_PRICE_INPUT": "0.5", "LLM_PRICE_OUTPUT": "1.5"}
    prices = cost.prices_for("my-local-model", settings)
    usage = deepseek_usage(hit=M, miss=M, completion=M)
    # the cached price defaults to the input price; flat at any hour
    assert prices.cost(usage, WEDNESDAY_2AM) == pytest.approx(0.5 + 0.5 + 1.5)
    assert prices.cost(usage, SATURDAY_2AM) == pytest.approx(0.5 + 0.5 + 1.5)
    cached = cost.prices_for("my-local-model", {**settings, "LLM_PRICE_CACHED_INPUT": "0.05"})
    assert cached.cost(usage, WEDNESDAY_2AM) == pytest.approx(0.05 + 0.5 + 1.5)


def test_free_is_a_price():
    settings = {"LLM_PRICE_INPUT": "0", "LLM_PRICE_OUTPUT": "0"}
    prices = cost.prices_for("my-local-model", settings)
    assert prices is not None
    assert prices.cost(deepseek_usage(M, M, M), WEDNESDAY_2AM) == 0


@pytest.mark.parametrize(
    "settings, missing",
    [
        ({"LLM_PRICE_INPUT": "1"}, "LLM_PRICE_OUTPUT is missing"),
        ({"LLM_PRICE_OUTPUT": "1"}, "LLM_PRICE_INPUT is missing"),
        (
            {"LLM_PRICE_CACHED_INPUT": "1", "LLM_PRICE_OUTPUT": "1"},
            "LLM_PRICE_INPUT is missing",
        ),
        ({"LLM_PRICE_CACHED_INPUT": "1"}, "LLM_PRICE_INPUT and LLM_PRICE_OUTPUT are missing"),
    ],
)
def test_an_unknown_model_with_half_its_prices_is_an_error(settings, missing):
    with pytest.raises(cost.PriceError) as caught:
        cost.prices_for("my-local-model", settings)
    message = str(caught.value)
    assert message.startswith(missing)
    assert "my-local-model" in message and "\n" not in message


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf", "$0.15", "1,5"])
def test_a_price_that_is_not_a_number_at_least_zero_is_an_error(value):
    with pytest.raises(cost.PriceError) as caught:
        cost.prices_for("deepseek-flash", {"LLM_PRICE_OUTPUT": value})
    message = str(caught.value)
    assert "LLM_PRICE_OUTPUT" in message and repr(value) in message and "\n" not in message


@pytest.mark.parametrize("value", ["EUR", "dollars", "$"])
def test_an_unknown_currency_is_an_error(value):
    with pytest.raises(cost.PriceError) as caught:
        cost.prices_for("deepseek-flash", {"LLM_CURRENCY": value})
    assert str(caught.value) == f"LLM_CURRENCY must be USD or CNY, not {value!r}"


def test_price_errors_are_value_errors():
    assert issubclass(cost.PriceError, ValueError)


def test_unset_and_empty_settings_are_the_same():
    empty = {name: "" for name in cost.SETTINGS}
    assert cost.prices_for("deepseek-flash", empty) == FLASH
    assert cost.prices_for("my-local-model", empty) is None
    assert cost.prices_for("my-local-model", dict.fromkeys(cost.SETTINGS)) is None


# --- No price -----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["llama3", "gpt-4o", "deepseek-chat", "DeepSeek-Flash", ""])
def test_a_model_without_a_known_price_has_none(model):
    assert cost.prices_for(model, {}) is None
    assert cost.prices_for(model, {"LLM_CURRENCY": "CNY"}) is None


# --- Display ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "amount, currency, text",
    [
        (0.0042, "USD", "$0.0042"),
        (0.0042, "CNY", "¥0.0042"),
        (0, "USD", "$0.0000"),
        (0.00047736, "USD", "$0.0005"),
        (1.5, "USD", "$1.5000"),
        (12.34567, "CNY", "¥12.3457"),
    ],
)
def test_money(amount, currency, text):
    assert cost.money(amount, currency) == text


def test_money_in_an_unknown_currency_is_an_error():
    with pytest.raises(cost.PriceError):
        cost.money(1, "EUR")


def test_the_table_names_its_source_and_date():
    assert models.SOURCE == 'DeepSeek API docs, "Models & Pricing", checked 2026-11-15'
    assert "holiday" in cost.__doc__ and "upper bound" in cost.__doc__


def test_importing_the_module_stays_light():
    """agent.py --help must stay fast: no SDK, no dotenv, not even datetime or dataclasses."""
    slow = "{'openai', 'dotenv', 'datetime', 'dataclasses'}"
    code = f"import sys, minimal_agent.core.cost; print(sorted({slow} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(cost.__file__).parent.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"
