"""Write the examples, each run by agent.py itself (--save) against the scripted stub server:
scripted examples, not a real model's output. Each one's requests and responses are kept
beside it (examples/NAME.wire, docs/wire.md).

    examples/tool_demo.jsonl  the lesson's demo task: write_file, read_file, run_shell
    examples/edit_demo.jsonl  the daily tools (LLM_DAILY_TOOLS=1): search, edit_file, and
                              read_file with offset and limit

    python tests/make_example.py [NAME ...]   (default: every one)

The transcript keeps the messages only: its event lines name the machine's temporary workdir.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from stub_server import EDIT_DEMO_TASK, StubServer, demo_script, edit_demo_script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from minimal_agent.cli import DEMO_TASK  # noqa: E402
from minimal_agent.stores import conversations  # noqa: E402

EXAMPLES = {  # name: (the scripted model, the task, settings)
    "tool_demo": (demo_script, DEMO_TASK, {}),
    "edit_demo": (edit_demo_script, EDIT_DEMO_TASK, {"LLM_DAILY_TOOLS": "1"}),
}


def main(names: list[str]) -> int:
    for name in names or EXAMPLES:
        script, task, settings = EXAMPLES[name]
        target = ROOT / "examples" / f"{name}.jsonl"
        target.parent.mkdir(exist_ok=True)
        target.unlink(missing_ok=True)  # --save takes only a new file
        with (
            StubServer(script(), api_key="example-key") as server,
            tempfile.TemporaryDirectory() as work,
            tempfile.TemporaryDirectory() as saved,  # the record of changes: not the user's
        ):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "OPENAI_"))}
            env.update(LLM_API_KEY="example-key", LLM_BASE_URL=server.url, **settings)
            env["LLM_SESSIONS_DIR"] = saved
            env["LLM_MODEL"] = "deepseek-flash"
            command = [sys.executable, str(ROOT / "agent.py"), "--workdir", work, "--yes"]
            proc = subprocess.run(
                [*command, "--save", str(target), task],
                env=env,
                stdin=subprocess.DEVNULL,
                timeout=60,
            )
            if proc.returncode == 0:
                shutil.copy(conversations.wire_file(target, saved), target.with_suffix(".wire"))
                lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
                kept = [line for line in lines if "event" not in json.loads(line)]
                target.write_text("".join(kept), encoding="utf-8")
        if proc.returncode or server.problems:
            print(f"failed: exit {proc.returncode}, problems {server.problems}", file=sys.stderr)
            return 1
        print(f"wrote {target.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
