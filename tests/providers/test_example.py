"""The real-model commands of docs/guides/models.md run as written, against a local fake of the
OpenAI API (the page marks them not-run: they need a key or an Ollama)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.providers.conftest import KEY
from tests.providers.fake_servers import FakeServer, openai_completion

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "guides" / "models.md").read_text()
BIN = Path(sys.executable).parent


def shell_blocks() -> list[list[str]]:
    """The guide's `bash` blocks that need a model endpoint (they export its variables)."""
    blocks = re.findall(r"```bash\n(export .*?)```", GUIDE, re.S)
    return [[line.strip() for line in block.splitlines() if line.strip()] for block in blocks]


def test_the_guide_shows_openai_and_ollama() -> None:
    blocks = shell_blocks()
    assert len(blocks) == 2
    exported = {
        name
        for block in blocks
        for line in block
        if line.startswith("export ")
        for name in re.findall(r"(\w+)=", line)
    }
    assert exported == {"OPENAI_API_KEY", "OPENAI_BASE_URL", "RUNNER_MODEL"}


def test_the_guide_commands_run_against_an_openai_compatible_server(
    server: FakeServer, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": f"{server.url}/v1",
        "RUNNER_MODEL": "gpt-4.1-mini",
    }
    for n, block in enumerate(shell_blocks()):
        server.reply(openai_completion(calls=[(f"call_{n}a", "add", '{"a": 2, "b": 3}')]))
        server.reply(openai_completion(calls=[(f"call_{n}m", "multiply", '{"a": 5, "b": 7}')]))
        server.reply(openai_completion("35"))
        env["RUNNER_DATABASE_URL"] = f"sqlite:///{tmp_path / f'example-{n}.db'}"
        for line in block:
            # An export is run to prove it is valid shell, but the commands after it must
            # reach the fake server, not the real endpoint it names.
            command_env = env if not line.startswith("export ") else dict(os.environ)
            done = subprocess.run(
                ["bash", "-c", line],
                cwd=ROOT,
                env=command_env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr
            if "runner run" in line:
                assert done.stdout.strip() == "35", done.stderr
                assert "step 3" in done.stderr
    requests = server.bodies
    assert len(requests) == 6
    assert requests[0]["model"] == "gpt-4.1-mini"
    assert [tool["function"]["name"] for tool in requests[0]["tools"]] == ["add", "multiply"]
    assert requests[0]["messages"][0]["role"] == "system"
    # The provider's own call id came back through the journal (the run is durable).
    assert requests[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_0m",
        "content": "35",
    }
