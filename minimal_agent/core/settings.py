"""The settings of a run, parsed once: what model_client.load_config() read (config.env, or the
installed command's own file, and the environment, which wins) and the command line's options,
as one typed object. Each value is checked in one place, and its error names the setting; the
rest of the package takes the typed values, never a setting's text."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NamedTuple

from minimal_agent.common.errors import AgentError
from minimal_agent.core import completions, cost
from minimal_agent.core.context_window import (
    DEFAULT_COMPACT_AT,
    compact_at_setting,
    context_tokens_setting,
)
from minimal_agent.stores import conversations
from minimal_agent.tools import processes

YES, NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


class Settings(NamedTuple):  # not a dataclass: its import (inspect) slows every start
    """One run's settings, each an option's value where the option was given, else its
    setting's, else the default. config: the settings as read, for the hints of errors that
    quote them (api_errors.describe_api_error). Settings() is what a session has when no config
    is read (DEFAULTS: agent.run() given a client and a model): no prices, no budget, the
    server's own limits, the records beside the transcript."""

    config: dict = {}  # read only, as every field
    config_file: str = ""  # the file they were read from
    api_key: str = ""
    base_url: str = ""
    model: str | None = None
    sessions_folder: Path | None = None  # None: a transcript's records are kept beside it
    prices: cost.Prices | None = None  # None: the model has no known price
    max_cost: float | None = None
    max_tokens: int | None = None
    thinking: str | None = None  # "on", "off"; None: the server's own
    effort: str | None = None  # one of completions.EFFORTS; None: the server's own
    confirm_writes: bool = False
    daily_tools: bool = False  # edit_file, search, list_files and read_file's offset and limit
    pass_env: frozenset[str] = frozenset()
    sandbox_limits: dict = processes.SANDBOX_LIMITS
    context_tokens: int | None = None
    compact_at: float = DEFAULT_COMPACT_AT


DEFAULTS = Settings()


def sessions_folder(config: dict) -> Path:
    """Where conversations are saved: LLM_SESSIONS_DIR (config.env or the environment), else
    the platform's usual place for the user's state."""
    chosen = config.get("LLM_SESSIONS_DIR")
    return conversations.sessions_dir(
        {**os.environ, **({"LLM_SESSIONS_DIR": chosen} if chosen else {})}
    )


def parsed(config: dict, args: argparse.Namespace, installed: bool = False) -> Settings:
    """The settings of config (model_client.load_config()'s) under the options in args, each
    checked: AgentError, one line naming the setting, for the first that cannot be used.
    installed: the `minimal-agent` command's, whose defaults differ (LLM_DAILY_TOOLS)."""
    model = args.model or config["model"]
    try:
        prices = cost.prices_for(model, config)
    except cost.PriceError as error:
        raise AgentError(str(error)) from None
    max_cost = args.max_cost or money_setting(config, "LLM_MAX_COST")
    if max_cost and not prices:
        raise AgentError(no_price(model, "--max-cost" if args.max_cost else "LLM_MAX_COST"))
    try:
        context_tokens = context_tokens_setting(config.get("LLM_CONTEXT_TOKENS"))
        compact_at = compact_at_setting(config.get("LLM_COMPACT_AT"))
    except ValueError as error:
        raise AgentError(str(error)) from None
    return Settings(
        config=config,
        config_file=config["config_file"],
        api_key=config["api_key"],
        base_url=config["base_url"],
        model=model,
        sessions_folder=sessions_folder(config),
        prices=prices,
        max_cost=max_cost,
        max_tokens=args.max_tokens or max_tokens_setting(config),
        thinking=args.thinking or choice_setting(config, "LLM_THINKING", ("on", "off")),
        effort=args.effort or choice_setting(config, "LLM_EFFORT", completions.EFFORTS),
        confirm_writes=args.confirm_writes or yes_setting(config, "LLM_CONFIRM_WRITES"),
        # LLM_DAILY_TOOLS if set, else on for the installed command only
        daily_tools=yes_setting(config, "LLM_DAILY_TOOLS")
        if config.get("LLM_DAILY_TOOLS")
        else installed,
        pass_env=processes.pass_env_names(config["api_key"], config["LLM_PASS_ENV"]),
        sandbox_limits=processes.sandbox_limits(config["LLM_SANDBOX_LIMITS"]),
        context_tokens=context_tokens,
        compact_at=compact_at,
    )


def no_price(model: str, budget: str) -> str:
    return (
        f"{budget} needs the model's price, and {model} has none known: set LLM_PRICE_INPUT and "
        "LLM_PRICE_OUTPUT (per million tokens) for it"
    )


def yes_setting(config: dict, name: str) -> bool:
    """A setting that is on or off: 1, true, yes, on; or 0, false, no, off, unset."""
    text = (config.get(name) or "").lower()
    if text not in YES + NO:
        raise AgentError(f"{name} must be 1 (on) or 0 (off), not {text!r}")
    return text in YES


def money_setting(config: dict, name: str) -> float | None:
    """A setting that is an amount of money above 0, or None when it is not set."""
    text = config.get(name) or ""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0
    if not 0 < value < float("inf"):
        raise AgentError(f"{name} must be an amount above 0, such as 0.50, not {text!r}")
    return value


def choice_setting(config: dict, name: str, choices: tuple[str, ...]) -> str | None:
    """A setting that is one of choices (case ignored), or None when it is not set."""
    text = (config.get(name) or "").lower()
    if text and text not in choices:
        raise AgentError(f"{name} must be {' or '.join(choices)}, not {config[name]!r}")
    return text or None


def max_tokens_setting(config: dict) -> int | None:
    """LLM_MAX_TOKENS as a number, or None when it is not set."""
    text = config["max_tokens"]
    if text and not (text.isdigit() and int(text) > 0):
        raise AgentError(f"LLM_MAX_TOKENS must be a whole number above 0, not {text!r}")
    return int(text) if text else None
