# GET /metrics of a real `s4kv serve`: vLLM's metric names (so vLLM dashboards work), S4 KV's
# KV-capacity gauges, a format promtool parses, and counters that grow by exactly the usage
# the responses reported.
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import metric_value, parse_metrics, wait_metric

GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:gpu_cache_usage_perc", "s4kv_kv_cache_capacity_tokens", "s4kv_kv_bytes_per_token",
          "s4kv_kv_density_ratio"]
COUNTERS = ["vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:request_success_total", "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total"]
HISTOGRAMS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:e2e_request_latency_seconds"]
# tiny model: 6 layers x 2 KV heads x (K 64+8 + V 64+4 bytes) per token, int4_kivi B=64 Gv=128.
TINY_INT4_BYTES_PER_TOKEN = 6 * 2 * 140
TINY_16BIT_BYTES_PER_TOKEN = 6 * 2 * 512
KV_CACHE_MEMORY = 192 << 20  # the session server's --kv-cache-memory


def some_traffic(client, model):
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                   max_tokens=4)
    list(client.completions.create(model=model, prompt="The city", max_tokens=4, stream=True))


def test_promtool_accepts(server, client, model):
    promtool = shutil.which("promtool") or (
        "/usr/bin/promtool" if os.path.exists("/usr/bin/promtool") else None)
    assert promtool, "promtool not installed: run scripts/install_deps.sh (Debian package prometheus)"
    some_traffic(client, model)
    text = server.metrics_text()
    proc = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                          capture_output=True, timeout=60)
    out = (proc.stdout + proc.stderr).decode()
    # promtool 2.42 lints ':' in names; vLLM's names have it by design, so only that lint is
    # tolerated. Parse errors (exit 1) and every other lint fail.
    problems = [line for line in out.splitlines() if line.strip() and not re.fullmatch(
        r"vllm:\S+ metric names should not contain ':'", line.strip())]
    assert proc.returncode in (0, 3) and not problems, f"promtool rc {proc.returncode}:\n{out}"


def test_names_types_and_labels(server, client, model):
    some_traffic(client, model)
    text = server.metrics_text()
    reply = server.request("GET", "/metrics")
    assert reply.headers["content-type"].startswith("text/plain")
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))

    def type_of(name):
        return types.get(name) or types.get(re.sub(r"_total$", "", name))

    for name in GAUGES:
        assert type_of(name) == "gauge", f"{name}: TYPE {type_of(name)}"
    for name in COUNTERS:
        assert type_of(name) == "counter", f"{name}: TYPE {type_of(name)}"
    for name in HISTOGRAMS:
        assert type_of(name) == "histogram", f"{name}: TYPE {type_of(name)}"
    for name in types:
        assert name in helps, f"{name} has no HELP"

    samples = parse_metrics(text)
    names = {n for n, _ in samples}
    for name in GAUGES + COUNTERS:
        assert name in names, f"{name} missing"
    for name in HISTOGRAMS:
        for suffix in ("_bucket", "_sum", "_count"):
            assert name + suffix in names, f"{name}{suffix} missing"
    for (name, labels) in samples:
        assert dict(labels).get("model_name") == model, f"{name} {dict(labels)}"
    reasons = {dict(ls).get("finished_reason") for n, ls in samples
               if n == "vllm:request_success_total"}
    assert "length" in reasons, reasons


def test_histograms_consistent(server, client, model):
    some_traffic(client, model)
    samples = parse_metrics(server.metrics_text())
    for name in HISTOGRAMS:
        buckets = sorted(((float(dict(ls)["le"]), v) for (n, ls), v in samples.items()
                          if n == name + "_bucket"), key=lambda b: b[0])
        assert buckets[-1][0] == float("inf")
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), f"{name} buckets not cumulative: {buckets}"
        assert counts[-1] == metric_value(samples, name + "_count")
        assert metric_value(samples, name + "_sum") >= 0.0
        assert counts[-1] > 0, f"{name} observed nothing after traffic"


def test_kv_capacity_gauges(server, model):
    samples = parse_metrics(server.metrics_text())
    bytes_per_token = metric_value(samples, "s4kv_kv_bytes_per_token")
    ratio = metric_value(samples, "s4kv_kv_density_ratio")
    capacity = metric_value(samples, "s4kv_kv_cache_capacity_tokens")
    assert bytes_per_token == pytest.approx(TINY_INT4_BYTES_PER_TOKEN)
    assert ratio == pytest.approx(TINY_16BIT_BYTES_PER_TOKEN / TINY_INT4_BYTES_PER_TOKEN,
                                  rel=1e-3)
    assert ratio >= 3.5
    assert 0.5 * KV_CACHE_MEMORY <= capacity * bytes_per_token <= KV_CACHE_MEMORY
    usage = metric_value(samples, "vllm:kv_cache_usage_perc")
    assert 0.0 <= usage <= 1.0
    assert metric_value(samples, "vllm:gpu_cache_usage_perc") == usage


def counter_snapshot(server, model):
    samples = parse_metrics(server.metrics_text())
    name = {"model_name": model}
    return {
        "prompt": metric_value(samples, "vllm:prompt_tokens_total", name) or 0.0,
        "generation": metric_value(samples, "vllm:generation_tokens_total", name) or 0.0,
        "length": metric_value(samples, "vllm:request_success_total",
                               {"finished_reason": "length", **name}) or 0.0,
        "e2e": metric_value(samples, "vllm:e2e_request_latency_seconds_count", name) or 0.0,
        "ttft": metric_value(samples, "vllm:time_to_first_token_seconds_count", name) or 0.0,
        "queries": metric_value(samples, "vllm:prefix_cache_queries_total", name) or 0.0,
        "hits": metric_value(samples, "vllm:prefix_cache_hits_total", name) or 0.0,
    }


def test_counters_grow_by_usage(server, client, model):
    name = {"model_name": model}
    assert wait_metric(server, "vllm:num_requests_running", 0.0, name, timeout=30) == 0.0
    before = counter_snapshot(server, model)
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Count the towers of the city."}],
        temperature=0, max_tokens=6)
    assert r.choices[0].finish_reason == "length"
    c = client.completions.create(model=model, prompt="The towers of the city", temperature=0,
                                  max_tokens=5)
    assert c.choices[0].finish_reason == "length"
    want_prompt = before["prompt"] + r.usage.prompt_tokens + c.usage.prompt_tokens
    want_generation = before["generation"] + r.usage.completion_tokens + c.usage.completion_tokens
    want = {"prompt": want_prompt, "generation": want_generation,
            "length": before["length"] + 2, "e2e": before["e2e"] + 2, "ttft": before["ttft"] + 2}
    # The engine thread updates counters as requests end, possibly just after the reply went
    # out; poll a few seconds for them to settle, then compare exactly.
    deadline = time.monotonic() + 5
    while True:
        after = counter_snapshot(server, model)
        if {k: after[k] for k in want} == want or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert {k: after[k] for k in want} == want
    assert after["queries"] >= before["queries"] + r.usage.prompt_tokens
    assert after["hits"] <= after["queries"]
    # The same prompt again: served from the prefix cache at least partly (block size 64 means
    # only full blocks are shared, so use a prompt over one block).
    long_prompt = "The towers of the city stand along the river. " * 12
    for _ in range(2):
        client.completions.create(model=model, prompt=long_prompt, max_tokens=1)
    final = counter_snapshot(server, model)
    assert final["hits"] >= after["hits"] + 64
