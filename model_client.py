"""The lesson's model client: the settings (config.env beside this file, or the environment),
their one-line checks, MODEL, and `create_client()`, the OpenAI SDK client the loop asks.

`python-dotenv` and `openai` are imported inside the functions that use them, so that
`python agent.py --help` starts without paying for them (see minimal_agent/__init__.py).
"""

from __future__ import annotations

import codecs
import io
import os
import sys
import unicodedata
from urllib.parse import urlsplit

from minimal_agent.common.errors import AgentError
from minimal_agent.common.settings_guard import refuse_settings_changed_by_a_run

LESSON_CONFIG = os.path.join(os.path.dirname(os.path.realpath(__file__)), "config.env")
CONFIG_FILE = LESSON_CONFIG  # the file read unless another is named (the installed command's)


DEFAULT_BASE_URL = "https://api.deepseek.com"


MODEL = "deepseek-flash"  # the lesson's model; LLM_MODEL overrides it


REQUEST_TIMEOUT = 120.0  # seconds without a byte from the server before an attempt gives up


SETTINGS = (  # every setting the agent reads, for the misspelling check
    "LLM_API_KEY", "LLM_BASE_URL", "LLM_MODEL", "LLM_MAX_TOKENS", "LLM_CURRENCY", "LLM_MAX_COST",
    "LLM_PRICE_INPUT", "LLM_PRICE_CACHED_INPUT", "LLM_PRICE_OUTPUT", "LLM_SESSIONS_DIR",
    "LLM_CONTEXT_TOKENS", "LLM_COMPACT_AT", "LLM_CONFIRM_WRITES", "LLM_THINKING", "LLM_EFFORT",
    "LLM_PASS_ENV", "LLM_SANDBOX_LIMITS", "LLM_DAILY_TOOLS",
)  # fmt: skip


def load_config(config_file: str | os.PathLike | None = None) -> dict[str, str]:
    """Read config_file (unless given: CONFIG_FILE; real environment variables win) and return
    the settings, and the file's name (config_file)."""
    config_file = str(config_file or CONFIG_FILE)
    file = config_file_settings(config_file)

    def setting(name: str) -> str:
        return (os.environ[name] if name in os.environ else file.get(name) or "").strip()

    return {
        **{name: setting(name) for name in SETTINGS[4:]},  # LLM_CURRENCY and on, by their names
        "api_key": setting("LLM_API_KEY"),
        "base_url": setting("LLM_BASE_URL") or DEFAULT_BASE_URL,
        "model": setting("LLM_MODEL") or MODEL,
        "max_tokens": setting("LLM_MAX_TOKENS"),
        "key_origin": setting_origin("LLM_API_KEY", config_file),  # for a refused key's hint
        "config_file": config_file,
    }


def client_and_model(client=None, model: str | None = None) -> tuple:
    """The client and model given, and what is missing from config.env and the environment."""
    config = load_config()
    return client or create_client(config), model or config["model"]


