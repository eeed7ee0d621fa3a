"""Property tests: whatever a user puts in config.env, the LLM_ environment or a transcript file,
main() returns a documented exit code and no exception reaches the top level (nor the "this is
a bug" report). In-process, with the settings set by monkeypatching; every URL points at a stub
server on 127.0.0.1, so nothing leaves the machine."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT
from fake_model import reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stub_server import StubServer

import agent
import model_client

EXAMPLE = (ROOT / "examples" / "tool_demo.jsonl").read_bytes()
CODES = {0, 1, 2, 3, 4}
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# What an environment can hold: bytes without NUL, decoded as os.environ decodes them.
env_text = st.binary(max_size=24).filter(lambda b: b"\0" not in b).map(os.fsdecode) | (
    st.sampled_from(["", " ", "\u201cx\u201d", "Bearer x", "sk-\u00e4", "test-key", "0", "-1"])
)
config_lines = st.sampled_from(
    [
        b"LLM_API_KEY=test-key",
        b"LLM_APIKEY=test-key",
        b"llm_api_key=test-key",
        b"LLM_MODLE=m",
        b"LLM_MAX_TOKENS=\xe4",
        b"# \x93quoted\x94",
        b"export LLM_API_KEY='a b'",
        b'LLM_API_KEY="unclosed',
        b"LLM_MODEL=${LLM_MODEL}",
        b"\xff\xfeL\x00",
        b"\x00",
        b"=",
        b"LLM_BASE_URL=http://example.invalid",  # never used: the environment's URL wins
    ]
) | st.binary(max_size=30)
config_files = st.binary(max_size=120) | st.lists(config_lines, max_size=6).map(b"\n".join)
url_prefixes = st.sampled_from(["", "", "", " ", '"', "\u201c", "ftp://x", "http://"])
url_suffixes = st.sampled_from(
    ["", "", "/", "/v1", "/v1/chat/completions", " ", '"', "/x y", "#f", "?q=1", ":", ":0", "/%zz"]
)


@pytest.fixture(scope="module")
def server():
    with StubServer([], api_key="test-key") as stub:
        yield stub


def fresh(stub: StubServer) -> None:
    """The stub as new: one reply to serve, no history to extend."""
    with stub.lock:
        stub.script[:] = [reply("ok")]
        stub.requests.clear()
        stub.served.clear()


def call_main(monkeypatch, capsys, args: list[str], config: bytes | None, env: dict) -> int:
    with tempfile.TemporaryDirectory() as folder, monkeypatch.context() as patch:
        config_file = Path(folder) / "config.env"
        if config is not None:
            config_file.write_bytes(config)
        patch.setattr(model_client, "CONFIG_FILE", config_file)
        for name in [n for n in os.environ if n.startswith(("LLM_", "OPENAI_"))]:
            patch.delenv(name)
        for name, value in env.items():
            if value is not None:
                patch.setenv(name, value)
        with open(os.devnull) as no_input:
            patch.setattr("sys.stdin", no_input)
            try:
                code = agent.main(["--workdir", str(Path(folder) / "work"), *args])
            except SystemExit as stop:  # argparse's way to say "bad usage"
                code = stop.code
    err = capsys.readouterr().err
    assert "bug in the agent" not in err and "Traceback" not in err, err
    assert code in CODES, err
    return code


@pytest.mark.posix("environment values made from any bytes (os.fsdecode), which Windows refuses")
@FUZZ
@given(
    config=st.none() | config_files,
    key=st.none() | st.just("test-key") | env_text,
    model=st.none() | env_text,
    max_tokens=st.none() | env_text,
    prefix=url_prefixes,
    suffix=url_suffixes,
)
def test_no_bad_setting_escapes_main(
    server, monkeypatch, capsys, config, key, model, max_tokens, prefix, suffix
):
    fresh(server)
    env = {
        "LLM_API_KEY": key,
        "LLM_MODEL": model,
        "LLM_MAX_TOKENS": max_tokens,
        # Always set, so a value in config.env or the default (a real host) is never used.
        "LLM_BASE_URL": prefix + server.url + suffix,
    }
    call_main(monkeypatch, capsys, ["--max-steps", "1", "hi"], config, env)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
example_messages = [json.loads(line) for line in EXAMPLE.splitlines()]
message_keys = st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "function"])


def mutate(message: dict, key: str, value: object) -> dict:
    """The message with one field replaced (or, for None, removed), nested ones included."""
    changed = json.loads(json.dumps(message))
    if key == "function" and changed.get("tool_calls"):
        changed["tool_calls"][0]["function"] = value
    elif value is None:
        changed.pop(key, None)
    else:
        changed[key] = value
    return changed


mutated_transcripts = st.lists(
    st.builds(mutate, st.sampled_from(example_messages), message_keys, json_values), max_size=6
).map(lambda messages: b"".join(json.dumps(m).encode() + b"\n" for m in messages))
transcripts = st.one_of(
    st.binary(max_size=200),
    st.lists(json_values.map(json.dumps), max_size=5).map(lambda ls: "\n".join(ls).encode()),
    st.integers(0, len(EXAMPLE)).map(lambda n: EXAMPLE[:n]),  # cut anywhere, as by a crash
    mutated_transcripts,
)


@pytest.mark.posix("the agent opens a NamedTemporaryFile that is still open, which Windows refuses")
@FUZZ
@given(data=transcripts, option=st.sampled_from(["--show", "--replay"]))
def test_no_bad_transcript_escapes_main(monkeypatch, capsys, data, option):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as transcript:
        transcript.write(data)
        transcript.flush()
        run_options = ["--max-steps", "5", "task"] if option == "--replay" else []
        args = [option, transcript.name, *run_options]  # --show takes neither
        call_main(monkeypatch, capsys, args, None, {"LLM_BASE_URL": "http://127.0.0.1:9"})
