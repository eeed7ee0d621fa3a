"""Configuration as a user sets it up: config.env beside model_client.py, found from any working
directory, with real environment variables winning. The program is copied into a temporary
folder so that its config.env is the test's own, never a developer's; which setting wins is
checked in the test's process, its config.env the test's too."""

from __future__ import annotations

import pytest
from conftest import ROOT, clean_env, run_agent, run_in_process
from fake_model import reply
from stub_server import StubServer

import model_client


def write_config(app, **settings: str) -> None:
    lines = [f"{name}={value}" for name, value in settings.items()]
    (app / "config.env").write_text("# test settings\n" + "\n".join(lines) + "\n")


def test_config_env_beside_the_program_is_used_from_any_directory(app, workdir):
    with StubServer([reply("from config.env")], api_key="file-key") as server:
        write_config(app, LLM_API_KEY="file-key", LLM_BASE_URL=server.url, LLM_MODEL="file-model")
        proc = run_agent("--workdir", str(workdir), "hi", env=clean_env(), script=app / "agent.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "from config.env\n"
    assert server.requests[0]["model"] == "file-model"


@pytest.fixture
def lesson_config(tmp_path, monkeypatch):
    """The folder whose config.env the lesson reads, for the runs in this process (which
    settings win does not depend on where the file is: the test above runs the program)."""
    monkeypatch.setattr(model_client, "CONFIG_FILE", tmp_path / "config.env")
    return tmp_path


def test_environment_variables_win_over_config_env(lesson_config, workdir):
    with StubServer([reply("env wins")], api_key="env-key") as server:
        write_config(lesson_config, LLM_API_KEY="file-key", LLM_BASE_URL="http://127.0.0.1:9",
                     LLM_MODEL="f")  # fmt: skip
        env = clean_env(LLM_API_KEY="env-key", LLM_BASE_URL=server.url, LLM_MODEL="env-model")
        proc = run_in_process("--workdir", str(workdir), "hi", env=env)
    assert proc.returncode == 0, proc.stderr
    assert server.requests[0]["model"] == "env-model"


def test_the_model_option_wins_over_both(lesson_config, workdir):
    with StubServer([reply("ok")], api_key="k") as server:
        write_config(lesson_config, LLM_API_KEY="k", LLM_BASE_URL=server.url,
                     LLM_MODEL="file-model")  # fmt: skip
        env = clean_env(LLM_MODEL="env-model")
        proc = run_in_process("--workdir", str(workdir), "--model", "cli-model", "hi", env=env)
    assert proc.returncode == 0, proc.stderr
    assert server.requests[0]["model"] == "cli-model"


def test_defaults_are_deepseek_and_deepseek_flash(tmp_path, monkeypatch):
    for name in ("LLM_API_KEY", "LLM_BASE_URL", "LLM_MODEL", "LLM_MAX_TOKENS"):
        monkeypatch.setenv(name, "")  # recorded, so what load_config() sets is undone after
        monkeypatch.delenv(name)
    monkeypatch.setattr(model_client, "CONFIG_FILE", tmp_path / "config.env")
    (tmp_path / "config.env").write_text("LLM_API_KEY=k\n")
    config = model_client.load_config()
    assert {key: config[key] for key in ("api_key", "base_url", "model", "max_tokens")} == {
        "api_key": "k",
        "base_url": "https://api.deepseek.com",
        "model": "deepseek-flash",
        "max_tokens": "",  # unset: no max_tokens is sent
    }
    assert config["LLM_CURRENCY"] == config["LLM_MAX_COST"] == ""  # the rest, by their names


def test_without_any_key_the_error_says_where_to_put_one(app, workdir):
    proc = run_agent(
        "--workdir", str(workdir), "hi", env=clean_env(OPENAI_API_KEY="sk-user-openai-key"),
        script=app / "agent.py",
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"error: LLM_API_KEY is not set (found no {app / 'config.env'}): put your key after "
        "LLM_API_KEY= in config.env (copy config.example.env), or set it in the environment"
    )


def test_the_example_config_names_every_setting_and_no_real_key():
    text = (ROOT / "config.example.env").read_text()
    for setting in (
        "LLM_API_KEY=",
        "LLM_BASE_URL=https://api.deepseek.com",
        "LLM_MODEL=deepseek-flash",
    ):
        assert setting in text
    for server in ("11434", "8000", "8080", "1234"):
        assert f"http://localhost:{server}/v1" in text
    assert "sk-" not in text