def config_file_settings(config_file: str) -> dict[str, str | None]:
    """The variables config_file sets ({} if there is none); it must be UTF-8 text.

    Read, not loaded into os.environ, which run_shell's commands inherit (less the key and every
    secret-looking name: processes.command_environment). Not read at all, in one line, while it
    is as a run of the agent left it after changing it: a command may have written it.
    """
    refuse_settings_changed_by_a_run(config_file)
    try:
        with open(config_file, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise AgentError(f"cannot read {config_file}: {error.strerror}") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\0" in data:
        raise AgentError(
            f'{config_file} is saved as UTF-16 (Notepad calls it "Unicode"): save it as UTF-8'
        )
    try:
        text = data.decode("utf-8-sig")  # Notepad's "UTF-8 with BOM" is fine too
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise AgentError(
            f"{config_file} is not UTF-8 text (byte 0x{data[error.start]:02x} on line {line}): "
            "save it as UTF-8"
        ) from None
    from dotenv import dotenv_values
    from dotenv.parser import parse_stream

    # A line dotenv cannot read would be skipped with a warning, and its setting lost.
    for binding in parse_stream(io.StringIO(text)):
        if binding.error or (binding.key and binding.value is None):
            raise AgentError(
                f"{config_file} line {binding.original.line} is not a setting: write each one as "
                "NAME=value on one line (such as LLM_API_KEY=sk-...), or start a comment with #"
            )
    return dotenv_values(stream=io.StringIO(text))


def setting_origin(name: str, config_file: str) -> str:
    """Where a setting's value came from, in words, for error messages."""
    if name in os.environ:
        return "set in the environment, which wins over config.env"
    return f"set in {config_file}"


def near_miss(setting: str, file_names: list[str]) -> str | None:
    """A name in config.env or the environment that looks like a misspelling of setting."""
    # OPENAI_API_KEY in the environment belongs to other tools; in config.env it is a mistake.
    names = file_names + [name for name in os.environ if not name.startswith("OPENAI_")]
    tail = setting.split("_", 1)[1]
    for name in dict.fromkeys(names):
        if name in SETTINGS:
            continue
        aliases = (f"DEEPSEEK_{tail}", f"OPENAI_{tail}")
        if squash(name) == squash(setting) or name.upper() in aliases:
            return name
        if squash(name).startswith("LLM") and closest_setting(name) == setting:
            return name
    return None


def squash(name: str) -> str:
    return "".join(c for c in name.upper() if c.isalnum())


def closest_setting(name: str) -> str | None:
    import difflib  # here: only a misspelt setting needs it

    scores = {s: difflib.SequenceMatcher(None, squash(name), squash(s)).ratio() for s in SETTINGS}
    best = max(scores, key=scores.__getitem__)
    return best if scores[best] >= 0.75 else None


def check_settings(config: dict[str, str]) -> None:
    """Refuse settings that cannot work before any request; warn of likely misspellings."""
    config_file = config["config_file"]
    file = config_file_settings(config_file)
    names = list(file)
    if not config["api_key"]:
        where = f"read {config_file}" if os.path.exists(config_file) else f"found no {config_file}"
        miss = near_miss("LLM_API_KEY", names)
        place = "in config.env" if miss in names else "in the environment"
        seen = f"; {miss} is set {place}, but the name is LLM_API_KEY" if miss else ""
        file = "config.env (copy config.example.env)" if config_file == LESSON_CONFIG else None
        raise AgentError(
            f"LLM_API_KEY is not set ({where}{seen}): put your key after LLM_API_KEY= in "
            f"{file or 'that file'}, or set it in the environment"
        )
    if config["api_key"].lower().startswith("bearer "):
        raise AgentError(
            'LLM_API_KEY starts with "Bearer": put only the key itself after LLM_API_KEY= '
            '(the agent adds "Bearer " when it sends it)'
        )
    for name, value in (("LLM_API_KEY", config["api_key"]), ("LLM_BASE_URL", config["base_url"])):
        problem = odd_character(value, ascii_only=name == "LLM_API_KEY")
        if problem:
            raise AgentError(
                f"{name} contains {problem}: paste it again without quotes or spaces "
                f"({setting_origin(name, config_file)})"
            )
    problem = odd_character(config["model"], invisible_only=True)
    if problem:  # it could not even be sent (a surrogate), or it hides what it is
        raise AgentError(f"LLM_MODEL contains {problem}: write the name the server knows")
    url = config["base_url"]
    if not url.startswith(("http://", "https://")):
        raise AgentError(f"LLM_BASE_URL must start with http:// or https://, not {url!r}")
    try:
        valid = bool(urlsplit(url).hostname) and urlsplit(url).port != 0
    except ValueError:  # a port that is no number, a broken [IPv6] address
        valid = False
    if not valid:
        raise AgentError(f"LLM_BASE_URL {url!r} is not a URL like http://localhost:8080/v1")
    for setting, key in (("LLM_BASE_URL", "base_url"), ("LLM_MODEL", "model")):
        miss = near_miss(setting, names)
        if miss and setting not in os.environ and not file.get(setting):
            print(
                f"warning: {miss} is set but not read (the name is {setting}); using "
                f"{setting}={config[key]}",
                file=sys.stderr,
            )


def odd_character(text: str, ascii_only: bool = False, invisible_only: bool = False) -> str | None:
    """The first space, quote or invisible character in a setting, described, or None."""
    for position, char in enumerate(text, 1):
        odd = not char.isprintable() and char != " "
        if not invisible_only:
            odd = (
                odd
                or char.isspace()
                or char in "\"'`"
                or unicodedata.category(char) in ("Pi", "Pf")
            )
            odd = odd or (ascii_only and char > "~")
        if odd:
            name = unicodedata.name(char, "a control character")
            return f"U+{ord(char):04X} ({name.lower()}) at character {position}"
    return None


def create_client(
    config: dict[str, str] | None = None, timeout: float = REQUEST_TIMEOUT
):  # -> openai.OpenAI
    """An OpenAI SDK client for the configured server (DeepSeek unless LLM_BASE_URL is set).

    timeout bounds each attempt's wait for the server (the SDK's own default is 600 s, far too
    long to sit in front of a silent server); the SDK makes up to three attempts.
    """
    config = config or load_config()
    check_settings(config)
    from openai import Omit, OpenAI

    # Key and URL are passed explicitly so the SDK never falls back to OPENAI_API_KEY or
    # OPENAI_BASE_URL: a user's OpenAI key must not be sent to another provider. For the same
    # reason the headers the SDK would fill from OPENAI_ORG_ID and OPENAI_PROJECT_ID are dropped.
    openai_only = {"OpenAI-Organization": Omit(), "OpenAI-Project": Omit()}
    return OpenAI(
        api_key=config["api_key"],
        base_url=config["base_url"],
        default_headers=openai_only,
        timeout=timeout,
    )
