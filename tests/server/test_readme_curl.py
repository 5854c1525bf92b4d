# The curl commands the README shows against http://127.0.0.1:8000 work as printed against a
# real `s4kv serve` (only the port and an Authorization header are changed).
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def curl_commands(path):
    """curl commands in ``` blocks of a Markdown file that target 127.0.0.1:8000."""
    text = (ROOT / path).read_text()
    commands = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.strip()
            if line.startswith("curl ") and "127.0.0.1:8000" in line:
                commands.append(line)
    return commands


def test_readme_has_curl_example():
    assert curl_commands("README.md"), "README shows no curl example for the server"


@pytest.mark.parametrize("command", curl_commands("README.md"))
def test_readme_curl(server, command):
    if not shutil.which("curl"):
        pytest.skip("curl not installed")
    command = command.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
    command += f" -sS --fail-with-body -H 'Authorization: Bearer {server.api_key}'"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    body = json.loads(proc.stdout)
    assert body["object"] in ("chat.completion", "text_completion"), body
    choice = body["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    assert text
    assert body["usage"]["completion_tokens"] > 0
