"""`s4kv bench throughput` and `s4kv bench latency` end to end: the real binary ($S4KV_BIN) on
models/s4kv-tiny (and on dummy weights from its config.json) on the CPU with small sizes: the
printed lines parse, the token counts are exact (every request ignores EOS), the decode steps
are told from the prefill steps, --output-json holds the figures and the settings, and bad
input exits 2 with one `error:` line. No timing is asserted: the figures vary by machine."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "models" / "s4kv-tiny")
NUMBER = r"([0-9]+(?:\.[0-9]+)?)"


def run(*args):
    binary = os.environ.get("S4KV_BIN")
    if not binary:
        pytest.skip("S4KV_BIN is not set (run through ctest)")
    return subprocess.run([binary, "bench", *args], capture_output=True, text=True, timeout=300)


def throughput(tmp_path, *args, model=MODEL):
    out = tmp_path / "throughput.json"
    r = run("throughput", "--model", model, "--device", "cpu", "--input-len", "16",
            "--output-len", "8", "--num-prompts", "6", "--max-num-seqs", "4",
            "--output-json", str(out), *args)
    assert r.returncode == 0, r.stderr
    return r, json.loads(out.read_text())


def check_throughput(r, report, num_prompts=6, input_len=16, output_len=8):
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout
    m = re.fullmatch(rf"Throughput: {NUMBER} requests/s, {NUMBER} total tokens/s, {NUMBER} output "
                     r"tokens/s", lines[0])
    assert m, lines[0]
    assert float(m[1]) > 0 and float(m[2]) > float(m[3]) > 0
    assert lines[1] == f"Total num prompt tokens:  {num_prompts * input_len}"
    assert lines[2] == f"Total num output tokens:  {num_prompts * output_len}"
    assert report["num_requests"] == num_prompts
    assert report["total_num_tokens"] == num_prompts * (input_len + output_len)
    assert report["total_num_prompt_tokens"] == num_prompts * input_len
    assert report["total_num_output_tokens"] == num_prompts * output_len
    assert report["elapsed_time"] > 0
    s = report["elapsed_time"]
    assert report["requests_per_second"] == pytest.approx(num_prompts / s)
    assert report["tokens_per_second"] == pytest.approx(report["total_num_tokens"] / s)
    assert report["output_tokens_per_second"] == pytest.approx(num_prompts * output_len / s)
    assert (report["input_len"], report["output_len"], report["num_prompts"]) == (
        input_len, output_len, num_prompts)
    assert report["device"] == "cpu"
    assert report["num_preemptions"] >= 0
    assert "bench throughput" in report["command"]


@pytest.mark.parametrize("kv_cache_dtype,name", [
    ("int4_kivi", "int4_kivi"), ("auto", "16bit"), ("fp8_e4m3", "fp8_e4m3")])
def test_throughput(tmp_path, kv_cache_dtype, name):
    r, report = throughput(tmp_path, "--kv-cache-dtype", kv_cache_dtype)
    check_throughput(r, report)
    assert report["kv_cache_dtype"] == name
    assert report["model"] == MODEL
    assert report["max_num_seqs"] == 4
    assert report["max_num_batched_tokens"] == 2048
    assert "KV cache:" in r.stderr


def test_throughput_same_seed_same_tokens(tmp_path):
    # The prompts and the engine's draws follow --seed: two runs agree on everything counted.
    _, a = throughput(tmp_path, "--seed", "3")
    _, b = throughput(tmp_path, "--seed", "3")
    assert a["total_num_tokens"] == b["total_num_tokens"]


def dummy_model(tmp_path):
    """s4kv-tiny's config and tokenizer without its weights."""
    d = tmp_path / "dummy"
    d.mkdir()
    for name in ["config.json", "tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(Path(MODEL) / name, d / name)
    return str(d)


def test_throughput_dummy_weights(tmp_path):
    model = dummy_model(tmp_path)
    r, report = throughput(tmp_path, "--load-format", "dummy", model=model)
    check_throughput(r, report)
    assert report["model"] == model


def test_dummy_without_load_format_dummy_is_refused(tmp_path):
    r = run("throughput", "--model", dummy_model(tmp_path), "--device", "cpu", "--input-len", "4",
            "--output-len", "2", "--num-prompts", "1")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: ") or "\nerror: " in r.stderr, r.stderr


def latency(tmp_path, *args, model=MODEL):
    out = tmp_path / "latency.json"
    r = run("latency", "--model", model, "--device", "cpu", "--input-len", "16", "--output-len",
            "8", "--batch-size", "2", "--num-iters-warmup", "1", "--num-iters", "2",
            "--output-json", str(out), *args)
    assert r.returncode == 0, r.stderr
    return r, json.loads(out.read_text())


def check_latency(r, report):
    lines = r.stdout.splitlines()
    assert len(lines) == 11, r.stdout
    m = re.fullmatch(rf"Avg latency: {NUMBER} seconds", lines[0])
    assert m, lines[0]
    assert float(m[1]) == pytest.approx(report["avg_latency"], abs=1e-6)
    for line, p in zip(lines[1:7], [10, 25, 50, 75, 90, 99]):
        m = re.fullmatch(rf"{p}% percentile latency: {NUMBER} seconds", line)
        assert m, line
        assert float(m[1]) == pytest.approx(report["percentiles"][str(p)], abs=1e-6)
    assert re.fullmatch(rf"Prefill: median {NUMBER} ms \(.*batch 2, input-len 16\)", lines[7])
    # One prefill step per iteration (2 x 16 tokens fit a step), then 7 decode steps, the first
    # at context 16 + 1, the last at 16 + 7: over the 2 timed iterations, 14.
    m = re.fullmatch(rf"Decode step: median {NUMBER} ms over 14 steps \(batch 2, context 17..23\)",
                     lines[8])
    assert m, lines[8]
    assert float(m[1]) == pytest.approx(report["decode_step_ms_median"], abs=1e-3)
    # A decode step's host time and its wait for the device (the CPU computes inside submit, so
    # its step is host time: the wait is ~0).
    m = re.fullmatch(rf"Decode step host time: median {NUMBER} ms outside the backend's wait "
                     rf"\(.*\), {NUMBER} ms waiting for the device \(this backend computes "
                     rf"inside submit: its whole step is host time\)", lines[9])
    assert m, lines[9]
    assert float(m[1]) == pytest.approx(report["decode_host_ms_median"], abs=1e-3)
    assert float(m[2]) == pytest.approx(report["decode_wait_ms_median"], abs=1e-3)
    assert report["decode_wait_ms_median"] <= report["decode_step_ms_median"]
    # The CPU backend reports its weights and measures its copy bandwidth.
    m = re.fullmatch(rf"Weights-only floor: {NUMBER} GB of weights / {NUMBER} GB/s copy bandwidth "
                     rf"= {NUMBER} ms per step; decode step = {NUMBER} x the floor", lines[10])
    assert m, lines[10]
    assert float(m[1]) * 1e9 == pytest.approx(report["weight_bytes"], rel=1e-2)
    assert report["copy_bandwidth_bytes_per_s"] > 0
    assert report["floor_ms"] == pytest.approx(
        report["weight_bytes"] / report["copy_bandwidth_bytes_per_s"] * 1e3)
    assert report["decode_over_floor"] == pytest.approx(
        report["decode_step_ms_median"] / report["floor_ms"])
    assert len(report["latencies"]) == 2
    assert report["avg_latency"] == pytest.approx(sum(report["latencies"]) / 2)
    assert report["decode_steps"] == 14
    assert report["decode_batch"] == [2, 2] and report["decode_context"] == [17, 23]
    assert 0 < report["prefill_seconds_median"] < max(report["latencies"])
    assert (report["batch_size"], report["input_len"], report["output_len"]) == (2, 16, 8)
    assert report["device"] == "cpu"
    assert "bench latency" in report["command"]


def test_latency(tmp_path):
    r, report = latency(tmp_path)
    check_latency(r, report)
    assert report["kv_cache_dtype"] == "int4_kivi"
    # s4kv-tiny as the CPU holds it: bf16 matrices (embeddings tied), fp32 norms.
    assert 30e6 < report["weight_bytes"] < 40e6


def test_latency_async_scheduling(tmp_path):
    # The same steps are counted (the last step(), which only drains the step scheduled ahead
    # for the finished requests, is neither prefill nor decode).
    r, report = latency(tmp_path, "--async-scheduling")
    check_latency(r, report)
    assert report["async_scheduling"] is True


def test_latency_dummy_weights(tmp_path):
    r, report = latency(tmp_path, "--load-format", "dummy", "--kv-cache-dtype", "auto",
                        model=dummy_model(tmp_path))
    check_latency(r, report)
    assert report["kv_cache_dtype"] == "16bit"


def test_latency_output_len_1_has_no_decode_step(tmp_path):
    out = tmp_path / "l.json"
    r = run("latency", "--model", MODEL, "--device", "cpu", "--input-len", "4", "--output-len",
            "1", "--batch-size", "1", "--num-iters-warmup", "0", "--num-iters", "1",
            "--output-json", str(out))
    assert r.returncode == 0, r.stderr
    assert "Decode step: none" in r.stdout
    report = json.loads(out.read_text())
    assert report["decode_steps"] == 0 and report["decode_step_ms_median"] is None
    assert report["decode_over_floor"] is None


@pytest.mark.parametrize("args,needle", [
    (["throughput", "--input-len", "0"], "--input-len must be at least 1, got 0"),
    (["throughput", "--output-len", "0"], "--output-len must be at least 1, got 0"),
    (["throughput", "--num-prompts", "0"], "--num-prompts must be at least 1, got 0"),
    (["throughput", "--input-len", "16", "--output-len", "8", "--max-model-len", "20"],
     "--input-len 16 + --output-len 8 = 24 tokens exceed max_model_len 20 (raise --max-model-len"),
    # Without --max-model-len the limit is the model's (4096), known once the engine is built.
    (["throughput", "--input-len", "4090", "--output-len", "10"],
     "= 4100 tokens exceed max_model_len 4096 (raise --max-model-len"),
    (["latency", "--input-len", "-1"], "--input-len must be at least 1, got -1"),
    (["latency", "--output-len", "0"], "--output-len must be at least 1, got 0"),
    (["latency", "--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["latency", "--num-iters", "0"], "--num-iters must be at least 1, got 0"),
    (["latency", "--num-iters-warmup", "-1"], "--num-iters-warmup must be at least 0, got -1"),
    (["latency", "--input-len", "4000", "--output-len", "128", "--max-model-len", "4096"],
     "--input-len 4000 + --output-len 128 = 4128 tokens exceed max_model_len 4096"),
    (["latency", "--batch-size", "x"], "--batch-size"),
    (["throughput", "--kv-cache-dtype", "int3"], "--kv-cache-dtype"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    r = run(*args, "--model", MODEL, "--device", "cpu")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and len(r.stderr.strip().splitlines()) <= 2, r.stderr
    assert needle in errors[0], errors[0]


def test_bench_needs_a_subcommand():
    r = run("--model", MODEL)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: "), r.stderr


def test_device_cuda_without_a_gpu_exits_2_naming_it():
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
        pytest.skip("a GPU is visible here")
    for sub in ["throughput", "latency"]:
        r = run(sub, "--model", MODEL, "--device", "cuda")
        assert r.returncode == 2, (r.stdout, r.stderr)
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "--device cuda" in errors[0], r.stderr
