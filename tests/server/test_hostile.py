# Hostile clients against a real `s4kv serve` (docs/security.md's threat model: anyone who can
# reach the port): the API key guards every route but GET /health and CORS preflights, for every
# method and every malformed Authorization; two Content-Lengths never smuggle a second request;
# clients that send headers byte by byte, or nothing at all (1000 idle connections), are cut by
# the header timeout while others are served; storms of requests cut mid-body and mid-stream
# leave nothing running and the KV cache empty; broken model directories stop the start with
# exit code 2 and one line naming the problem. Bounded: 20-30 s, most of it the 10 s header
# timeout, waited once.
import concurrent.futures
import json
import os
import re
import resource
import selectors
import socket
import struct
import subprocess
import threading
import time

import pytest

from conftest import API_KEY, MODEL, SESSION_ARGS, s4kv_binary, wait_metric

# The server's fixed header timeout (HttpServerOptions::header_timeout): from connect to the end
# of the headers. Tests wait for cuts up to a generous bound, never assert the exact time.
HEADER_TIMEOUT_S = 10.0
CUT_DEADLINE_S = HEADER_TIMEOUT_S + 20.0
NUM_IDLE = 1000
NUM_SLOW = 20

# Every route the server has (api_server.cc kRoutes) with its methods.
ROUTES = {
    "/v1/chat/completions": ["POST"],
    "/v1/completions": ["POST"],
    "/v1/models": ["GET"],
    "/metrics": ["GET"],
    "/version": ["GET"],
    "/tokenize": ["POST"],
    "/detokenize": ["POST"],
    "/ping": ["GET", "POST"],
    "/invocations": ["POST"],
    "/health": ["GET"],
}
# What answers without the key. vLLM's middleware guards only /v1/*; S4 KV guards every route
# (docs/server.md) but the liveness check load balancers poll, as vLLM leaves /health open.
OPEN = {("GET", "/health")}
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]


def raw_exchange(server, data, timeout=10.0):
    """Sends bytes on one connection, half-closes nothing, reads until the server closes or
    `timeout` passes; returns (bytes read, closed by the server)."""
    s = socket.create_connection((server.host, server.port), timeout=timeout)
    try:
        s.sendall(data)
        received, deadline = b"", time.monotonic() + timeout
        while time.monotonic() < deadline:
            s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                return received, False
            except ConnectionResetError:
                return received, True
            if not chunk:
                return received, True
            received += chunk
        return received, False
    finally:
        s.close()


def statuses(raw):
    return [int(m) for m in re.findall(rb"HTTP/1\.[01] (\d{3}) ", raw)]


def post_bytes(path, body, key=API_KEY, extra=b""):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\n".encode() + extra +
            b"\r\n" + body)


# ---- auth -------------------------------------------------------------------------------


def test_only_health_and_preflight_answer_without_the_key(server):
    for path in list(ROUTES) + ["/v1/embeddings", "/v1/models/x", "/admin", "/"]:
        for method in METHODS:
            for key in (None, "wrong-key"):
                reply = server.request(method, path, body=b"{}" if method != "GET" else None,
                                       key=key, timeout=10)
                if (method, path) in OPEN:
                    assert reply.status == 200, (method, path, reply)
                elif path == "/health":  # open, and only GET and HEAD (200 as vLLM)
                    assert reply.status == (200 if method == "HEAD" else 405), reply
                elif path in ROUTES:
                    # Before routing by method: a client without the key learns nothing.
                    assert reply.status == 401, (method, path, key, reply)
                else:
                    assert reply.status in (401, 404), (method, path, key, reply)
                if method != "HEAD" and reply.body:
                    assert API_KEY.encode() not in reply.body
    # A CORS preflight is answered before auth, as vLLM's middleware order does.
    reply = server.request("OPTIONS", "/v1/chat/completions", key=None, headers={
        "Origin": "http://a.example", "Access-Control-Request-Method": "POST"})
    assert reply.status == 200, reply
    assert reply.body in (b"", b"{}") or b"choices" not in reply.body


def test_every_route_answers_with_the_key(server):
    for path, methods in ROUTES.items():
        for method in methods:
            reply = server.request(method, path, body={} if method == "POST" else None)
            assert reply.status != 401, (method, path, reply)


