# A hostile client against a real `s4kv serve`, speaking raw HTTP/1.1 over sockets:
# - request framing a front proxy could read differently (Transfer-Encoding other than exactly
#   "chunked", Content-Length with Transfer-Encoding, two Content-Lengths, obsolete line folding,
#   bare LF) gets one 400 or 501 and the connection closed; the request hidden after the header
#   is never answered;
# - HEAD on every GET route is answered without a body, so the next response on the same
#   kept-alive connection is read correctly; HEAD /health is 200 without the API key;
# - during a drain (SIGTERM) a client already connected sees /health 503 and new work 503,
#   each with Connection: close.
# Every socket read has a timeout; the file runs in seconds once the server is up.
import signal
import socket
import time

import pytest

from conftest import MODEL, assert_error_shape, HttpReply

READ_TIMEOUT_S = 10


class RawConnection:
    """One TCP connection; requests go out as given, responses are parsed by hand."""

    def __init__(self, server):
        self.server = server
        self.sock = socket.create_connection((server.host, server.port), timeout=READ_TIMEOUT_S)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data if isinstance(data, bytes) else data.encode())

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError(f"closed by the server; unread: {self.buf[:200]!r}")
        self.buf += data

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _take_line(self, end=b"\r\n"):
        while end not in self.buf:
            self._fill()
        i = self.buf.index(end) + len(end)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_response(self, head=False):
        """One response as an HttpReply; head: the answer to HEAD (no body follows)."""
        block = self._take_line(b"\r\n\r\n").decode("latin-1")
        assert block.startswith("HTTP/1.1 "), f"not a status line: {block[:200]!r}"
        lines = block.split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = b""
        if head:
            pass
        elif headers.get("transfer-encoding") == "chunked":
            while True:
                size = int(self._take_line().split(b";")[0], 16)
                chunk = self._take(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
        elif "content-length" in headers:
            body = self._take(int(headers["content-length"]))
        return HttpReply(status, headers, body)

    def rest_until_close(self):
        """Everything the server still sends before it closes the connection."""
        out = self.buf
        self.buf = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return out
            if not data:
                return out
            out += data


def request_bytes(server, method, path, fields="", body=b""):
    head = (f"{method} {path} HTTP/1.1\r\nHost: {server.host}\r\n"
            f"Authorization: Bearer {server.api_key}\r\n{fields}\r\n")
    return head.encode() + body


def smuggled(server):
    """A complete request hidden where the outer request's body would be."""
    return request_bytes(server, "GET", "/v1/models")


def expect_refused(server, data, status):
    conn = RawConnection(server)
    try:
        conn.send(data)
        reply = conn.read_response()
        err = assert_error_shape(reply, status)
        if status == 501:
            assert err["type"] == "NotImplementedError", err
        assert reply.headers.get("connection") == "close", reply
        rest = conn.rest_until_close()
        assert rest == b"", f"more was sent after the refusal (a smuggled answer?): {rest[:300]!r}"
    finally:
        conn.close()


# (Transfer-Encoding value, status): every coding but exactly one "chunked" is refused.
TRANSFER_ENCODINGS = [
    ("xchunked", 501),
    ("identity", 501),
    ("gzip", 501),
    ("chunked, identity", 501),
    ("gzip, chunked", 501),
    ("chunked, chunked", 400),
    ("chunked;ext=1", 400),
]


@pytest.mark.parametrize("te,status", TRANSFER_ENCODINGS, ids=[t for t, _ in TRANSFER_ENCODINGS])
def test_transfer_encoding_other_than_chunked_is_refused(server, te, status):
    hidden = smuggled(server)
    # As a body: the hidden request straight away (read by a server that takes no body), or
    # after a last chunk (read by one that takes the final "chunked").
    for body in (hidden, b"0\r\n\r\n" + hidden):
        expect_refused(server, request_bytes(server, "POST", "/v1/completions",
                                             f"Transfer-Encoding: {te}\r\n", body), status)


def smuggling_cases(server):
    """name -> (header fields, body, status)."""
    hidden = smuggled(server)
    chunked_then_hidden = b"0\r\n\r\n" + hidden
    n = len(chunked_then_hidden)
    return {
        "TE chunked then CL": (f"Transfer-Encoding: chunked\r\nContent-Length: {n}\r\n",
                               chunked_then_hidden, 400),
        "CL then TE chunked": (f"Content-Length: {n}\r\nTransfer-Encoding: chunked\r\n",
                               chunked_then_hidden, 400),
        "TE gzip then CL": (f"Transfer-Encoding: gzip\r\nContent-Length: {len(hidden)}\r\n",
                            hidden, 400),
        "two TE fields gzip, chunked": ("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
                                        chunked_then_hidden, 501),
        "two CLs": (f"Content-Length: 0\r\nContent-Length: {len(hidden)}\r\n", hidden, 400),
        "CL list": (f"Content-Length: 0, {len(hidden)}\r\n", hidden, 400),
        "obs-fold hides TE": ("X-Pad: a\r\n Transfer-Encoding: chunked\r\n", chunked_then_hidden,
                              400),
        "obs-fold in TE": ("Transfer-Encoding:\r\n chunked\r\n", chunked_then_hidden, 400),
        "obs-fold in CL": (f"Content-Length:\r\n\t{len(hidden)}\r\n", hidden, 400),
        "space before colon": ("Transfer-Encoding : chunked\r\n", chunked_then_hidden, 400),
    }


SMUGGLING_IDS = ["TE chunked then CL", "CL then TE chunked", "TE gzip then CL",
                 "two TE fields gzip, chunked", "two CLs", "CL list", "obs-fold hides TE",
                 "obs-fold in TE", "obs-fold in CL", "space before colon"]


@pytest.mark.parametrize("case", SMUGGLING_IDS)
def test_ambiguous_framing_is_refused(server, case):
    fields, body, status = smuggling_cases(server)[case]
    expect_refused(server, request_bytes(server, "POST", "/v1/completions", fields, body), status)


def test_bare_line_feeds_are_refused(server):
    hidden = smuggled(server)
    data = (f"POST /v1/completions HTTP/1.1\nHost: x\nAuthorization: Bearer {server.api_key}\n"
            f"Content-Length: 0\n\n").encode() + hidden
    expect_refused(server, data, 400)


def test_http10_with_transfer_encoding_is_refused(server):
    data = (f"POST /v1/completions HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            f"Authorization: Bearer {server.api_key}\r\n\r\n0\r\n\r\n").encode()
    expect_refused(server, data + smuggled(server), 400)


def test_chunked_body_is_still_served(server):
    body = b'{"model": "%s", "prompt": "Hello", "max_tokens": 2}' % MODEL.encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    conn = RawConnection(server)
    try:
        conn.send(request_bytes(server, "POST", "/v1/completions",
                                "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n",
                                chunked))
        reply = conn.read_response()
        assert reply.status == 200, reply
        assert reply.json()["usage"]["completion_tokens"] <= 2
    finally:
        conn.close()


GET_ROUTES = ["/health", "/v1/models", "/metrics", "/version", "/ping"]


@pytest.mark.parametrize("path", GET_ROUTES)
def test_head_has_no_body_and_keep_alive_goes_on(server, path):
    conn = RawConnection(server)
    try:
        conn.send(request_bytes(server, "HEAD", path))
        head = conn.read_response(head=True)
        assert head.status == 200, head
        assert "connection" not in head.headers, head
        # The next response must start right where the HEAD answer's head ended.
        conn.send(request_bytes(server, "GET", path))
        got = conn.read_response()
        assert got.status == 200, got
        assert head.headers.get("content-type") == got.headers.get("content-type")
        if path != "/metrics":  # the page changes between two calls
            assert head.headers["content-length"] == str(len(got.body)), (head, got)
        conn.send(request_bytes(server, "GET", "/version"))
        assert conn.read_response().json()["version"]
    finally:
        conn.close()


def test_head_health_is_200_without_key(server):
    conn = RawConnection(server)
    try:
        conn.send(f"HEAD /health HTTP/1.1\r\nHost: {server.host}\r\n\r\n")
        head = conn.read_response(head=True)
        assert head.status == 200, head
        assert head.headers.get("content-length") == "0"
        conn.send(f"HEAD /v1/completions HTTP/1.1\r\nHost: {server.host}\r\n"
                  f"Authorization: Bearer {server.api_key}\r\n\r\n")
        refused = conn.read_response(head=True)
        assert refused.status == 405 and refused.headers["allow"] == "POST", refused
        conn.send(f"GET /health HTTP/1.1\r\nHost: {server.host}\r\n\r\n")
        assert conn.read_response().status == 200
    finally:
        conn.close()


def stream_request(server, max_tokens):
    body = ('{"model": "%s", "prompt": "A very long story about the old city:", '
            '"max_tokens": %d, "stream": true, "temperature": 0, "ignore_eos": true}'
            % (server.model, max_tokens)).encode()
    return request_bytes(server, "POST", "/v1/completions",
                         f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n",
                         body)


def test_connected_client_sees_the_drain(start_server):
    srv = start_server(["--kv-cache-memory", "32MiB", "--max-model-len", "4096",
                        "--max-num-seqs", "4", "--shutdown-timeout", "3"])
    health = RawConnection(srv)
    other = RawConnection(srv)
    stream = RawConnection(srv)
    try:
        for conn in (health, other):  # both kept alive and idle when the drain begins
            conn.send(request_bytes(srv, "GET", "/health"))
            assert conn.read_response().status == 200
        stream.send(stream_request(srv, 3000))  # keeps the drain going
        stream._take_line(b"data: ")
        srv.proc.send_signal(signal.SIGTERM)

        # Until the signal is handled /health stays 200 on a kept-alive connection; then 503.
        deadline = time.monotonic() + 10
        while True:
            health.send(request_bytes(srv, "GET", "/health"))
            reply = health.read_response()
            if reply.status != 200:
                break
            assert "connection" not in reply.headers, reply
            assert time.monotonic() < deadline, "/health still 200 long after SIGTERM"
            time.sleep(0.02)
        assert reply.status == 503, reply
        assert reply.headers.get("connection") == "close", reply
        assert health.rest_until_close() == b""

        # New work on the other connection: 503, and the connection closes.
        body = b'{"model": "%s", "prompt": "late", "max_tokens": 2}' % MODEL.encode()
        other.send(request_bytes(srv, "POST", "/v1/completions",
                                 f"Content-Type: application/json\r\n"
                                 f"Content-Length: {len(body)}\r\n", body))
        late = other.read_response()
        assert_error_shape(late, 503)
        assert late.headers.get("connection") == "close", late
        assert other.rest_until_close() == b""
        assert srv.proc.wait(timeout=30) == 0, srv.log_tail()
    finally:
        for conn in (health, other, stream):
            conn.close()
