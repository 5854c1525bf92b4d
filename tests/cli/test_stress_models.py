"""tools/make_stress_models.py end to end: it makes the stress models (and exits 1 when one does
not show its stress), `s4kv check-model` accepts them, and `s4kv eval` sees what each is for:
on the attention-sink model int4_kivi without a 16-bit first block moves the predictions far
(the sink's huge keys and values share their block's statistics with every other token) and
with `--int4-sink-blocks 1` it stays close. Windows start with the sink token (8189) as a
server's BOS would."""
import json
import os
import subprocess
import sys

import pytest

BIN = os.environ.get("S4KV_BIN", "build/src/cli/s4kv")
SINK_TOKEN = "8189"
SMALL = ["--prefix-len", "256", "--continuation-len", "32", "--num-windows", "1",
         "--greedy-len", "8"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("stress")
    p = subprocess.run([sys.executable, "tools/make_stress_models.py", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def model_dir(models, name):
    dirs = [d for d in os.listdir(models) if d.endswith(name) and
            os.path.isfile(os.path.join(models, d, "model.safetensors"))]
    assert len(dirs) == 1, (name, os.listdir(models))
    return os.path.join(models, dirs[0])


@pytest.mark.parametrize("name", ["keybias", "sink"])
def test_stress_model_is_a_valid_checkpoint(models, name):
    p = subprocess.run([BIN, "check-model", "--model", model_dir(models, name)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def eval_sink(models, text, tmp_path, *flags):
    out = tmp_path / "r.json"
    p = subprocess.run([BIN, "eval", "--model", model_dir(models, "sink"), "--text", text,
                        "--first-token", SINK_TOKEN, "--kv-cache-dtype", "int4_kivi", *flags,
                        *SMALL, "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())


def test_sink_block_holds_the_sink_model(models, text, tmp_path):
    plain = eval_sink(models, text, tmp_path, "--int4-sink-blocks", "0")
    sink = eval_sink(models, text, tmp_path, "--int4-sink-blocks", "1")
    # Smoke figures (1 window): about 1.7 nats without the block, 0.002 with it.
    assert plain["mean_kl"] > 0.1, plain["mean_kl"]
    assert sink["mean_kl"] < 0.02, sink["mean_kl"]
    assert sink["mean_kl"] * 10 < plain["mean_kl"]
