"""Runs the boot script of deploy/cfn-gpu-serving.yaml (the launch template's UserData, the
only copy of it) under stubs, for both modes of the template.

The script is rendered as CloudFormation's Fn::Sub would render it, then run by bash with a
directory of fake commands first on PATH (apt-get, git, aws, hf, systemctl, curl, cfn-signal...)
that record their argv, and with S4KV_BOOT_ROOT pointing every path it writes (/etc, /opt,
/var) into a temporary directory. The tests pin the exact commands it runs, in order, check
that the API key reaches the environment file only (never a log, an output or a command line),
and that any failure, including a server that never answers /health, signals failure to the
stack and exits non-zero.
"""

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
from cfn_template import load_template

REPO = Path(__file__).resolve().parents[2]

SECRET = "sk-s4kv-Secret-Value-0123456789abcdef"
SECRET_ARN = "arn:aws:secretsmanager:us-west-2:111122223333:secret:s4kv-test-ApiKeySecret-AbCdEf"
REPOSITORY = "https://git.example.com/s4kv/s4kv.git"
CFN_BOOTSTRAP = (
    "https://s3.amazonaws.com/cloudformation-examples/aws-cfn-bootstrap-py3-latest.tar.gz")
STACK_VALUES = {
    "ModelId": "Qwen/Qwen2.5-7B-Instruct",
    "KvCacheDtype": "int4_kivi",
    "MaxModelLen": "32768",
    "GpuMemoryUtilization": "0.9",
    "ApiKeySecret": SECRET_ARN,  # Ref of an AWS::SecretsManager::Secret: its ARN
    "SourceRepository": REPOSITORY,
    "SourceRef": "v1.2.3",
    "AWS::StackName": "s4kv-test",
    "AWS::Region": "us-west-2",
}
MODES = {"single": "Instance", "scale-out": "ServerGroup"}

# --- the template --------------------------------------------------------------------------


def user_data_sub() -> tuple[str, dict]:
    """The UserData's Fn::Sub: the script text and its variable map."""
    user_data = load_template()["Resources"]["LaunchTemplate"]["Properties"][
        "LaunchTemplateData"]["UserData"]
    sub = user_data["Fn::Base64"]["Fn::Sub"]
    assert isinstance(sub, list) and len(sub) == 2, "UserData: Fn::Base64 of a [text, map] Fn::Sub"
    return sub[0], sub[1]


def render(mode: str) -> str:
    """The script as CloudFormation renders it in `mode`: ${Name} a stack value, ${!x} ${x}."""
    text, variables = user_data_sub()
    # The one variable of the map: which resource the instance signals, by mode.
    assert variables == {"SignalResource": {"Fn::If": ["ScaleOut", "ServerGroup", "Instance"]}}
    values = dict(STACK_VALUES, SignalResource=MODES[mode])

    def substitute(m: re.Match) -> str:
        name = m.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        assert name in values, f"the boot script uses an unknown stack value ${{{name}}}"
        return values[name]

    return re.sub(r"\$\{([^}]*)\}", substitute, text)


# --- the stub environment ------------------------------------------------------------------

# One stub for every fake command (symlinks to it; it dispatches on its name). It records its
# argv, as fields separated by \x1f and records ended by \x1e, to $STUB_LOG.
STUB = r"""#!/bin/bash
name=$(basename "$0")
{ printf '%s' "$name"; for a in "$@"; do printf '\037%s' "$a"; done; printf '\036'; } >> "$STUB_LOG"
case "$name" in
  aws)
    if [ -e "$STUB_DIR/aws-fails" ]; then
      echo "An error occurred (AccessDeniedException) when calling GetSecretValue" >&2
      exit 255
    fi
    cat "$STUB_DIR/secret" ;;
  curl)
    # Healthy from the Nth poll on (file healthy-after), never without the file.
    [ -e "$STUB_DIR/healthy-after" ] || exit 7
    n=$(( $(cat "$STUB_DIR/curl-count" 2>/dev/null || echo 0) + 1 ))
    echo "$n" > "$STUB_DIR/curl-count"
    [ "$n" -ge "$(cat "$STUB_DIR/healthy-after")" ] || exit 7 ;;
  nvidia-smi) echo "8.6" ;;
  getent) exit 2 ;;  # no s4kv user yet
  python3)
    # python3 -m venv DIR: a venv whose tools are stubs too.
    if [ "$1" = -m ] && [ "$2" = venv ]; then
      mkdir -p "$3/bin"
      for tool in pip hf cfn-signal; do ln -s "$STUB_DIR/stub" "$3/bin/$tool"; done
    fi ;;
  git)
    # git clone URL DIR: a source tree whose scripts record themselves.
    if [ "$1" = clone ]; then cp -r "$STUB_DIR/source" "${@: -1}"; fi ;;
  hf) printf '%s\n' "$HF_HOME" >> "$STUB_DIR/hf-home" ;;
esac
exit 0
"""

