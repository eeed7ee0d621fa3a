"""The settings parsed once: the file read is an argument, every value typed and checked in
one place, each error naming its setting, an option winning over its setting."""

from __future__ import annotations

import argparse

import pytest

import agent
import model_client
from minimal_agent import cli
from minimal_agent.common.errors import AgentError
from minimal_agent.core.settings import parsed

NAMES = [*model_client.SETTINGS]


@pytest.fixture
def clean(monkeypatch):
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)


def options(*argv: str) -> argparse.Namespace:
    return cli.build_parser(agent).parse_args(list(argv))


def test_the_file_read_is_the_one_named(tmp_path, clean):
    named = tmp_path / "named.env"
    named.write_text("LLM_API_KEY=sk-named\nLLM_MODEL=other\n")
    config = model_client.load_config(named)
    assert (config["api_key"], config["model"], config["config_file"]) == (
        "sk-named", "other", str(named),
    )  # fmt: skip
    assert model_client.CONFIG_FILE == model_client.LESSON_CONFIG  # nothing was rebound


def test_each_value_is_typed_and_an_option_wins_over_its_setting(tmp_path, clean):
    file = tmp_path / "config.env"
    file.write_text(
        "LLM_API_KEY=sk-x\nLLM_MAX_TOKENS=100\nLLM_THINKING=ON\nLLM_CONFIRM_WRITES=yes\n"
        "LLM_MAX_COST=0.5\nLLM_PASS_ENV=HOME, LANG\nLLM_SANDBOX_LIMITS=processes=8\n"
        "LLM_CONTEXT_TOKENS=64_000\nLLM_COMPACT_AT=0.5\n"
    )
    settings = parsed(model_client.load_config(file), options("--max-tokens", "7"))
    assert settings.max_tokens == 7  # the option's
    assert settings.thinking == "on" and settings.confirm_writes is True
    assert settings.max_cost == 0.5 and settings.prices.currency == "USD"
    assert settings.pass_env == {"HOME", "LANG"} and settings.sandbox_limits["processes"] == 8
    assert (settings.context_tokens, settings.compact_at) == (64_000, 0.5)
    assert settings.effort is None  # unset: the server's own


@pytest.mark.parametrize(
    "line, named",
    [
        ("LLM_THINKING=maybe", "LLM_THINKING"),
        ("LLM_EFFORT=huge", "LLM_EFFORT"),
        ("LLM_CONFIRM_WRITES=sometimes", "LLM_CONFIRM_WRITES"),
        ("LLM_MAX_COST=free", "LLM_MAX_COST"),
        ("LLM_MAX_TOKENS=lots", "LLM_MAX_TOKENS"),
        ("LLM_CONTEXT_TOKENS=big", "LLM_CONTEXT_TOKENS"),
        ("LLM_COMPACT_AT=2", "LLM_COMPACT_AT"),
        ("LLM_CURRENCY=EUR", "LLM_CURRENCY"),
        ("LLM_SANDBOX_LIMITS=cpus=2", "LLM_SANDBOX_LIMITS"),
    ],
)
def test_a_setting_that_cannot_be_used_is_one_error_naming_it(tmp_path, clean, line, named):
    file = tmp_path / "config.env"
    file.write_text(f"LLM_API_KEY=sk-x\n{line}\n")
    with pytest.raises(AgentError, match=named):
        parsed(model_client.load_config(file), options())
