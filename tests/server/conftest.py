# End-to-end fixtures for `s4kv serve`: real server processes on free ports, the official
# `openai` client pointed at them, and small plain-HTTP helpers for what the client cannot
# express (raw bodies, methods, headers, cut-off streams).
#
# Invariants: every server started here is stopped with SIGTERM at teardown and must exit with
# code 0; its stderr goes to a file whose tail is attached to the report of a failing test.
# The session server is shared by every test that does not kill or drain a server; those get
# their own function-scoped server through `start_server`.
import http.client
import json
import os
import signal
import socket
import subprocess
import time

import openai
import pytest

MODEL = "models/s4kv-tiny"
API_KEY = "e2e-secret-key"
MAX_MODEL_LEN = 1024
HEALTH_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 60.0

# Servers alive now, so that a failing test's report can show their stderr.
_LIVE_SERVERS = []


def s4kv_binary():
    path = os.environ.get("S4KV_BIN")
    if not path:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        for candidate in ("build-e2e/src/cli/s4kv", "build/src/cli/s4kv"):
            if os.path.exists(os.path.join(root, candidate)):
                path = os.path.join(root, candidate)
                break
    if not path or not os.path.exists(path):
        pytest.skip("s4kv binary not found: set S4KV_BIN (ctest does)")
    return path


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpReply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case name -> value
        self.body = body  # bytes

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"HttpReply({self.status}, {self.headers}, {self.body[:500]!r})"


class Server:
    """One `s4kv serve` process on 127.0.0.1:<free port>."""

    def __init__(self, log_path, args=(), api_key=API_KEY, env=None, positional_model=False):
        self.port = free_port()
        self.host = "127.0.0.1"
        self.base_url = f"http://{self.host}:{self.port}"
        self.api_key = api_key
        self.model = MODEL
        self.log_path = str(log_path)
        cmd = [s4kv_binary(), "serve"] + ([MODEL] if positional_model else ["--model", MODEL])
        cmd += ["--host", self.host, "--port", str(self.port)]
        if api_key:
            cmd += ["--api-key", api_key]
        cmd += list(args)
        # Extra "--flag value" pairs for every server of the run, each unless the test sets that
        # flag itself, e.g. S4KV_SERVE_ARGS="--device cuda --max-num-seqs 64" to run the suite
        # against the CUDA backend on a GPU machine (tools/device_steps.sh e2e).
        extra = os.environ.get("S4KV_SERVE_ARGS", "").split()
        for flag, value in zip(extra[::2], extra[1::2]):
            if flag not in cmd:
                cmd += [flag, value]
        self.cmd = cmd
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        _LIVE_SERVERS.append(self)

    def wait_ready(self, timeout=HEALTH_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"s4kv serve exited with {self.proc.returncode} before "
                                     f"it was ready:\n{self.log_tail()}")
            try:
                reply = self.request("GET", "/health", key=None, timeout=5)
                last = reply.status
                if reply.status == 200:
                    return self
            except OSError as e:
                last = repr(e)
            time.sleep(0.1)
        raise AssertionError(f"/health not 200 within {timeout} s (last: {last}):\n"
                             f"{self.log_tail()}")

    def request(self, method, path, body=None, key="default", headers=None, timeout=60):
        """One plain HTTP request. body: dict (sent as JSON), str or bytes."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            hdrs = dict(headers or {})
            if key == "default":
                key = self.api_key
            if key:
                hdrs["Authorization"] = f"Bearer {key}"
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
                hdrs.setdefault("Content-Type", "application/json")
            if isinstance(body, str):
                body = body.encode()
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return HttpReply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def metrics_text(self):
        reply = self.request("GET", "/metrics")
        assert reply.status == 200, reply
        return reply.body.decode()

    def client(self, **kwargs):
        kwargs.setdefault("api_key", self.api_key or "unused")
        return openai.OpenAI(base_url=self.base_url + "/v1", max_retries=0, timeout=60, **kwargs)

    def log_tail(self, num_bytes=6000):
        try:
            self._log.flush()
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - num_bytes))
                return f.read().decode(errors="replace")
        except OSError as e:
            return f"(cannot read {self.log_path}: {e})"

    def terminate(self, timeout=EXIT_TIMEOUT_S):
        """SIGTERM, wait for the exit, return the exit code (None if it did not exit)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        self.kill()
        self._log.close()
        if self in _LIVE_SERVERS:
            _LIVE_SERVERS.remove(self)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for server in list(_LIVE_SERVERS):
            report.sections.append((f"s4kv serve stderr tail ({server.log_path})",
                                    server.log_tail()))


