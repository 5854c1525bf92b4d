# deploy/s4kv.service and deploy/Dockerfile, offline: systemd's own verifier and security
# score on the unit (the score is the one docs/deploy.md records), hadolint and checkov on the
# Dockerfile (checkov has no systemd framework: the unit is held to systemd-analyze), and the
# properties the deployment relies on, read from the files themselves.
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "s4kv.service"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
ENTRYPOINT = ROOT / "deploy" / "docker-entrypoint.sh"
TOOLS = Path(sys.executable).parent
S4KV = Path(os.environ.get("S4KV_BIN", ROOT / "build" / "src" / "cli" / "s4kv"))


def unit_settings():
    """[section] -> {key: [values]} of the unit, comments dropped."""
    out, section = {}, None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = out.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        section.setdefault(key, []).append(value)
    return out


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def test_systemd_verifies_the_unit(tmp_path):
    # verify also checks that ExecStart's binary exists: the same unit, pointed at this build.
    assert S4KV.exists(), f"{S4KV}: build S4 KV first (scripts/build.sh)"
    unit = tmp_path / "s4kv.service"
    unit.write_text(UNIT.read_text().replace("/opt/s4kv/build/src/cli/s4kv", str(S4KV)))
    r = run(["systemd-analyze", "verify", str(unit)])
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stderr


def exposure():
    r = run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(UNIT)])
    assert r.returncode == 0, r.stderr
    m = re.search(r"Overall exposure level for s4kv\.service: ([0-9.]+) (\w+)", r.stdout)
    assert m, r.stdout[-2000:]
    return float(m.group(1)), m.group(2)


def test_security_exposure_is_low_and_documented():
    score, verdict = exposure()
    assert score <= 2.0 and verdict == "OK", (score, verdict)
    doc = (ROOT / "docs" / "deploy.md").read_text()
    assert f"exposure level {score:.1f}" in doc, f"docs/deploy.md must record exposure {score:.1f}"


def test_unit_is_hardened_and_drains():
    s = unit_settings()["Service"]
    want = {
        "User": "s4kv", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
        "PrivateTmp": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
        "Restart": "on-failure", "KillSignal": "SIGTERM", "EnvironmentFile": "/etc/s4kv/s4kv.env",
        "DevicePolicy": "closed",
    }
    for key, value in want.items():
        assert s.get(key) == [value], (key, s.get(key))
    # The server drains for --shutdown-timeout (30 s by default) after SIGTERM; systemd must
    # wait longer than that before SIGKILL, and restart with a delay.
    assert int(s["TimeoutStopSec"][0]) > 30
    assert int(s["RestartSec"][0]) >= 5
    unit = unit_settings()["Unit"]
    assert int(unit["StartLimitBurst"][0]) >= 1 and int(unit["StartLimitIntervalSec"][0]) > 0
    # The key reaches the process through the root-only environment file, never a command line.
    assert "S4KV_API_KEY" not in s["ExecStart"][0] and "--api-key" not in s["ExecStart"][0]


def test_hadolint_is_clean():
    r = run([str(TOOLS / "hadolint"), str(DOCKERFILE)])
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr
    # Every inline ignore says why on the line above it.
    lines = DOCKERFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore" in line:
            assert i > 0 and lines[i - 1].startswith("#") and len(lines[i - 1]) > 20, line


def test_checkov_passes_the_dockerfile():
    r = run([str(TOOLS / "checkov"), "-f", str(DOCKERFILE), "--framework", "dockerfile",
             "--compact", "--quiet", "--skip-download"],
            env={**os.environ, "BC_SKIP_MAPPING": "TRUE"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Failed checks: 0" in r.stdout or r.stdout.strip() == "", r.stdout[-3000:]


def test_image_builds_in_two_stages_and_runs_unprivileged():
    text = DOCKERFILE.read_text()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(froms) == 2 and "-devel-" in froms[0] and "-runtime-" in froms[1], froms
    final = text[text.rindex("\nFROM "):]
    user = re.findall(r"^USER (\S+)", final, re.M)
    assert user and not user[-1].startswith(("root", "0")), user
    assert re.search(r"^HEALTHCHECK .*\n.*/health", final, re.M), "HEALTHCHECK on /health"
    assert re.search(r"^EXPOSE 8000$", final, re.M)
    # The files the image copies exist, and the build uses the project's own CMake targets.
    for src in re.findall(r"^COPY (?!--from)(\S+) ", text, re.M):
        assert src == "." or (ROOT / src).exists(), src
    assert "--target s4kv" in text


def test_entrypoint_refuses_a_missing_model_and_never_puts_the_key_on_the_command_line(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    log = tmp_path / "calls"
    for name in ("s4kv", "hf"):
        (fake_bin / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n')
        (fake_bin / name).chmod(0o755)
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "HF_HOME": str(tmp_path / "models"),
           "S4KV_PORT": "8000", "S4KV_API_KEY": "sk-never-on-argv-123456"}
    r = run(["bash", str(ENTRYPOINT), "Qwen/Qwen2.5-7B-Instruct"], env=env)
    assert r.returncode == 2 and "not in" in r.stderr, r.stderr
    assert not log.exists(), "nothing runs without the model"
    r = run(["bash", str(ENTRYPOINT), "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"],
            env={**env, "S4KV_FETCH_MODEL": "1"})
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("hf download Qwen/Qwen2.5-7B-Instruct")
    assert calls[1] == ("s4kv serve Qwen/Qwen2.5-7B-Instruct --host 0.0.0.0 --port 8000 "
                        "--max-model-len 8192")
    assert "sk-never" not in log.read_text()
    # With the model in the cache: no download, straight to the server.
    log.unlink()
    (tmp_path / "models" / "hub" / "models--Qwen--Qwen2.5-7B-Instruct").mkdir(parents=True)
    r = run(["bash", str(ENTRYPOINT), "Qwen/Qwen2.5-7B-Instruct"], env=env)
    assert r.returncode == 0, r.stderr
    assert log.read_text().splitlines() == [
        "s4kv serve Qwen/Qwen2.5-7B-Instruct --host 0.0.0.0 --port 8000"]
