"""Tests against a real llama.cpp server (pytest -m real_server); a package, so its conftest
does not take the place of the tests' own conftest module."""
