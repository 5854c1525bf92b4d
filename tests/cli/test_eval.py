"""`s4kv eval` end to end on s4kv-tiny: the real binary, a held-out text, the JSON report."""
import json
import os
import subprocess

import pytest

BIN = os.environ.get("S4KV_BIN", "build/src/cli/s4kv")
SMALL = ["--prefix-len", "192", "--continuation-len", "48", "--num-windows", "2",
         "--greedy-len", "16"]


def run(*args):
    return subprocess.run([BIN, "eval", *args], capture_output=True, text=True, timeout=600)


def test_same_format_is_identical(text, tmp_path):
    out = tmp_path / "r.json"
    p = run("--model", "models/s4kv-tiny", "--text", text, "--kv-cache-dtype", "auto", *SMALL,
            "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.strip().splitlines()) == 1
    r = json.loads(out.read_text())
    assert r["mean_kl"] == 0 and r["max_kl"] == 0
    assert r["top1_agreement"] == 1 and r["greedy_match_rate"] == 1
    assert r["ppl_reference"] == r["ppl_test"] and 1 < r["ppl_reference"] < 100
    assert r["num_positions"] == 2 * 47 and r["mean_first_divergence"] == 16
    assert r["settings"]["kv_cache_dtype"] == "16bit" and r["settings"]["num_windows"] == 2


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "int4_kivi"])
def test_quantized_formats_measured(text, tmp_path, dtype):
    out = tmp_path / "r.json"
    p = run("--model", "models/s4kv-tiny", "--text", text, "--kv-cache-dtype", dtype, *SMALL,
            "--json", str(out))
    if p.returncode == 2 and "unsupported" in p.stderr and "kv" in p.stderr.lower():
        pytest.skip(f"backend refuses {dtype}: {p.stderr.strip()}")
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    # A quantized cache moves the distribution a little, never far, on this model.
    assert 0 < r["mean_kl"] < 0.1
    assert r["top1_agreement"] > 0.8
    assert r["settings"]["kv_cache_dtype"] == dtype


def test_candidates_share_one_reference_pass(text, tmp_path):
    """--candidates: one report per format, named canonically, each equal to the report of a
    run with that format's flags alone."""
    out = tmp_path / "many"
    p = run("--model", "models/s4kv-tiny", "--text", text, *SMALL, "--json-dir", str(out),
            "--candidates", "fp8_e4m3,int4_b32_gv64_sink1_had,int4_post_rope")
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.strip().splitlines()) == 3
    names = sorted(f.name for f in out.iterdir())
    assert names == ["fp8_e4m3.json", "int4_b32_gv64_sink1_had.json",
                     "int4_b64_gv128_post_rope.json"]
    single = tmp_path / "one.json"
    p = run("--model", "models/s4kv-tiny", "--text", text, *SMALL, "--json", str(single),
            "--kv-cache-dtype", "int4_kivi", "--block-size", "32", "--kivi-group-size", "64",
            "--int4-sink-blocks", "1", "--int4-window-blocks", "0", "--int4-value-hadamard", "1")
    assert p.returncode == 0, p.stderr
    many = json.loads((out / "int4_b32_gv64_sink1_had.json").read_text())
    one = json.loads(single.read_text())
    assert many == one and many["format"] == "int4_b32_gv64_sink1_had"
    assert many["settings"]["int4_sink_blocks"] == 1 and many["density_8k"] < 3.5


@pytest.mark.parametrize("args,needle", [
    (["--candidates", "int4_b64_gv128_x"], "cannot parse 'int4_b64_gv128_x'"),
    (["--candidates", "int4_b48"], "block_size=48"),
    (["--candidates", "int4_sink9"], "sink"),
    (["--candidates", "int3"], "--candidates=int3"),
    (["--candidates", "fp8_e4m3", "--json", "x.json"], "--json-dir"),
    (["--text", "/no/such/file"], "/no/such/file"),
    (["--kv-cache-dtype", "int3"], "--kv-cache-dtype=int3"),
    (["--block-size", "48"], "block_size=48"),
    (["--prefix-len", "100000"], "max_position_embeddings=4096"),
])
def test_bad_input_exits_2_with_one_line(text, args, needle):
    opts = {"--model": "models/s4kv-tiny", "--text": text, **dict(zip(SMALL[::2], SMALL[1::2]))}
    opts.update(zip(args[::2], args[1::2]))
    p = run(*[x for kv in opts.items() for x in kv])
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], p.stderr
