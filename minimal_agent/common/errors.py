"""Errors the user can act on (AgentError, UsageError), and the API key kept out of every
message that quotes a server."""

from __future__ import annotations


class AgentError(Exception):
    """A problem the user can act on (a setting, a file, a reply); the message says what."""


class UsageError(AgentError):
    """A mistake on the command line found after its options were read (a --workdir that does
    not exist): one line, and exit code 2, as for argparse's own usage errors."""


KEY_LENGTH = 8  # a shorter key ("x", "ollama") is no secret, and looking for it finds words


def without_key(text: str, key: object) -> str:
    """text with the API key replaced by ***: every message that quotes what a server sent
    (which may echo the request's Authorization header) goes through this, before it is cut
    short, since a cut could leave half of the key. key: the client's api_key, or None."""
    if isinstance(key, str) and len(key) >= KEY_LENGTH:
        return text.replace(key, "***")
    return text


def holds_key(value: str, keys: set[str]) -> bool:
    """Whether value is one of keys, or holds one that is long enough to be a secret
    (ADV_AUTH=Bearer <key>)."""
    return any(value == key or (len(key) >= KEY_LENGTH and key in value) for key in keys)
