"""The suite as pytest would collect (or run) it on macOS or Windows, tried on Linux:

    python tests/as_platform.py win32 --collect-only -q    # what Windows would run and skip
    python tests/as_platform.py darwin                      # run what macOS would run

sys.platform is set before pytest starts, so the posix and linux marks skip what they would
skip there, and conftest's alive() takes its ps path (macOS has no /proc). For win32, the
POSIX-only names are gone as well (os.killpg, signal.SIGHUP, ... and the modules pty, termios,
fcntl, resource), so collecting fails here as it would there if a test module used one at
import time; pexpect is imported as on Windows, without pexpect.spawn. Only the test process is
changed: the agents and commands it starts are this system's, so a darwin run is a check of the
marks and of the test code's own platform branches, not of macOS. The last line gives the
counts.
"""

from __future__ import annotations

# Modules that choose their implementation by sys.platform as they are imported (subprocess,
# asyncio, shutil, the SDK's) are imported here, before it changes, as this system's: their own
# platform code is not under test.
import asyncio  # noqa: F401
import os
import shutil  # noqa: F401
import signal
import subprocess  # noqa: F401
import sys
import tempfile  # noqa: F401
from collections import Counter

import dotenv  # noqa: F401
import hypothesis  # noqa: F401
import openai  # noqa: F401
import openai.lib.streaming.chat  # noqa: F401
import pytest

POSIX_ONLY_NAMES = ["SIGHUP", "SIGKILL", "SIGQUIT", "SIGALRM", "SIGCHLD", "SIGPIPE", "SIGUSR1",
                    "SIGUSR2", "pthread_sigmask", "pthread_kill", "sigwait", "setitimer", "alarm",
                    "pause", "siginterrupt", "killpg", "setsid", "getpgid", "setpgid", "getpgrp",
                    "fork", "getuid"]  # fmt: skip
POSIX_ONLY_MODULES = ["pty", "tty", "termios", "fcntl", "resource", "ptyprocess", "grp", "pwd"]


class Counts:
    """After collection: how many tests run, how many skip, and why."""

    def __init__(self) -> None:
        self.reasons: Counter[str] = Counter()
        self.total = 0

    def pytest_collection_finish(self, session) -> None:
        self.total = len(session.items)
        for item in session.items:
            for marker in item.iter_markers():
                if marker.name == "skip" or (
                    marker.name == "skipif" and marker.args and marker.args[0] is True
                ):
                    self.reasons[marker.kwargs.get("reason", "")] += 1
                    break


def main() -> int:
    platform, *args = sys.argv[1:]
    if platform == "win32":
        for name in POSIX_ONLY_NAMES:
            for module in (os, signal):
                if hasattr(module, name):
                    delattr(module, name)
        for name in POSIX_ONLY_MODULES:
            sys.modules[name] = None  # import NAME now raises ImportError
        for name in [n for n in sys.modules if n == "pexpect" or n.startswith("pexpect.")]:
            del sys.modules[name]
        import io  # pytest's own Windows console workaround looks for this class

        io._WindowsConsoleIO = type("_WindowsConsoleIO", (), {})
    else:
        import pexpect  # noqa: F401  (this system's, with its pty_spawn)
    sys.platform = platform
    counts = Counts()
    quiet = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]  # the modules imported above
    code = pytest.main(["-p", "no:cacheprovider", *quiet, *args], plugins=[counts])
    skipped = sum(counts.reasons.values())
    for reason, count in counts.reasons.most_common():
        print(f"{count:4}  {reason}")
    print(f"as on {platform}: {counts.total} collected, {counts.total - skipped} to run, "
          f"{skipped} to skip")  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