FAKE_COMMANDS = ["apt-get", "python3", "getent", "useradd", "git", "nvidia-smi", "chown", "aws",
                 "install", "systemctl", "curl"]

# The checked-out scripts/: they record that they ran, where, and with which GPU architectures.
SOURCE_SCRIPT = r"""#!/bin/bash
{ printf '%s' "$(basename "$0")"
  for a in "$@"; do printf '\037%s' "$a"; done
  printf '\037cwd=%s' "$PWD"
  arch=${S4KV_CUDA_ARCHITECTURES:-}
  [ -z "$arch" ] || printf '\037S4KV_CUDA_ARCHITECTURES=%s' "$arch"
  cmake_args=${S4KV_CMAKE_ARGS:-}
  [ -z "$cmake_args" ] || printf '\037S4KV_CMAKE_ARGS=%s' "$cmake_args"
  printf '\036'; } >> "$STUB_LOG"
"""


class Run:
    def __init__(self, proc, root: Path, stubs: Path):
        self.proc = proc
        self.root = root
        self.stubs = stubs
        raw = (stubs / "log").read_text() if (stubs / "log").exists() else ""
        # Paths under the temporary root read as on the instance.
        self.argv = [[f.replace(str(root), "") for f in rec.split("\x1f")]
                     for rec in raw.split("\x1e") if rec]
        self.raw_log = raw
        self.commands = [" ".join(a) for a in self.argv]

    @property
    def boot_log(self) -> str:
        return (self.root / "var/log/s4kv-boot.log").read_text()

    def signals(self) -> list[list[str]]:
        return [a for a in self.argv if a[0] == "cfn-signal"]


def run_boot(tmp_path: Path, mode: str, *, healthy_after: int | None = 2,
             aws_fails: bool = False, secret: str = SECRET, timeout_s: str = "600") -> Run:
    root = tmp_path / "root"
    stubs = tmp_path / "stubs"
    bindir = stubs / "bin"
    bindir.mkdir(parents=True)
    root.mkdir()
    (stubs / "stub").write_text(STUB)
    (stubs / "stub").chmod(0o755)
    for cmd in FAKE_COMMANDS:
        (bindir / cmd).symlink_to(stubs / "stub")
    (stubs / "secret").write_text(secret + "\n")
    if healthy_after is not None:
        (stubs / "healthy-after").write_text(str(healthy_after))
    if aws_fails:
        (stubs / "aws-fails").touch()
    source = stubs / "source"
    (source / ".git").mkdir(parents=True)
    (source / "scripts").mkdir()
    (source / "deploy").mkdir()
    for script in ("install_deps.sh", "build.sh"):
        (source / "scripts" / script).write_text(SOURCE_SCRIPT)
    (source / "deploy" / "s4kv.service").write_text("[Unit]\n")

    script = tmp_path / "user-data.sh"
    script.write_text(render(mode))
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "STUB_LOG": str(stubs / "log"),
        "STUB_DIR": str(stubs),
        "S4KV_BOOT_ROOT": str(root),
        "S4KV_HEALTH_TIMEOUT": timeout_s,
        "S4KV_HEALTH_INTERVAL": "0.1",
    }
    proc = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    return Run(proc, root, stubs)


def expected_commands(resource: str, health_polls: int, exit_code: int) -> list[str]:
    """Every command the boot script runs on success, in order."""
    return [
        "apt-get update -qq",
        "apt-get install -y -qq --no-install-recommends git curl python3-venv",
        "python3 -m venv /opt/s4kv-boot",
        f"pip install -q {CFN_BOOTSTRAP} huggingface_hub>=0.34",
        "getent passwd s4kv",
        "useradd --system --home-dir /var/lib/s4kv --shell /usr/sbin/nologin s4kv",
        f"git clone --quiet {REPOSITORY} /opt/s4kv",
        "git -C /opt/s4kv checkout --quiet v1.2.3",
        "install_deps.sh --build-only cwd=/opt/s4kv",
        "nvidia-smi --query-gpu=compute_cap --format=csv,noheader",
        "build.sh cwd=/opt/s4kv S4KV_CUDA_ARCHITECTURES=86"
        " S4KV_CMAKE_ARGS=-DS4KV_BUILD_TESTS=OFF -DS4KV_BUILD_BENCH=OFF",
        "hf download Qwen/Qwen2.5-7B-Instruct"
        " --exclude *.pth --exclude *.pt --exclude *.bin --exclude original/*",
        "chown -R s4kv:s4kv /var/lib/s4kv",
        f"aws secretsmanager get-secret-value --secret-id {SECRET_ARN} --region us-west-2"
        " --query SecretString --output text",
        "install -m 0644 deploy/s4kv.service /etc/systemd/system/s4kv.service",
        "systemctl daemon-reload",
        "systemctl enable s4kv.service",
        "systemctl start s4kv.service",
        *["curl -sf --max-time 5 -o /dev/null http://127.0.0.1:8000/health"] * health_polls,
        f"cfn-signal --exit-code {exit_code} --stack s4kv-test --resource {resource}"
        " --region us-west-2",
    ]