@pytest.mark.parametrize("authorization", [
    # (Trailing spaces are not part of a field value, RFC 9110 5.5: "Bearer KEY " is the key.)
    f"bearer {API_KEY}", f"Bearer  {API_KEY}", f"Bearer {API_KEY}x",
    f"Bearer {API_KEY[:-1]}", f"Basic {API_KEY}", API_KEY, "Bearer ", "Bearer", "",
    f"Bearer {API_KEY}\x00", f"Bearer {API_KEY.upper()}",
])
def test_malformed_authorization_is_401(server, authorization):
    for path in ("/v1/models", "/metrics", "/tokenize"):
        method = "POST" if path == "/tokenize" else "GET"
        reply = server.request(method, path, key=None, body={"prompt": "x"} if method == "POST"
                               else None, headers={"Authorization": authorization})
        # A NUL in a header value may be refused as malformed HTTP instead.
        assert reply.status == 401 or ("\x00" in authorization and reply.status == 400), (
            path, authorization, reply)
        assert API_KEY.encode() not in reply.body


def test_key_elsewhere_than_authorization_is_401(server):
    for headers, path in [({"X-API-Key": API_KEY}, "/v1/models"),
                          ({"Api-Key": API_KEY}, "/v1/models"),
                          ({}, f"/v1/models?api_key={API_KEY}"),
                          ({"Cookie": f"api_key={API_KEY}"}, "/v1/models")]:
        reply = server.request("GET", path, key=None, headers=headers)
        assert reply.status == 401, (headers, path, reply)


def test_two_authorization_headers_do_not_confuse(server):
    # The first Authorization counts (HttpRequest::header); a wrong first one is refused
    # whatever follows, and a request is never authorized by a header it did not send first.
    raw = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
           + f"Authorization: Bearer {API_KEY}\r\nConnection: close\r\n\r\n".encode())
    data, _ = raw_exchange(server, raw)
    assert statuses(data) in ([401], [400]), data[:300]


def test_key_never_logged(server):
    server.request("GET", "/v1/models", key="a-wrong-key-to-log")
    server.request("GET", "/v1/models")
    server._log.flush()
    with open(server.log_path, "rb") as f:
        log = f.read()
    assert API_KEY.encode() not in log
    assert b"a-wrong-key-to-log" not in log


# ---- framing ----------------------------------------------------------------------------

SMUGGLED = b"GET /version HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() \
    + b"\r\n\r\n"


PLAIN_BODY = b"{}" + SMUGGLED
CHUNKED_BODY = b"2\r\n{}\r\n0\r\n\r\n" + SMUGGLED
CHUNKED_PART = len(CHUNKED_BODY) - len(SMUGGLED)


@pytest.mark.parametrize("headers,body", [
    ([b"Content-Length: 2", b"Content-Length: %d" % len(PLAIN_BODY)], PLAIN_BODY),
    ([b"Content-Length: %d" % len(PLAIN_BODY), b"Content-Length: 2"], PLAIN_BODY),
    ([b"Content-Length: 2, %d" % len(PLAIN_BODY)], PLAIN_BODY),
    ([b"Content-Length: 2", b"content-length: %d" % len(PLAIN_BODY)], PLAIN_BODY),
    ([b"Content-Length: %d" % len(CHUNKED_BODY), b"Transfer-Encoding: chunked"], CHUNKED_BODY),
    ([b"Transfer-Encoding: chunked", b"Content-Length: %d" % CHUNKED_PART], CHUNKED_BODY),
], ids=["cl-short-long", "cl-long-short", "cl-list", "cl-case", "cl-te", "te-cl"])
def test_conflicting_lengths_never_smuggle_a_request(server, headers, body):
    """A front proxy that takes one length and the server the other would see the hidden
    GET /version as a second request. Two Content-Lengths: 400 and close. Content-Length with
    chunked: refused, or (RFC 9112 6.3) chunked read and the connection closed after the one
    response; never an answer to the hidden request."""
    raw = (b"POST /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode()
           + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body)
    data, closed = raw_exchange(server, raw, timeout=5)
    got = statuses(data)
    assert b'"version"' not in data, data[:600]
    if body is PLAIN_BODY:
        assert got == [400], data[:600]
    else:
        assert len(got) == 1 and got[0] in (400, 405, 501), data[:600]
    assert closed, "connection left open after a request with conflicting lengths"
    assert server.request("GET", "/health", key=None).status == 200


