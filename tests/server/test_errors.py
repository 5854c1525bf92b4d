# Error replies of a real `s4kv serve`: each maps to the openai client's exception class with
# the right code and param, and every error body is {"error": {"message","type","param","code"}}.
# Plain HTTP covers what the client cannot send (bad JSON, wrong methods, missing keys).
import openai
import pytest

from conftest import MAX_MODEL_LEN, assert_error_shape

MESSAGES = [{"role": "user", "content": "Hello there"}]


def test_wrong_api_key_is_401(server, model):
    bad = server.client(api_key="not-the-key")
    with pytest.raises(openai.AuthenticationError) as info:
        bad.chat.completions.create(model=model, messages=MESSAGES, max_tokens=2)
    assert info.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": "Basic Zm9vOmJhcg=="}],
                         ids=["missing", "wrong", "basic"])
def test_401_body(server, model, headers):
    reply = server.request("POST", "/v1/completions",
                           {"model": model, "prompt": "hi", "max_tokens": 2}, key=None,
                           headers=headers)
    err = assert_error_shape(reply, 401)
    assert err["type"] == "AuthenticationError"


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=2)
    assert info.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="hi", max_tokens=2)


def test_context_length_exceeded(client, model):
    long_text = "the city and the river " * MAX_MODEL_LEN  # about 5 tokens per repeat
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, max_tokens=2,
                                       messages=[{"role": "user", "content": long_text}])
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt=long_text, max_tokens=2)
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt=[1] * (MAX_MODEL_LEN + 1), max_tokens=1)
    assert info.value.code == "context_length_exceeded"


def test_prompt_plus_max_tokens_over_max_model_len(client, model):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt="The city", max_tokens=MAX_MODEL_LEN)
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=MAX_MODEL_LEN)
    assert info.value.code == "context_length_exceeded"


@pytest.mark.parametrize("field,value", [
    ("temperature", -1),
    ("top_p", 2),
    ("top_p", 0),
    ("n", 0),
    ("max_tokens", -1),
    ("max_tokens", 0),
    ("presence_penalty", 3),
    ("frequency_penalty", -2.5),
    ("top_logprobs", 100),
])
def test_bad_value_chat(client, model, field, value):
    kwargs = {"max_tokens": 2, field: value}
    if field == "top_logprobs":
        kwargs["logprobs"] = True
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=MESSAGES, **kwargs)
    assert info.value.param == field, info.value.body
    assert set(info.value.body) == {"message", "type", "param", "code"}, info.value.body
    assert info.value.type == "BadRequestError"


@pytest.mark.parametrize("field,value", [("temperature", -1), ("top_p", 2), ("logprobs", 100),
                                         ("n", 0)])
def test_bad_value_completions(client, model, field, value):
    kwargs = {"max_tokens": 2, field: value}
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt="hi", **kwargs)
    assert info.value.param == field, info.value.body


def test_bad_value_body(server, model):
    reply = server.request("POST", "/v1/chat/completions",
                           {"model": model, "messages": MESSAGES, "temperature": -1})
    err = assert_error_shape(reply, 400)
    assert err["type"] == "BadRequestError"
    assert err["param"] == "temperature"


def test_response_format_json_object_is_400(client, model):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=2,
                                       response_format={"type": "json_object"})
    assert info.value.param == "response_format", info.value.body


@pytest.mark.parametrize("body", [b"{not json", b"", b"[1, 2]", b'{"model": "x"',
                                  b"\xff\xfe\x00garbage"],
                         ids=["broken", "empty", "array", "truncated", "binary"])
def test_malformed_json_is_400(server, body):
    for path in ("/v1/chat/completions", "/v1/completions"):
        reply = server.request("POST", path, body,
                               headers={"Content-Type": "application/json"})
        assert_error_shape(reply, 400)


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"},
    {"model": "models/s4kv-tiny"},
    {"model": "models/s4kv-tiny", "messages": "hi"},
    {"model": "models/s4kv-tiny", "messages": []},
    {"model": "models/s4kv-tiny", "messages": [{"content": "no role"}]},
], ids=["max_tokens_string", "no_messages", "messages_string", "messages_empty", "no_role"])
def test_invalid_chat_fields_are_400(server, body):
    reply = server.request("POST", "/v1/chat/completions", body)
    assert_error_shape(reply, 400)


