# Many clients at once against a real `s4kv serve`: 32 concurrent greedy streams produce what
# they produce alone, and streams cut off mid-way free their engine requests and KV blocks
# at once (vllm:num_requests_running and vllm:kv_cache_usage_perc back to 0 within 1 s).
import http.client
import json
import socket
import threading
import time

from conftest import metric_value, parse_metrics, wait_metric

NUM_CLIENTS = 32
MAX_TOKENS = 24
NUM_CUT = 20
CUT_AFTER_CHUNKS = 3
FREED_DEADLINE_S = 1.0


def prompt(i):
    topics = ["river", "castle", "market", "harbor", "bridge", "library", "garden", "tower"]
    order = ["first", "second", "third", "last"]
    return f"The {order[i // len(topics) % len(order)]} {topics[i % len(topics)]} of the old city"


def run_threads(fn, n):
    results, errors = [None] * n, []
    barrier = threading.Barrier(n)

    def body(i):
        try:
            barrier.wait(timeout=30)
            results[i] = fn(i)
        except BaseException as e:  # reported below, with the index
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not any(t.is_alive() for t in threads), "client threads hung"
    assert not errors, errors
    return results


def generate(client, model, i, stream):
    """Even i: chat; odd i: completions. Returns (text, finish_reason)."""
    kwargs = {"model": model, "temperature": 0, "max_tokens": MAX_TOKENS, "stream": stream}
    if i % 2 == 0:
        r = client.chat.completions.create(
            messages=[{"role": "user", "content": prompt(i)}], **kwargs)
        if not stream:
            return r.choices[0].message.content, r.choices[0].finish_reason
        deltas = [(c.delta.content, c.finish_reason) for chunk in r for c in chunk.choices]
    else:
        r = client.completions.create(prompt=prompt(i), **kwargs)
        if not stream:
            return r.choices[0].text, r.choices[0].finish_reason
        deltas = [(c.text, c.finish_reason) for chunk in r for c in chunk.choices]
    reasons = [reason for _, reason in deltas if reason]
    assert len(reasons) == 1, reasons
    return "".join(text or "" for text, _ in deltas), reasons[0]


def test_concurrent_streams_equal_sequential(client, model):
    sequential = [generate(client, model, i, stream=False) for i in range(NUM_CLIENTS)]
    # The tiny model's chat answers repeat a lot; its completions do not.
    assert len({text for text, _ in sequential}) >= NUM_CLIENTS // 2, "prompts not distinct"
    concurrent = run_threads(lambda i: generate(client, model, i, stream=True), NUM_CLIENTS)
    mismatches = [(i, sequential[i], concurrent[i]) for i in range(NUM_CLIENTS)
                  if sequential[i] != concurrent[i]]
    assert not mismatches, f"{len(mismatches)} of {NUM_CLIENTS} differ: {mismatches[:3]}"


def open_stream(server, model, i):
    """Starts a streaming completion; returns (connection, response)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    body = json.dumps({"model": model, "prompt": prompt(i), "max_tokens": 400, "stream": True,
                       "temperature": 0.8, "seed": i, "ignore_eos": True})
    conn.request("POST", "/v1/completions", body=body,
                 headers={"Content-Type": "application/json",
                          "Authorization": f"Bearer {server.api_key}"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    return conn, resp


def read_chunks(resp, n):
    """Reads up to n SSE data events; returns (events read, whether [DONE] came)."""
    got = 0
    while got < n:
        line = resp.readline()
        if not line:
            return got, True
        if line.startswith(b"data: "):
            if line.strip() == b"data: [DONE]":
                return got, True
            got += 1
    return got, False


def cut(conn, resp):
    try:
        conn.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    resp.close()
    conn.close()


def test_cut_streams_free_everything(server, model):
    name = {"model_name": model}
    assert wait_metric(server, "vllm:num_requests_running", 0.0, name, timeout=30) == 0.0
    before = parse_metrics(server.metrics_text())
    aborts_before = metric_value(before, "vllm:request_success_total",
                                 {"finished_reason": "abort", **name}) or 0.0

    streams = [open_stream(server, model, i) for i in range(NUM_CUT)]
    unfinished = 0
    for _, resp in streams:
        got, done = read_chunks(resp, CUT_AFTER_CHUNKS)
        assert got >= 1, "stream ended before its first chunk"
        unfinished += not done
    running = metric_value(parse_metrics(server.metrics_text()), "vllm:num_requests_running",
                           name)
    assert running and running > 0, "no request running while the streams are open"
    for conn, resp in streams:
        cut(conn, resp)
    closed_at = time.monotonic()

    while True:
        samples = parse_metrics(server.metrics_text())
        running = metric_value(samples, "vllm:num_requests_running", name)
        usage = metric_value(samples, "vllm:kv_cache_usage_perc", name)
        if (running, usage) == (0.0, 0.0) or time.monotonic() - closed_at > FREED_DEADLINE_S:
            break
        time.sleep(0.02)
    assert (running, usage) == (0.0, 0.0), (
        f"{FREED_DEADLINE_S} s after the last close: running {running}, kv usage {usage}")
    assert metric_value(samples, "vllm:num_requests_waiting", name) == 0.0
    aborts = wait_metric(server, "vllm:request_success_total", aborts_before + unfinished,
                         {"finished_reason": "abort", **name})
    assert aborts == aborts_before + unfinished
    # The server still serves.
    reply = server.request("POST", "/v1/completions",
                           {"model": model, "prompt": "Hello", "max_tokens": 2})
    assert reply.status == 200, reply


def test_cut_non_streaming_requests_free_everything(server, model):
    name = {"model_name": model}
    assert wait_metric(server, "vllm:num_requests_running", 0.0, name, timeout=30) == 0.0
    socks = []
    for i in range(4):
        body = json.dumps({"model": model, "prompt": prompt(i), "max_tokens": 400,
                           "ignore_eos": True}).encode()
        s = socket.create_connection((server.host, server.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\n"
                  + f"Authorization: Bearer {server.api_key}\r\n".encode()
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        socks.append(s)
    assert wait_metric(server, "vllm:num_requests_running", 4.0, name, timeout=30) == 4.0
    for s in socks:
        s.close()
    closed_at = time.monotonic()
    running = wait_metric(server, "vllm:num_requests_running", 0.0, name,
                          timeout=FREED_DEADLINE_S)
    assert running == 0.0, f"{time.monotonic() - closed_at:.2f} s after the close: {running}"
    assert wait_metric(server, "vllm:kv_cache_usage_perc", 0.0, name, timeout=1.0) == 0.0