# ---- slow and idle clients --------------------------------------------------------------


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return soft
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"ulimit -n hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return need


def test_slowloris_and_idle_connections_are_cut_while_others_are_served(start_server, model):
    # Per process: this one and the server (which inherits the limit) each hold ~1020 sockets.
    raise_fd_limit(NUM_IDLE + NUM_SLOW + 256)
    srv = start_server(SESSION_ARGS)
    opened_at = time.monotonic()
    idle = [socket.create_connection((srv.host, srv.port), timeout=10) for _ in range(NUM_IDLE)]
    slow = [socket.create_connection((srv.host, srv.port), timeout=10) for _ in range(NUM_SLOW)]
    header = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode()
              + b"\r\nX-Padding: " + b"a" * 4000 + b"\r\n\r\n")
    stop = threading.Event()
    slow_state = {"sent": [0] * NUM_SLOW, "cut_after": [None] * NUM_SLOW}

    def trickle(i):
        s = slow[i]
        for b in header:
            if stop.is_set():
                return
            try:
                s.sendall(bytes([b]))
            except OSError:
                slow_state["cut_after"][i] = time.monotonic() - opened_at
                return
            slow_state["sent"][i] += 1
            time.sleep(0.25)

    threads = [threading.Thread(target=trickle, args=(i,), daemon=True) for i in range(NUM_SLOW)]
    for t in threads:
        t.start()
    try:
        # Meanwhile the server serves others: health, metrics and a generation.
        assert srv.request("GET", "/health", key=None, timeout=10).status == 200
        reply = srv.request("POST", "/v1/completions", {"model": model, "prompt": "Hello",
                                                        "max_tokens": 4}, timeout=30)
        assert reply.status == 200, reply
        assert srv.request("GET", "/metrics", timeout=10).status == 200
        served_at = time.monotonic() - opened_at
        assert served_at < HEADER_TIMEOUT_S, (
            f"others served only after {served_at:.1f} s: the test cannot tell the cut apart")

        # Every idle and slow connection is closed by the server within the bound.
        pending = {s.fileno(): s for s in idle + slow}
        sel = selectors.DefaultSelector()
        for s in pending.values():
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while pending and time.monotonic() - opened_at < CUT_DEADLINE_S:
            for key, _ in sel.select(timeout=0.5):
                try:
                    data = key.fileobj.recv(4096)
                except (ConnectionResetError, BlockingIOError):
                    data = b""
                if not data:
                    sel.unregister(key.fileobj)
                    del pending[key.fd]
        assert not pending, (f"{len(pending)} of {NUM_IDLE + NUM_SLOW} connections still open "
                             f"{CUT_DEADLINE_S} s after they were opened")
        # The slow clients were cut while still sending, not after they finished.
        assert all(n < len(header) for n in slow_state["sent"]), slow_state["sent"]
        assert srv.request("GET", "/health", key=None).status == 200
    finally:
        stop.set()
        for s in idle + slow:
            s.close()


# ---- disconnect storms ------------------------------------------------------------------