def test_unknown_path_is_404(server):
    for method, path in (("GET", "/v1/nothing"), ("POST", "/v2/chat/completions"),
                         ("GET", "/")):
        reply = server.request(method, path)
        err = assert_error_shape(reply, 404)
        assert err["type"] == "NotFoundError"


def test_wrong_method_is_405(server):
    for method, path in (("GET", "/v1/chat/completions"), ("GET", "/v1/completions"),
                         ("DELETE", "/v1/models"), ("PUT", "/v1/completions")):
        reply = server.request(method, path)
        assert_error_shape(reply, 405)
        assert reply.headers.get("allow"), reply.headers


def test_request_too_large_is_413(start_server):
    srv = start_server(["--max-request-bytes", "4096", "--max-model-len", "2048",
                        "--kv-cache-memory", "32MiB", "--max-num-seqs", "4"])
    client = srv.client()
    # Under the limit: served.
    r = client.completions.create(model=srv.model, prompt="hi " * 100, max_tokens=1)
    assert r.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.APIStatusError) as info:
        client.completions.create(model=srv.model, prompt="x" * 6000, max_tokens=1)
    assert info.value.status_code == 413
    reply = srv.request("POST", "/v1/completions",
                        {"model": srv.model, "prompt": "y" * 6000, "max_tokens": 1})
    err = assert_error_shape(reply, 413)
    assert err["type"] == "RequestTooLargeError"
    # The server is still healthy afterwards.
    assert srv.request("GET", "/health", key=None).status == 200


@pytest.mark.parametrize("extra,param", [
    ({"stop_token_ids": [8192]}, "stop_token_ids"),
    ({"stop_token_ids": [-1]}, "stop_token_ids"),
    ({"logit_bias": {"999999": 5}}, "logit_bias"),
], ids=["stop_id_oov", "stop_id_negative", "logit_bias_oov"])
def test_out_of_range_token_fields_are_400(server, model, extra, param):
    # Other servers crashed on these (DESIGN.md, known hazards); here a 400 naming the field.
    for path, body in (("/v1/chat/completions", {"messages": MESSAGES}),
                       ("/v1/completions", {"prompt": "hi"})):
        reply = server.request("POST", path, {"model": model, "max_tokens": 2, **body, **extra})
        err = assert_error_shape(reply, 400)
        assert err["param"] == param, err
    assert server.request("GET", "/health", key=None).status == 200


def test_unknown_fields_are_ignored(client, model):
    r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=2,
                                       extra_body={"no_such_field": {"x": 1}})
    assert r.choices[0].finish_reason in ("stop", "length")


def test_json_nesting_over_64_is_400(server, model):
    # The body object is level 1; an ignored field nested to level 64 is served, 65 is refused.
    def body(levels):
        return ('{"model": "%s", "prompt": "hi", "max_tokens": 1, "extra": %s%s}'
                % (model, "[" * (levels - 1), "]" * (levels - 1)))
    reply = server.request("POST", "/v1/completions", body(64),
                           headers={"Content-Type": "application/json"})
    assert reply.status == 200, reply.json()
    reply = server.request("POST", "/v1/completions", body(65),
                           headers={"Content-Type": "application/json"})
    err = assert_error_shape(reply, 400)
    assert "nesting deeper than 64" in err["message"], err
    assert server.request("GET", "/health", key=None).status == 200


@pytest.mark.parametrize("extra,param", [
    ({"allowed_token_ids": [1, 2, 3]}, "allowed_token_ids"),
    ({"bad_words": ["river"]}, "bad_words"),
    ({"truncate_prompt_tokens": 8}, "truncate_prompt_tokens"),
    ({"use_beam_search": True}, "use_beam_search"),
    ({"priority": 5}, "priority"),
    ({"guided_choice": ["yes", "no"]}, "guided_choice"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_known_unimplemented_fields_are_400_not_ignored(client, model, extra, param):
    # Ignoring any of these would change what the client gets without telling it.
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=2,
                                       extra_body=extra)
    assert info.value.param == param, info.value.body
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt="hi", max_tokens=2, extra_body=extra)
    assert info.value.param == param, info.value.body
