# The small endpoints of a real `s4kv serve` (GET /v1/models, /health, /version) and the
# start-up flags that change what they report: --served-model-name, the positional model,
# S4KV_API_KEY; vllm serve's logging and parallelism flags.
import http.client
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from conftest import MAX_MODEL_LEN, MODEL, assert_error_shape, parse_sse, s4kv_binary


def test_models_lists_served_name(client, model):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == [model]
    m = models.data[0]
    assert m.object == "model"
    assert isinstance(m.created, int) and m.created > 0
    assert m.owned_by
    assert (m.model_extra or {}).get("max_model_len") == MAX_MODEL_LEN


def test_health_needs_no_key(server):
    reply = server.request("GET", "/health", key=None)
    assert reply.status == 200
    assert reply.body == b""
    reply = server.request("GET", "/health", key="wrong")
    assert reply.status == 200  # /health never looks at the key


def test_version(server):
    reply = server.request("GET", "/version")
    assert reply.status == 200, reply
    version = reply.json()["version"]
    assert isinstance(version, str) and version


def test_json_content_type(server):
    reply = server.request("GET", "/v1/models")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("application/json")


def test_keep_alive_serves_several_requests(server):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    try:
        for _ in range(3):
            conn.request("GET", "/v1/models",
                         headers={"Authorization": f"Bearer {server.api_key}"})
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.read()
    finally:
        conn.close()


def test_served_model_names_positional_model_and_env_key(start_server):
    env = dict(os.environ, S4KV_API_KEY="from-env")
    srv = start_server(["--served-model-name", "tiny", "tiny-alias", "--kv-cache-memory",
                        "16MiB", "--max-model-len", "256", "--max-num-seqs", "4"],
                       api_key=None, env=env, positional_model=True)
    client = srv.client(api_key="from-env")
    assert [m.id for m in client.models.list().data] == ["tiny", "tiny-alias"]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="models/s4kv-tiny", prompt="The city", max_tokens=2)
    with pytest.raises(openai.AuthenticationError):
        srv.client(api_key="other").models.list()
    reported = {name: client.completions.create(model=name, prompt="The city",
                                                max_tokens=2).model
                for name in ("tiny", "tiny-alias")}
    # As vLLM does (and openai_serving.h promises), responses name the first served name.
    assert reported == {"tiny": "tiny", "tiny-alias": "tiny"}


def test_vllm_logging_and_parallelism_flags(start_server):
    # A vllm serve command line: -tp 1, --trust-remote-code and the logging switches start the
    # server; --disable-log-requests removes the per-request line.
    srv = start_server(["--kv-cache-memory", "16MiB", "--max-model-len", "256", "--max-num-seqs",
                        "4", "-tp", "1", "-pp=1", "--trust-remote-code", "--disable-log-requests",
                        "--disable-log-stats"])
    r = srv.client().completions.create(model=srv.model, prompt="The city", max_tokens=2)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert srv.terminate() == 0
    log = srv.log_tail(100000)
    assert "[engine] request cmpl-" not in log, log
    assert "--trust-remote-code has no effect" in log, log


def test_default_logs_a_line_per_request(server, client, model):
    r = client.completions.create(model=model, prompt="The river", max_tokens=3)
    needle = f"[engine] request {r.id}: prompt {r.usage.prompt_tokens} tokens, generated "
    deadline = time.monotonic() + 5
    while needle not in server.log_tail(200000) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert needle in server.log_tail(200000)


@pytest.mark.parametrize("args,message", [
    (["-tp", "2"], "--tensor-parallel-size and --pipeline-parallel-size must be 1"),
    (["--pipeline-parallel-size", "4"], "--tensor-parallel-size and --pipeline-parallel-size"),
    (["--disable-log-requests", "--enable-log-requests"], "contradict"),
])
def test_refused_flags_stop_the_start(args, message):
    proc = subprocess.run([s4kv_binary(), "serve", MODEL, "--port", "0"] + args,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_sagemaker_ping_and_invocations(server, model):
    # vllm serve's SageMaker routes: /ping answers as /health (behind the key here, like every
    # route but /health); /invocations is chat with "messages", completions with "prompt".
    for method in ("GET", "POST"):
        assert server.request(method, "/ping").status == 200
    assert server.request("GET", "/ping", key=None).status == 401
    chat = server.request("POST", "/invocations", {
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
        "temperature": 0})
    assert chat.status == 200, chat
    assert chat.json()["object"] == "chat.completion"
    direct = server.request("POST", "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
        "temperature": 0})
    assert chat.json()["choices"][0]["message"] == direct.json()["choices"][0]["message"]
    text = server.request("POST", "/invocations", {"model": model, "prompt": "The city",
                                                   "max_tokens": 3, "stream": True})
    assert text.status == 200, text
    events = parse_sse(text.body)
    assert events[0]["object"] == "text_completion"
    reply = server.request("POST", "/invocations", {"model": model, "input": "hi"})
    err = assert_error_shape(reply, 400)
    assert "messages" in err["message"] and "prompt" in err["message"], err


def test_a_default_max_num_seqs_gives_way_to_a_small_int4_cache(start_server):
    # vLLM's --max-num-seqs default starts on any cache that holds one sequence. int4_kivi's
    # seats each take a 16-bit ring and a sink run of the cache (12 blocks at block size 64):
    # a default too large for the cache becomes the seats that fit (the start-up line says how
    # many) and requests past them wait their turn; the same value given is refused.
    if "--max-num-seqs" in os.environ.get("S4KV_SERVE_ARGS", ""):
        pytest.skip("S4KV_SERVE_ARGS gives every server --max-num-seqs")
    args = ["--kv-cache-memory", "8MiB", "--max-model-len", "256"]
    proc = subprocess.run([s4kv_binary(), "serve", MODEL, "--port", "0", "--max-num-seqs", "64"]
                          + args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert "lower --max-num-seqs" in proc.stderr, proc.stderr
    srv = start_server(args)
    line = [x for x in srv.log_tail(100000).splitlines() if "[engine] KV cache:" in x]
    seats = re.search(r"max_num_seqs (\d+);", line[0]) if line else None
    assert seats and 1 <= int(seats.group(1)) < 64, srv.log_tail()
    client = srv.client()
    with ThreadPoolExecutor(max_workers=12) as pool:
        done = list(pool.map(lambda i: client.completions.create(
            model=srv.model, prompt=f"The city {i}", max_tokens=4, temperature=0), range(12)))
    assert all(r.choices[0].finish_reason in ("stop", "length") for r in done)