def assert_key_confined(run: Run, secret: str = SECRET) -> None:
    """The key is in the environment file (if written) and nowhere else the script touched."""
    assert secret not in run.proc.stdout
    assert secret not in run.proc.stderr
    assert secret not in run.raw_log  # no fake command saw it in its argv
    env_file = run.root / "etc/s4kv/s4kv.env"
    for path in run.root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path != env_file:
            assert secret not in path.read_text(errors="replace"), path


# --- the tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_boot_runs_the_exact_commands_and_signals_success(tmp_path, mode):
    run = run_boot(tmp_path, mode, healthy_after=3)
    assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert run.commands == expected_commands(MODES[mode], health_polls=3, exit_code=0)

    # The environment file deploy/s4kv.service reads: root's alone, the key from the secret.
    env_file = run.root / "etc/s4kv/s4kv.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert env_file.read_text() == (
        f"S4KV_API_KEY={SECRET}\n"
        "S4KV_MODEL=Qwen/Qwen2.5-7B-Instruct\n"
        "HF_HOME=/var/lib/s4kv/hf\n"
        'S4KV_ARGS="--host 0.0.0.0 --port 8000 --kv-cache-dtype int4_kivi'
        ' --max-model-len 32768 --gpu-memory-utilization 0.9"\n')
    # The model went into the cache the service reads (under the temporary root here).
    assert (run.stubs / "hf-home").read_text() == f"{run.root}/var/lib/s4kv/hf\n"
    assert (run.root / "var/lib/s4kv/hf").is_dir()
    assert (run.root / "opt/s4kv/scripts/build.sh").is_file()  # the clone went to /opt/s4kv
    assert "DPkg::Lock::Timeout" in (
        run.root / "etc/apt/apt.conf.d/90s4kv-lock-timeout").read_text()

    assert "healthy; signalling" in run.boot_log
    assert run.boot_log == run.proc.stdout  # everything the script says is in its log
    assert_key_confined(run)


@pytest.mark.parametrize("mode", MODES)
def test_unhealthy_server_signals_failure(tmp_path, mode):
    run = run_boot(tmp_path, mode, healthy_after=None, timeout_s="1")
    assert run.proc.returncode != 0
    polls = run.commands.count("curl -sf --max-time 5 -o /dev/null http://127.0.0.1:8000/health")
    assert polls >= 1  # how many fit in the second depends on the machine's load
    # Everything up to the health wait ran, then one failure signal and nothing else.
    assert run.commands == expected_commands(MODES[mode], health_polls=polls, exit_code=1)
    assert run.signals() == [["cfn-signal", "--exit-code", "1", "--stack", "s4kv-test",
                              "--resource", MODES[mode], "--region", "us-west-2"]]
    assert "/health did not answer within 1 s" in run.boot_log
    assert_key_confined(run)


@pytest.mark.parametrize("mode", MODES)
def test_secret_read_failure_signals_failure(tmp_path, mode):
    run = run_boot(tmp_path, mode, aws_fails=True)
    assert run.proc.returncode != 0
    # Everything up to the secret read, then the failure signal.
    want = expected_commands(MODES[mode], health_polls=0, exit_code=1)
    aws = next(i for i, c in enumerate(want) if c.startswith("aws secretsmanager "))
    assert run.commands == want[: aws + 1] + want[-1:]
    assert not (run.root / "etc/s4kv/s4kv.env").exists()
    assert not any(c.startswith("systemctl") for c in run.commands)
    assert "failed (exit 255)" in run.boot_log


def test_empty_secret_signals_failure(tmp_path):
    run = run_boot(tmp_path, "single", secret="")
    assert run.proc.returncode != 0
    assert run.signals()[-1][:3] == ["cfn-signal", "--exit-code", "1"]
    assert not (run.root / "etc/s4kv/s4kv.env").exists()
    assert "the API key secret is empty" in run.boot_log


def test_script_never_traces_and_parses():
    text, _ = user_data_sub()
    # xtrace would print the key as the env file is written.
    assert not re.search(r"^\s*set\s+-[a-z]*x|xtrace|bash\s+-x", text, re.M)
    assert text.startswith("#!/bin/bash\n")
    for mode in MODES:
        subprocess.run(["bash", "-n"], input=render(mode), text=True, check=True)
    # The two modes differ only in the resource they signal.
    assert render("single").replace("'Instance'", "'X'") == (
        render("scale-out").replace("'ServerGroup'", "'X'"))


def test_user_data_is_the_launch_templates_only_copy():
    # One source of truth: no separate deploy/user-data.sh to drift from the template.
    assert not (REPO / "deploy" / "user-data.sh").exists()
    assert "Fn::Base64" in load_template()["Resources"]["LaunchTemplate"]["Properties"][
        "LaunchTemplateData"]["UserData"]
