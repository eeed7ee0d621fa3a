"""What is known about each model by its name, in one table: its context window (tokens) and
DeepSeek's off-peak prices per 1M tokens, (input cache hit, input cache miss, output) in each
currency. A legacy name DeepSeek still accepts is billed as another entry; one it retired
names the model that replaced it."""

from __future__ import annotations

SOURCE = 'DeepSeek API docs, "Models & Pricing", checked 2026-11-15'  # peak prices since 2026-08-16

MODELS: dict[str, dict] = {
    "deepseek-flash": {
        "window": 1_048_576,
        "off_peak": {"USD": (0.003, 0.15, 0.60), "CNY": (0.02, 1.0, 4.0)},
    },
    "deepseek-v4-pro": {
        "window": 1_048_576,
        "off_peak": {"USD": (0.022, 0.66, 1.98), "CNY": (0.15, 4.5, 13.5)},
    },
    "deepseek-v4-flash": {"window": 1_048_576, "billed_as": "deepseek-flash"},
    "deepseek-v4-flash-vision-exp": {"billed_as": "deepseek-flash"},
    "deepseek-chat": {"retired": "2026-07-24", "replaced_by": "deepseek-flash"},
    "deepseek-reasoner": {"retired": "2026-07-24", "replaced_by": "deepseek-v4-pro"},
}


def window(model: str) -> int | None:
    """The model's context window in tokens, or None when the table does not know it."""
    return MODELS.get(model, {}).get("window")


def off_peak_prices(model: str) -> dict[str, tuple[float, float, float]] | None:
    """The model's off-peak prices by currency (a legacy name: those it is billed at), or None."""
    entry = MODELS.get(model, {})
    entry = MODELS.get(entry.get("billed_as", model), entry)
    return entry.get("off_peak")


def retirement(model: str) -> str | None:
    """For a model DeepSeek retired, one sentence saying when and what replaced it; else None."""
    entry = MODELS.get(model, {})
    if "replaced_by" not in entry:
        return None
    new = entry["replaced_by"]
    return (
        f"DeepSeek retired {model} on {entry['retired']} and replaced it with {new}: set "
        f"LLM_MODEL={new} (or --model {new})"
    )
