# Seeded random requests against a real `s4kv serve`: valid bodies with one or more fields
# replaced by values of every JSON type, in range and out of it, streamed and not. Every reply
# must be 200 (a well-formed response or a stream ending in [DONE]) or a 4xx with the error
# shape; never a 5xx, a dropped connection or a dead engine. Afterwards nothing is left running
# and the KV cache is empty.
import json
import random
import socket

from conftest import MAX_MODEL_LEN, assert_error_shape, metric_value, parse_metrics, \
    parse_sse, wait_metric

SEED = 20261203
NUM_REQUESTS = 400

STRINGY = ["", "hi", "x" * 300, "\u00e9\u4e2d\U0001F600", "\x00", "null", "-1", "1e400"]
NUMBERS = [0, 1, -1, 2, 7, 0.5, -0.0, 1e-9, 3.5, 2 ** 31, 2 ** 63, -(2 ** 63), 1e308, -1e308,
           MAX_MODEL_LEN, MAX_MODEL_LEN + 1, 8191, 8192, 100000]


def random_value(rng, depth=0):
    kind = rng.randrange(8 if depth < 2 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice(NUMBERS)
    if kind == 3:
        return rng.choice(STRINGY)
    if kind == 4:
        return rng.uniform(-3, 3)
    if kind == 5:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 6:
        return {rng.choice(["type", "text", "role", "content", "1", "42", "name"]):
                random_value(rng, depth + 1) for _ in range(rng.randrange(3))}
    return [rng.randrange(-2, 9000) for _ in range(rng.randrange(1, 6))]


# Values a client plausibly sends: most are served, some combinations are refused (n > 1 with
# greedy sampling, top_logprobs without logprobs, min_tokens over max_tokens, ...).
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                         "parameters": {"type": "object", "properties": {}}}}
PLAUSIBLE = {
    "temperature": [0, 0.7, 1.5], "top_p": [0.1, 0.9, 1], "top_k": [-1, 0, 1, 5],
    "min_p": [0, 0.1, 1], "n": [1, 2, 3], "stop": ["the", ["a", "b"], [], "", ["\n"] * 4],
    "stop_token_ids": [[0], [1, 2], []], "seed": [0, 2 ** 63 - 1, -5],
    "presence_penalty": [-2, 0, 1.5], "frequency_penalty": [-1, 2],
    "repetition_penalty": [0.5, 1, 1.3], "logit_bias": [{"5": 100, "7": -100}, {}],
    "logprobs": [True, False, 0, 3, 5], "top_logprobs": [0, 3, 20],
    "stream_options": [{"include_usage": True}, {"include_usage": False}, {}],
    "ignore_eos": [True, False], "min_tokens": [0, 2, 9], "echo": [True, False],
    "user": ["u"], "tools": [[TOOL], []], "tool_choice": ["none", "auto"],
    "max_completion_tokens": [1, 3], "max_tokens": [1, 3], "stream": [True, False],
}

COMMON_FIELDS = ["model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stop",
                 "stop_token_ids", "seed", "presence_penalty", "frequency_penalty",
                 "repetition_penalty", "logit_bias", "logprobs", "stream", "stream_options",
                 "ignore_eos", "min_tokens", "user", "priority", "use_beam_search",
                 "allowed_token_ids", "skip_special_tokens", "include_stop_str_in_output"]
CHAT_FIELDS = COMMON_FIELDS + ["messages", "max_completion_tokens", "top_logprobs", "tools",
                               "tool_choice", "response_format"]
COMPLETION_FIELDS = COMMON_FIELDS + ["prompt", "echo"]


def base_body(rng, model, chat):
    body = {"model": model, "max_tokens": rng.randrange(1, 5), "seed": rng.randrange(100)}
    if chat:
        body["messages"] = [{"role": "user", "content": "Tell me about the river"}]
    else:
        body["prompt"] = rng.choice(["The city", ["a", "b"], [1, 2, 3], [[4, 5], [6]]])
    if rng.random() < 0.3:
        body["stream"] = True
    return body


def check_reply(reply, body):
    if reply.status == 200:
        if body.get("stream") is True:
            events = parse_sse(reply.body)
            assert events, reply
            for event in events:
                assert "error" not in event, event
        else:
            data = reply.json()
            assert data["choices"], data
            n = body.get("n") if isinstance(body.get("n"), int) else 1
            prompt = body.get("prompt")
            prompts = len(prompt) if isinstance(prompt, list) and prompt and \
                isinstance(prompt[0], (str, list)) else 1
            # Completions number choices prompt-major: index = prompt * n + sample.
            assert sorted(c["index"] for c in data["choices"]) == list(range(prompts * n)), data
            assert data["usage"]["total_tokens"] > 0, data
        return
    assert 400 <= reply.status < 500, (reply, body)
    assert_error_shape(reply, reply.status)


