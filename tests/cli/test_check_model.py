"""`s4kv check-model` end to end: the real binary ($S4KV_BIN) on the five promised configs,
on every refused config of tests/model/configs/ (expected first errors in
expected_errors.json, shared with the C++ test), on a fake Hugging Face cache, and on tiny
models with real safetensors or dummy weights."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "configs"
BATTERY = ROOT / "tests" / "model" / "configs"
EXPECTED = json.loads((BATTERY / "expected_errors.json").read_text())

KEYS = [
    "supported", "errors", "model", "model_path", "model_type", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "num_parameters", "dtype",
    "weights", "kv_bytes_per_token", "kv_density", "block_size", "value_group_size",
]

# name: (model_type, layers, heads, kv heads, parameters (public counts), 16-bit KV bytes/token)
MODELS = {
    "qwen2.5-1.5b-instruct": ("qwen2", 28, 12, 2, 1543714304, 28672),
    "qwen2.5-3b-instruct": ("qwen2", 36, 16, 2, 3085938688, 36864),
    "qwen2.5-7b-instruct": ("qwen2", 28, 28, 4, 7615616512, 57344),
    "llama-3.2-3b-instruct": ("llama", 28, 24, 8, 3212749824, 114688),
    "llama-3.1-8b-instruct": ("llama", 32, 32, 8, 8030261248, 131072),
}


def run(*args, env=None):
    binary = os.environ.get("S4KV_BIN")
    if not binary:
        pytest.skip("S4KV_BIN is not set (run through ctest)")
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([binary, "check-model", *args], capture_output=True, text=True,
                          env=full_env, timeout=120)


def model_dir(tmp_path, config_file, name="model"):
    d = tmp_path / name
    d.mkdir()
    shutil.copyfile(config_file, d / "config.json")
    return d


def assert_refused(proc, first_error):
    """Exit 2, exactly one stderr line: `error: <first_error>` (a trailing ... makes a prefix)."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    want = "error: " + first_error
    if want.endswith("..."):
        assert lines[0].startswith(want[:-3]), lines[0]
    else:
        assert lines[0] == want