def _stop_and_check(server):
    try:
        code = server.terminate()
        tail = server.log_tail()
    finally:
        server.close()
    assert code == 0, f"s4kv serve exit code after SIGTERM: {code}\n{tail}"


SESSION_ARGS = ["--max-model-len", str(MAX_MODEL_LEN), "--kv-cache-memory", "192MiB",
                "--max-num-seqs", "64", "--seed", "0"]


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The shared server: API key, --max-model-len 1024, default served name."""
    srv = Server(tmp_path_factory.mktemp("serve") / "session.log", SESSION_ARGS)
    try:
        srv.wait_ready()
    except BaseException:
        srv.close()
        raise
    yield srv
    _stop_and_check(srv)


@pytest.fixture
def start_server(tmp_path):
    """Factory for function-scoped servers (shutdown, limits). Stopped at teardown; a test
    that already stopped one checks the exit code itself."""
    started = []

    def start(args=(), api_key=API_KEY, wait=True, env=None, positional_model=False):
        srv = Server(tmp_path / f"server{len(started)}.log", args, api_key=api_key, env=env,
                     positional_model=positional_model)
        started.append(srv)
        if wait:
            srv.wait_ready()
        return srv

    yield start
    errors = []
    for srv in started:
        if srv.proc.poll() is not None:
            srv.close()
            continue
        code = srv.terminate()
        tail = srv.log_tail()
        srv.close()
        if code != 0:
            errors.append(f"{srv.cmd}: exit code {code}\n{tail}")
    assert not errors, "\n".join(errors)


@pytest.fixture(scope="session")
def client(server):
    return server.client()


@pytest.fixture(scope="session")
def model(server):
    return server.model


def parse_sse(body):
    """SSE body (bytes/str) -> list of JSON events; asserts the stream ends with [DONE]."""
    if isinstance(body, bytes):
        body = body.decode()
    events = []
    done = False
    for block in body.split("\n\n"):
        block = block.strip("\r\n")
        if not block:
            continue
        assert not done, f"data after [DONE]: {block!r}"
        assert block.startswith("data: "), f"not an SSE data line: {block!r}"
        payload = block[len("data: "):]
        if payload == "[DONE]":
            done = True
        else:
            events.append(json.loads(payload))
    assert done, "stream did not end with data: [DONE]"
    return events


def wait_metric(server, name, want, labels=None, timeout=5.0):
    """Polls /metrics until `name{labels}` equals `want`; returns the last value seen."""
    deadline = time.monotonic() + timeout
    value = None
    while True:
        value = metric_value(parse_metrics(server.metrics_text()), name, labels)
        if value == want or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def parse_metrics(text):
    """Prometheus text -> {(name, frozenset(labels.items())): value}."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            label_text, value_text = rest.rsplit("}", 1)
            labels = {}
            for part in _split_labels(label_text):
                k, v = part.split("=", 1)
                labels[k.strip()] = json.loads(v)
        else:
            name, value_text = line.split(None, 1)
            labels = {}
        value_text = value_text.split()[0]
        samples[(name, frozenset(labels.items()))] = float(value_text)
    return samples


def _split_labels(text):
    parts, cur, in_str, esc = [], "", False, False
    for ch in text:
        if esc:
            cur += ch
            esc = False
        elif ch == "\\":
            cur += ch
            esc = True
        elif ch == '"':
            cur += ch
            in_str = not in_str
        elif ch == "," and not in_str:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def metric_value(samples, name, labels=None):
    """Sum of the samples of `name` whose labels include `labels` (None when none match)."""
    labels = labels or {}
    total, found = 0.0, False
    for (n, ls), v in samples.items():
        if n == name and all((k, val) in ls for k, val in labels.items()):
            total += v
            found = True
    return total if found else None


def assert_single_choice(r, model, max_tokens):
    """A non-streamed response with one choice (index 0) that ended for a reason, and a usage
    whose counts add up."""
    assert r.model == model
    assert len(r.choices) == 1
    assert r.choices[0].index == 0
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0
    assert 0 < r.usage.completion_tokens <= max_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def assert_error_shape(reply, status):
    assert reply.status == status, reply
    body = reply.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    for field in ("message", "type", "param", "code"):
        assert field in err, f"error body lacks {field}: {body}"
    assert isinstance(err["message"], str) and err["message"], body
    assert isinstance(err["type"], str) and err["type"], body
    return err


def pick_stop(text):
    """A word from the second half of text that first occurs after position 0."""
    words = [w for w in text.split() if len(w) >= 3 and w.isalpha()]
    for w in words[len(words) // 2:] + words:
        if text.find(w) > 0:
            return w
    pytest.skip(f"no usable stop word in greedy output {text!r}")
