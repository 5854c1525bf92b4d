# CORS on a real `s4kv serve`, as browsers exercise it: with vLLM's defaults a preflight from
# any origin is answered without the API key, and responses (JSON, streams, errors) carry
# Access-Control-Allow-Origin; with --allowed-origins only the listed origins are, and
# --allow-credentials echoes the origin. Malformed flag values stop the start with exit 2.
import subprocess

from conftest import assert_error_shape, parse_sse, s4kv_binary

ORIGIN = "https://ui.example"


def preflight(server, origin=ORIGIN, method="POST", headers="authorization, content-type"):
    return server.request("OPTIONS", "/v1/chat/completions", key=None, headers={
        "Origin": origin, "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": headers})


def test_preflight_with_defaults_needs_no_key(server):
    reply = preflight(server)
    assert reply.status == 200, reply
    assert reply.headers["access-control-allow-origin"] == "*"
    assert "POST" in reply.headers["access-control-allow-methods"].split(", ")
    assert reply.headers["access-control-allow-headers"] == "authorization, content-type"
    assert reply.headers["access-control-max-age"] == "600"
    # An OPTIONS that is not a preflight is an ordinary request: key, then 405.
    reply = server.request("OPTIONS", "/v1/chat/completions", key=None)
    assert_error_shape(reply, 401)
    reply = server.request("OPTIONS", "/v1/chat/completions")
    assert_error_shape(reply, 405)


def test_responses_carry_allow_origin(server, model):
    origin = {"Origin": ORIGIN}
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    reply = server.request("POST", "/v1/chat/completions", body, headers=origin)
    assert reply.status == 200, reply
    assert reply.headers["access-control-allow-origin"] == "*"
    reply = server.request("POST", "/v1/chat/completions", dict(body, stream=True),
                           headers=origin)
    assert reply.status == 200
    assert reply.headers["access-control-allow-origin"] == "*"
    assert parse_sse(reply.body)
    # Errors too, so that the page can read them.
    reply = server.request("GET", "/v1/models", key=None, headers=origin)
    assert_error_shape(reply, 401)
    assert reply.headers["access-control-allow-origin"] == "*"
    # Without an Origin header nothing is added.
    reply = server.request("GET", "/v1/models")
    assert "access-control-allow-origin" not in reply.headers


def test_listed_origins_and_credentials(start_server, model):
    srv = start_server(["--allowed-origins", f'["{ORIGIN}"]', "--allowed-methods",
                        '["GET", "POST"]', "--allow-credentials", "--kv-cache-memory", "128MiB"])
    reply = preflight(srv)
    assert reply.status == 200, reply
    assert reply.headers["access-control-allow-origin"] == ORIGIN
    assert reply.headers["access-control-allow-credentials"] == "true"
    assert reply.headers["vary"] == "Origin"
    assert reply.headers["access-control-allow-methods"] == "GET, POST"
    reply = preflight(srv, origin="https://elsewhere.example")
    assert reply.status == 400
    assert reply.body == b"Disallowed CORS origin"
    assert "access-control-allow-origin" not in reply.headers
    assert preflight(srv, method="DELETE").status == 400
    reply = srv.request("GET", "/v1/models", headers={"Origin": ORIGIN})
    assert reply.status == 200
    assert reply.headers["access-control-allow-origin"] == ORIGIN
    reply = srv.request("GET", "/v1/models", headers={"Origin": "https://elsewhere.example"})
    assert reply.status == 200  # served; the browser withholds it without the header
    assert "access-control-allow-origin" not in reply.headers


def test_malformed_cors_flag_stops_the_start():
    for flag, value in (("--allowed-origins", "*"), ("--allowed-headers", "[1]"),
                        ("--allowed-methods", '"POST"')):
        proc = subprocess.run([s4kv_binary(), "serve", "models/s4kv-tiny", "--port", "0", flag,
                               value], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert f"{flag}={value}: " in lines[0], lines[0]