def _cut_mid_body(srv, model, i):
    body = json.dumps({"model": model, "prompt": "x" * 1000, "max_tokens": 4}).encode()
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    s.sendall(post_bytes("/v1/completions", body)[:-len(body) // 2])
    if i % 2:  # a reset instead of a FIN
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def _cut_mid_stream(srv, model, i):
    chat = i % 2 == 0
    payload = {"model": model, "max_tokens": 200, "ignore_eos": True, "stream": True,
               "temperature": 1.0, "seed": i}
    if chat:
        payload["messages"] = [{"role": "user", "content": f"Story number {i}"}]
    else:
        payload["prompt"] = f"Story number {i}"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    s = socket.create_connection((srv.host, srv.port), timeout=30)
    s.sendall(post_bytes(path, json.dumps(payload).encode()))
    got = b""
    while got.count(b"data: ") < 1 + i % 3:
        chunk = s.recv(4096)
        if not chunk:
            raise AssertionError(f"stream {i} ended early: {got[:300]!r}")
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got[:300]
    if i % 4 == 1:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif i % 4 == 2:
        s.shutdown(socket.SHUT_WR)  # half-close: counts as gone
    s.close()


def _cut_while_generating(srv, model, i):
    body = json.dumps({"model": model, "prompt": f"Tale {i}", "max_tokens": 300,
                       "ignore_eos": True}).encode()
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    s.sendall(post_bytes("/v1/completions", body))
    time.sleep(0.05 * (i % 5))
    s.close()


def test_disconnect_storm_leaves_nothing_running(start_server, model):
    srv = start_server(SESSION_ARGS)
    name = {"model_name": model}
    jobs = ([(_cut_mid_body, i) for i in range(200)] + [(_cut_mid_stream, i) for i in range(100)]
            + [(_cut_while_generating, i) for i in range(60)])
    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        futures = [pool.submit(fn, srv, model, i) for fn, i in jobs]
        errors = [f.exception() for f in futures if f.exception()]
    assert not errors, errors[:5]
    for metric in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                   "vllm:kv_cache_usage_perc"):
        assert wait_metric(srv, metric, 0.0, name, timeout=20) == 0.0, metric
    assert srv.request("GET", "/health", key=None).status == 200
    reply = srv.request("POST", "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert reply.status == 200, reply
    assert srv.proc.poll() is None


# ---- bad model directories --------------------------------------------------------------


def _model_dir(tmp_path, name, change):
    d = tmp_path / name
    d.mkdir()
    for f in os.listdir(MODEL):
        os.symlink(os.path.abspath(os.path.join(MODEL, f)), d / f)
    change(d)
    return str(d)


def _replace_json(d, name, edit):
    with open(os.path.join(MODEL, name)) as f:
        doc = json.load(f)
    edit(doc)
    os.unlink(d / name)
    (d / name).write_text(json.dumps(doc))


def _truncate_weights(d):
    with open(os.path.join(MODEL, "model.safetensors"), "rb") as f:
        head = f.read(1 << 20)
    os.unlink(d / "model.safetensors")
    (d / "model.safetensors").write_bytes(head)


def _empty_file(d, name):
    os.unlink(d / name)
    (d / name).write_bytes(b"")


BAD_DIRS = {
    "missing": (None, "missing"),
    "unsupported_act": (lambda d: _replace_json(
        d, "config.json", lambda c: c.update(hidden_act="gelu")), "hidden_act"),
    "unsupported_rope": (lambda d: _replace_json(
        d, "config.json", lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 4.0})),
        "rope"),
    "head_dim_64": (lambda d: _replace_json(
        d, "config.json", lambda c: c.update(head_dim=64)), "head_dim"),
    "truncated_safetensors": (_truncate_weights, "model.safetensors"),
    "empty_tokenizer": (lambda d: _empty_file(d, "tokenizer.json"), "tokenizer.json"),
    "config_not_json": (lambda d: (os.unlink(d / "config.json"),
                                   (d / "config.json").write_text("{\"hidden_size\": ")),
                        "config.json"),
}


@pytest.mark.parametrize("case", list(BAD_DIRS))
def test_bad_model_directory_exits_2_with_one_line(tmp_path, case):
    change, needle = BAD_DIRS[case]
    model = str(tmp_path / "no-such-model") if change is None else _model_dir(tmp_path, case,
                                                                              change)
    r = subprocess.run([s4kv_binary(), "serve", model, "--port", "0"], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 2, f"exit {r.returncode}:\n{out[-3000:]}"
    # Progress lines are logged (INFO); the refusal is the one other line.
    errors = [ln for ln in out.splitlines() if not ln.startswith("INFO ")]
    assert len(errors) == 1 and errors[0].startswith("error: "), out[-3000:]
    assert needle in errors[0] or (needle == "missing" and "no-such-model" in errors[0]), errors
    for crash in ("Aborted", "terminate called", "Sanitizer", "Segmentation", "S4KV_CHECK",
                  "Traceback"):
        assert crash not in out, out[-3000:]
