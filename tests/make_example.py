"""Write examples/tool_demo.jsonl: the lesson's demo task, run by agent.py itself (--save)
against the scripted stub server. A scripted example, not a real model's output. Its requests
and responses are kept beside it, in examples/tool_demo.wire (docs/wire.md).

    python tests/make_example.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from stub_server import StubServer, demo_script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from minimal_agent.cli import DEMO_TASK  # noqa: E402


def main() -> int:
    target = ROOT / "examples" / "tool_demo.jsonl"
    target.parent.mkdir(exist_ok=True)
    with (
        StubServer(demo_script(), api_key="example-key") as server,
        tempfile.TemporaryDirectory() as work,
    ):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "OPENAI_"))}
        env.update(LLM_API_KEY="example-key", LLM_BASE_URL=server.url, LLM_MODEL="deepseek-flash")
        command = [sys.executable, str(ROOT / "agent.py"), "--workdir", work, "--yes"]
        proc = subprocess.run(
            [*command, "--save", str(target), DEMO_TASK],
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
    if proc.returncode or server.problems:
        print(f"failed: exit {proc.returncode}, problems {server.problems}", file=sys.stderr)
        return 1
    print(f"wrote {target.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