@pytest.mark.parametrize("name", sorted(MODELS))
def test_promised_models(tmp_path, name):
    model_type, layers, heads, kv_heads, params, kv16 = MODELS[name]
    d = model_dir(tmp_path, FIXTURES / f"{name}.json")
    proc = run("--model", str(d), "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    report = json.loads(proc.stdout)
    assert list(report) == KEYS
    assert report["supported"] is True
    assert report["errors"] == []
    assert report["model"] == str(d)
    assert report["model_path"] == str(d)
    assert report["model_type"] == model_type
    assert report["num_hidden_layers"] == layers
    assert report["num_attention_heads"] == heads
    assert report["num_key_value_heads"] == kv_heads
    assert report["head_dim"] == 128
    assert report["num_parameters"] == params
    assert report["dtype"] == "bfloat16"
    assert report["weights"] == "absent"
    assert report["kv_bytes_per_token"] == {"16bit": kv16, "int4_kivi": 140 * layers * kv_heads}
    assert kv16 == 512 * layers * kv_heads
    assert report["kv_density"] == 3.657
    assert report["block_size"] == 64
    assert report["value_group_size"] == 128


def test_text_report(tmp_path):
    d = model_dir(tmp_path, FIXTURES / "llama-3.1-8b-instruct.json")
    proc = run("--model", str(d))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for line in ["supported: true", "model_type: llama", "head_dim: 128",
                 "num_parameters: 8030261248", "dtype: bfloat16", "weights: absent",
                 "kv_bytes_per_token.16bit: 131072", "kv_bytes_per_token.int4_kivi: 35840",
                 "kv_density: 3.657", "block_size: 64", "value_group_size: 128"]:
        assert line in lines, proc.stdout


@pytest.mark.parametrize("block_size,per_head", [(32, 148), (64, 140), (128, 136)])
def test_block_sizes(tmp_path, block_size, per_head):
    d = model_dir(tmp_path, FIXTURES / "qwen2.5-7b-instruct.json")
    proc = run("--model", str(d), "--json", "--block-size", str(block_size))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["block_size"] == block_size
    assert report["kv_bytes_per_token"]["int4_kivi"] == per_head * 28 * 4
    assert report["kv_density"] == round(512 / per_head, 3)


@pytest.mark.parametrize("block_size", ["48", "0", "-64", "256"])
def test_bad_block_size(tmp_path, block_size):
    d = model_dir(tmp_path, FIXTURES / "qwen2.5-7b-instruct.json")
    proc = run("--model", str(d), "--block-size", block_size)
    assert_refused(proc, f"unsupported block_size={block_size} (supported: 32, 64, 128)")
    proc = run("--model", str(d), "--block-size", block_size, "--json")
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["supported"] is False
    assert report["kv_bytes_per_token"] == {"16bit": 57344, "int4_kivi": None}
    assert report["kv_density"] is None


@pytest.mark.parametrize("file", sorted(EXPECTED))
def test_refused_configs(tmp_path, file):
    d = model_dir(tmp_path, BATTERY / file)
    want = EXPECTED[file].replace("{path}", str(d / "config.json"))
    assert_refused(run("--model", str(d)), want)
    proc = run("--model", str(d), "--json")
    assert_refused(proc, want)
    report = json.loads(proc.stdout)
    assert list(report) == KEYS
    assert report["supported"] is False
    assert report["errors"][0] == proc.stderr.strip()[len("error: "):]
    for key in ["model_type", "num_hidden_layers", "head_dim", "num_parameters", "dtype",
                "weights", "kv_bytes_per_token", "kv_density"]:
        assert report[key] is None, key


def test_non_json_config_names_the_file(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "qwen2", "hidden_size": 3584,')
    assert_refused(run("--model", str(d)), f"{d}/config.json is not valid JSON: ...")


def test_missing_model(tmp_path):
    missing = tmp_path / "nothing"
    assert_refused(run("--model", str(missing)),
                   f"model {missing}: no such directory (and not an ORG/NAME id)")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_refused(run("--model", str(empty)),
                   f"{empty}/config.json: no such file (a model directory holds config.json)")


def make_cache_repo(hub, org_name, revs, ref_main):
    repo = hub / ("models--" + org_name.replace("/", "--"))
    for rev in revs:
        (repo / "snapshots" / rev).mkdir(parents=True)
        shutil.copyfile(FIXTURES / "qwen2.5-7b-instruct.json",
                        repo / "snapshots" / rev / "config.json")
    if ref_main is not None:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(ref_main)
    return repo


def test_hf_cache_id(tmp_path):
    hf_home = tmp_path / "hf"
    repo = make_cache_repo(hf_home / "hub", "Qwen/Qwen2.5-7B-Instruct", ["a1", "b2"], "b2")
    env = {"HF_HOME": str(hf_home), "HF_HUB_CACHE": ""}
    proc = run("--model", "Qwen/Qwen2.5-7B-Instruct", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert report["model_path"] == str(repo / "snapshots" / "b2")
    assert report["num_key_value_heads"] == 4


def test_hf_hub_cache_and_single_snapshot(tmp_path):
    repo = make_cache_repo(tmp_path / "hub", "org/m", ["only"], None)
    proc = run("--model", "org/m", "--json", env={"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model_path"] == str(repo / "snapshots" / "only")


def test_hf_cache_miss(tmp_path):
    hub = tmp_path / "hf" / "hub"
    proc = run("--model", "Qwen/Qwen2.5-1.5B-Instruct",
               env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": ""})
    assert_refused(proc, "model Qwen/Qwen2.5-1.5B-Instruct: not a directory, and not in the "
                         f"Hugging Face cache ({hub}/models--Qwen--Qwen2.5-1.5B-Instruct/snapshots "
                         "does not exist; S4 KV never downloads)")


def test_hf_cache_ambiguous(tmp_path):
    hub = tmp_path / "hf" / "hub"
    make_cache_repo(hub, "org/m", ["r1", "r2"], None)
    proc = run("--model", "org/m", env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": ""})
    assert_refused(proc, f"model org/m: {hub}/models--org--m/snapshots holds several snapshots "
                         "(r1, r2) and no refs/main says which; pass the snapshot directory")


# A tiny qwen2 model: head_dim 128, 2 heads, 1 KV head, 2 layers.
TINY = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "vocab_size": 1000, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "torch_dtype": "float16",
    "tie_word_embeddings": False, "hidden_act": "silu", "eos_token_id": 999,
}


def tiny_tensors():
    h, i, v, q, kv = 256, 512, 1000, 256, 128
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,),
              "lm_head.weight": (v, h)}
    for layer in range(2):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.q_proj.bias": (q,),
            p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.k_proj.bias": (kv,),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.v_proj.bias": (kv,),
            p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        })
    rng = np.random.default_rng(0)
    return {name: rng.uniform(-0.01, 0.01, shape).astype(np.float16)
            for name, shape in shapes.items()}


TINY_PARAMS = sum(int(np.prod(t.shape)) for t in tiny_tensors().values())


def tiny_model(tmp_path, tensors=None):
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY))
    if tensors is not None:
        save_file(tensors, str(d / "model.safetensors"))
    return d


def test_tiny_without_weights_counts_from_config(tmp_path):
    proc = run("--model", str(tiny_model(tmp_path)), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["weights"] == "absent"
    assert report["num_parameters"] == TINY_PARAMS
    assert report["dtype"] == "float16"
    assert report["kv_bytes_per_token"] == {"16bit": 512 * 2, "int4_kivi": 140 * 2}


def test_tiny_with_weights(tmp_path):
    proc = run("--model", str(tiny_model(tmp_path, tiny_tensors())), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["weights"] == "present"
    assert report["num_parameters"] == TINY_PARAMS


def test_tiny_dummy_weights(tmp_path):
    proc = run("--model", str(tiny_model(tmp_path)), "--json", "--load-format", "dummy")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["weights"] == "dummy"
    assert report["num_parameters"] == TINY_PARAMS


def test_tiny_with_missing_tensor(tmp_path):
    tensors = tiny_tensors()
    del tensors["model.layers.1.mlp.up_proj.weight"]
    proc = run("--model", str(tiny_model(tmp_path, tensors)), "--json")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "model.layers.1.mlp.up_proj.weight" in lines[0]
    report = json.loads(proc.stdout)
    assert report["supported"] is False
    assert report["weights"] == "present"
    assert report["num_parameters"] is None
    assert report["model_type"] == "qwen2"  # the config itself was fine


def test_bad_load_format(tmp_path):
    proc = run("--model", str(tiny_model(tmp_path)), "--load-format", "pt")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "load-format" in lines[0]


def test_unknown_command_is_named():
    binary = os.environ.get("S4KV_BIN")
    if not binary:
        pytest.skip("S4KV_BIN is not set (run through ctest)")
    p = subprocess.run([binary, "bogus", "--model", "x"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert lines == ["error: unknown command 'bogus' (commands: bench, check-model, eval, "
                     "generate, render-chat, serve, tokenize)"]
