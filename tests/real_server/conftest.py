"""Fixtures for the tests against a real llama.cpp server: the built server and models (made by
`python tests/real_server/llama_server.py`), one server per model and template for the whole
session, and a fresh recording proxy in front of it for each test."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from . import llama_server
from .recording_proxy import RecordingProxy


@pytest.fixture(scope="session")
def prepared() -> dict:
    """The server and the models; building them here would outlast any test's time-out."""
    models = [llama_server.model_file(name) for name in llama_server.MODELS]
    missing = [str(path) for path in models if not path.is_file()]
    if missing or not llama_server.is_built():
        what = ", ".join(missing) or "llama-server"
        pytest.fail(
            f"{what} is missing or out of date: run python tests/real_server/llama_server.py "
            "first (it builds llama-server, about 15 minutes, and fetches the models)",
            pytrace=False,
        )
    return {name: llama_server.model_file(name) for name in llama_server.MODELS}


@pytest.fixture(scope="session")
def tools_server(prepared, tmp_path_factory) -> Iterator[str]:
    """SmolLM2 with llama.cpp's Qwen3 template, which renders the tools (with SmolLM2's own
    template the server drops them silently). SmolLM2 ends its turns, so a call it makes runs;
    Gemma-3-270m, a base model, goes on making calls until a reply is cut off."""
    template = llama_server.chat_template(llama_server.TOOLS_TEMPLATE)
    log = tmp_path_factory.mktemp("llama") / "tools-server.log"
    options = ["--chat-template-file", str(template)]
    with llama_server.running_server(prepared["smollm2"], *options, log=log) as url:
        capabilities = server_properties(url).get("chat_template_caps", {})
        assert capabilities.get("supports_tools") is True, capabilities
        yield url


@pytest.fixture(scope="session")
def reasoning_server(prepared, tmp_path_factory) -> Iterator[str]:
    """Gemma-3-270m with llama.cpp's DeepSeek-R1 template: the reply's thinking comes back as
    reasoning_content (the model never closes its <think>, so all of a reply is thinking)."""
    template = llama_server.chat_template(llama_server.REASONING_TEMPLATE)
    log = tmp_path_factory.mktemp("llama") / "reasoning-server.log"
    options = ["--chat-template-file", str(template), "--reasoning-format", "deepseek"]
    with llama_server.running_server(prepared["gemma3"], *options, log=log) as url:
        yield url


SMALL_WINDOW = 2048  # tokens: -c for the server whose window a conversation outgrows


@pytest.fixture(scope="session")
def small_window_server(prepared, tmp_path_factory) -> Iterator[str]:
    """As tools_server, with a context window of SMALL_WINDOW tokens (this -c comes after
    SERVER_OPTIONS' own, so it wins), which GET /props reports."""
    template = llama_server.chat_template(llama_server.TOOLS_TEMPLATE)
    log = tmp_path_factory.mktemp("llama") / "small-window-server.log"
    options = ["--chat-template-file", str(template), "-c", str(SMALL_WINDOW)]
    with llama_server.running_server(prepared["smollm2"], *options, log=log) as url:
        settings = server_properties(url).get("default_generation_settings", {})
        assert settings.get("n_ctx") == SMALL_WINDOW, settings
        yield url


@pytest.fixture
def small_window_proxy(small_window_server) -> Iterator[RecordingProxy]:
    with RecordingProxy(small_window_server) as proxy:
        yield proxy


@pytest.fixture
def tools_proxy(tools_server) -> Iterator[RecordingProxy]:
    with RecordingProxy(tools_server) as proxy:
        yield proxy


@pytest.fixture
def reasoning_proxy(reasoning_server) -> Iterator[RecordingProxy]:
    with RecordingProxy(reasoning_server) as proxy:
        yield proxy


def server_properties(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/props", timeout=30) as response:
        return json.load(response)
