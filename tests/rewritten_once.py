"""The test modules' asserts rewritten once for all of pytest-xdist's workers.

pytest rewrites the asserts of each test module as it imports it, in every worker: about 2.7 s
of CPU for this suite's 20,000 lines, four times over, while the workers start. It keeps a
rewritten module in a `__pycache__` beside its source unless PYTHONDONTWRITEBYTECODE is set (as
on this project's machines), and the workers of a fresh clone start at once, so none finds
another's. Here the controller rewrites them before the workers start, into a folder of its
own that goes with it, and each worker reads them from there: nothing is written into the
checkout. pytest checks each file against its source's hash, and rewrites one that changed.

This uses pytest's own functions for it (`_rewrite_test`, `_write_pyc`, `get_cache_dir`), which
are not public: test_rewritten_once.py fails if a worker no longer reads what was written."""

from __future__ import annotations

import fnmatch
import os
import threading
from pathlib import Path

import pytest
from _pytest.assertion import rewrite


def cache_dir(folder: Path, source: Path) -> Path:
    """Where a test module's rewritten code is kept: its source's folders, under folder."""
    return folder.joinpath(*source.parent.parts[1:])


def modules_given(config: pytest.Config) -> list[Path]:
    """The files of the paths pytest was given whose names make them test modules."""
    patterns = config.getini("python_files")
    found = set()
    for argument in config.args:
        path = config.invocation_params.dir / argument.split("::")[0]
        for candidate in path.rglob("*.py") if path.is_dir() else [path]:
            if any(fnmatch.fnmatch(candidate.name, pattern) for pattern in patterns):
                found.add(candidate)  # as pytest's import names it: not resolved
    return sorted(found)


def rewrite_into(folder: Path, config: pytest.Config, sources: list[Path]) -> None:
    """Rewrite each test module into folder, as pytest's import would (the controller), half
    of them in a child process where fork is safe (no other thread): nothing else runs yet,
    and there are two cores. A module that cannot be rewritten is left to the workers, which
    report it as pytest does."""
    state = config.stash[rewrite.assertstate_key]
    child = os.fork() if hasattr(os, "fork") and threading.active_count() == 1 else None
    try:
        for source in sources[child == 0 :: 2] if child is not None else sources:
            try:
                source_hash, code = rewrite._rewrite_test(source, config)
            except Exception:  # a syntax error, say: the worker that imports it tells
                continue
            pyc = cache_dir(folder, source) / (source.name[:-3] + rewrite.PYC_TAIL)
            pyc.parent.mkdir(parents=True, exist_ok=True)
            rewrite._write_pyc(state, code, source_hash, pyc)
    finally:
        if child == 0:
            os._exit(0)
        if child:
            os.waitpid(child, 0)


def read_from(folder: Path) -> None:
    """Have pytest's import look for rewritten modules in folder (a worker)."""
    rewrite.get_cache_dir = lambda source: cache_dir(folder, source)