def test_random_requests_never_break_the_server(server, model):
    rng = random.Random(SEED)
    statuses = {}
    for i in range(NUM_REQUESTS):
        chat = rng.random() < 0.5
        body = base_body(rng, model, chat)
        fields = CHAT_FIELDS if chat else COMPLETION_FIELDS
        plausible = rng.random() < 0.5
        for _ in range(rng.randrange(1, 5)):
            field = rng.choice(fields)
            if plausible and field in PLAUSIBLE:
                body[field] = rng.choice(PLAUSIBLE[field])
            else:
                body[field] = random_value(rng)
        if body.get("stream") is True and not isinstance(body.get("max_tokens"), int):
            body["max_tokens"] = 2
        # Keep generation short whatever the mutation left: the test is about parsing.
        if isinstance(body.get("max_tokens"), int) and 4 < body["max_tokens"] <= MAX_MODEL_LEN:
            body["max_tokens"] = 4
        if "max_completion_tokens" in body and isinstance(body["max_completion_tokens"], int) \
                and 4 < body["max_completion_tokens"] <= MAX_MODEL_LEN:
            body["max_completion_tokens"] = 4
        if body.get("ignore_eos") is True or "min_tokens" in body:
            body["max_tokens"] = 3
        path = "/v1/chat/completions" if chat else "/v1/completions"
        reply = server.request("POST", path, json.dumps(body),
                               headers={"Content-Type": "application/json"})
        statuses[reply.status] = statuses.get(reply.status, 0) + 1
        check_reply(reply, body)
        if i % 50 == 49:
            assert server.request("GET", "/health", key=None).status == 200, i
    # Both outcomes occur, so the generator really exercises serving and refusing.
    assert statuses.get(200, 0) > 20, statuses
    assert statuses.get(400, 0) > 20, statuses
    assert server.request("GET", "/health", key=None).status == 200
    assert wait_metric(server, "vllm:num_requests_running", 0.0) == 0.0
    samples = parse_metrics(server.metrics_text())
    assert metric_value(samples, "vllm:num_requests_waiting") == 0.0
    assert metric_value(samples, "vllm:kv_cache_usage_perc") == 0.0


def raw_exchange(server, data, timeout=5.0):
    """Sends raw bytes, half-closes, reads until the server closes or the timeout passes."""
    with socket.create_connection((server.host, server.port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return b""  # the server may close first on garbage; that is an answer too
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except (socket.timeout, OSError):
            pass
        return b"".join(chunks)


def test_random_bytes_on_the_socket_never_break_the_server(server, model):
    rng = random.Random(SEED + 1)
    valid = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Authorization: Bearer " + server.api_key.encode() + b"\r\n")
    body = json.dumps({"model": model, "prompt": "hi", "max_tokens": 1}).encode()
    for i in range(150):
        kind = i % 5
        if kind == 0:  # pure noise
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        elif kind == 1:  # a valid request cut at a random byte
            full = valid + b"Content-Length: %d\r\n\r\n" % len(body) + body
            data = full[:rng.randrange(1, len(full))]
        elif kind == 2:  # a valid request with some bytes flipped
            full = bytearray(valid + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            for _ in range(rng.randrange(1, 4)):
                full[rng.randrange(len(full))] = rng.randrange(256)
            data = bytes(full)
        elif kind == 3:  # lying or malformed lengths and encodings
            data = valid + rng.choice([
                b"Content-Length: -1\r\n\r\n", b"Content-Length: 99999999999999999999\r\n\r\n",
                b"Content-Length: 5\r\nContent-Length: 7\r\n\r\nhello",
                b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
                b"Transfer-Encoding: chunked\r\n\r\n" + b"1\r\n{\r\n" * 3,
                b"Content-Length: 2\r\n\r\n{}" + b"GET /health HTTP/1.1\r\n\r\n"])
        else:  # bytes after a request line only
            data = rng.choice([b"GET", b"GET /", b"GET / HTTP/9.9\r\n\r\n", b"\r\n\r\n",
                               b"GET /health HTTP/1.1\r\n" + b"X: y\r\n" * 5 + b"\r\n"])
        reply = raw_exchange(server, data)
        if reply:
            assert reply.startswith(b"HTTP/1.1 "), (data, reply[:200])
            status = int(reply[9:12])
            assert status < 500, (data, reply[:400])
        if i % 25 == 24:
            assert server.request("GET", "/health", key=None).status == 200, i
    assert server.request("GET", "/health", key=None).status == 200
    r = server.request("POST", "/v1/completions", body)
    assert r.status == 200, r
    assert wait_metric(server, "vllm:num_requests_running", 0.0) == 0.0
    samples = parse_metrics(server.metrics_text())
    assert metric_value(samples, "vllm:kv_cache_usage_perc") == 0.0
