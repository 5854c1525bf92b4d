# POST /v1/chat/completions through the official openai client against a real `s4kv serve`:
# streamed == non-streamed (greedy and seeded sampling), n, seeds, stop strings, max_tokens,
# logprobs, usage in streams, and tools rendered into the prompt (also via POST /tokenize).
# Greedy requests use temperature 0; outputs of the tiny model are plain ASCII English.
import math

import pytest

from conftest import MAX_MODEL_LEN, assert_single_choice, pick_stop

PROMPT = "Tell me about the history of the city."
MESSAGES = [{"role": "user", "content": PROMPT}]
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}]


def chat(client, model, **kwargs):
    kwargs.setdefault("messages", MESSAGES)
    kwargs.setdefault("max_tokens", 16)
    return client.chat.completions.create(model=model, **kwargs)


def stream_chat(client, model, **kwargs):
    """Streams; returns ({index: text}, {index: finish_reason}, chunks)."""
    kwargs.setdefault("messages", MESSAGES)
    kwargs.setdefault("max_tokens", 16)
    chunks = list(client.chat.completions.create(model=model, stream=True, **kwargs))
    texts, reasons = {}, {}
    for chunk in chunks:
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            texts.setdefault(choice.index, "")
            if choice.delta.content:
                texts[choice.index] += choice.delta.content
            if choice.finish_reason is not None:
                assert choice.index not in reasons, "two finish_reasons for one choice"
                reasons[choice.index] = choice.finish_reason
    return texts, reasons, chunks


def test_non_streaming_shape(client, model):
    r = chat(client, model, temperature=0, max_tokens=12)
    assert r.object == "chat.completion"
    assert r.id
    assert_single_choice(r, model, max_tokens=12)
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 1234}],
                         ids=["greedy", "seeded"])
def test_stream_equals_non_stream(client, model, sampling):
    full = chat(client, model, max_tokens=24, **sampling)
    texts, reasons, chunks = stream_chat(client, model, max_tokens=24, **sampling)
    assert texts == {0: full.choices[0].message.content}
    assert reasons == {0: full.choices[0].finish_reason}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1, "all chunks of one stream share an id"
    assert all(c.model == model for c in chunks)


def test_n2_two_choices(client, model):
    r = chat(client, model, n=2, temperature=0.8, seed=7, max_tokens=12)
    assert sorted(c.index for c in r.choices) == [0, 1]
    for c in r.choices:
        assert c.message.content
        assert c.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 24


def test_n2_stream_equals_non_stream(client, model):
    full = chat(client, model, n=2, temperature=0.8, seed=21, max_tokens=12)
    texts, reasons, _ = stream_chat(client, model, n=2, temperature=0.8, seed=21, max_tokens=12)
    assert texts == {c.index: c.message.content for c in full.choices}
    assert reasons == {c.index: c.finish_reason for c in full.choices}


def test_seed_reproducible(client, model):
    a = chat(client, model, temperature=1.0, seed=42, max_tokens=24).choices[0].message.content
    b = chat(client, model, temperature=1.0, seed=42, max_tokens=24).choices[0].message.content
    assert a == b
    # Different seeds are very likely to differ somewhere over a few prompts at temperature 1.
    others = {
        chat(client, model, temperature=1.0, seed=s, max_tokens=24).choices[0].message.content
        for s in (1, 2, 3)
    }
    assert len(others | {a}) > 1, "seed has no effect on sampling"


def test_stop_string(client, model):
    full = chat(client, model, temperature=0, max_tokens=40).choices[0].message.content
    stop = pick_stop(full)
    r = chat(client, model, temperature=0, max_tokens=40, stop=[stop])
    assert r.choices[0].message.content == full[:full.find(stop)], (full, stop)
    assert r.choices[0].finish_reason == "stop"
    texts, reasons, _ = stream_chat(client, model, temperature=0, max_tokens=40, stop=stop)
    assert texts == {0: full[:full.find(stop)]}
    assert reasons == {0: "stop"}


def test_max_tokens_length(client, model):
    r = chat(client, model, temperature=0, max_tokens=5)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5
    r = chat(client, model, temperature=0, max_completion_tokens=3)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3


def check_logprob_entries(entries, num_tokens, top_n, greedy):
    assert len(entries) == num_tokens
    for e in entries:
        assert e.logprob <= 0.0 and math.isfinite(e.logprob)
        assert len(e.top_logprobs) == top_n
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True), "top_logprobs not in descending order"
        assert all(t <= 0.0 for t in tops)
        assert e.logprob <= tops[0] + 1e-4
        if greedy:
            assert e.top_logprobs[0].token == e.token
            assert e.logprob == pytest.approx(tops[0], abs=1e-4)


def test_logprobs(client, model):
    r = chat(client, model, temperature=0, max_tokens=10, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    check_logprob_entries(content, r.usage.completion_tokens, 3, greedy=True)
    text = r.choices[0].message.content
    if text.isascii():
        assert "".join(e.token for e in content) == text
    r = chat(client, model, temperature=0.8, seed=5, max_tokens=10, logprobs=True, top_logprobs=3)
    check_logprob_entries(r.choices[0].logprobs.content, r.usage.completion_tokens, 3,
                          greedy=False)
    r = chat(client, model, temperature=0, max_tokens=4)
    assert r.choices[0].logprobs is None


def test_stream_logprobs(client, model):
    _, _, chunks = stream_chat(client, model, temperature=0, max_tokens=8, logprobs=True,
                               top_logprobs=2)
    entries = [e for c in chunks for ch in c.choices if ch.logprobs for e in ch.logprobs.content]
    full = chat(client, model, temperature=0, max_tokens=8, logprobs=True, top_logprobs=2)
    assert [e.token for e in entries] == [e.token for e in full.choices[0].logprobs.content]


def test_stream_include_usage(client, model):
    full = chat(client, model, temperature=0, max_tokens=10)
    _, _, chunks = stream_chat(client, model, temperature=0, max_tokens=10,
                               stream_options={"include_usage": True})
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.prompt_tokens == full.usage.prompt_tokens
    assert last.usage.completion_tokens == full.usage.completion_tokens
    assert last.usage.total_tokens == full.usage.total_tokens
    assert all(c.usage is None for c in chunks[:-1])
    # Without include_usage no chunk carries usage.
    _, _, chunks = stream_chat(client, model, temperature=0, max_tokens=4)
    assert all(c.usage is None for c in chunks)


def test_system_message_and_multi_turn(client, model):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": PROMPT},
    ]
    r = chat(client, model, messages=messages, temperature=0, max_tokens=6)
    single = chat(client, model, temperature=0, max_tokens=6)
    assert r.usage.prompt_tokens > single.usage.prompt_tokens
    assert r.choices[0].message.content


def test_tools_rendered_into_prompt(client, model):
    plain = chat(client, model, temperature=0, max_tokens=4)
    with_tools = chat(client, model, temperature=0, max_tokens=4, tools=TOOLS)
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 20


def test_tokenize_messages_and_tools(server, model):
    plain = server.request("POST", "/tokenize", {"model": model, "messages": MESSAGES})
    if plain.status == 404:
        pytest.skip("POST /tokenize not served")
    assert plain.status == 200, plain
    with_tools = server.request("POST", "/tokenize",
                                {"model": model, "messages": MESSAGES, "tools": TOOLS})
    assert with_tools.status == 200, with_tools
    p, t = plain.json(), with_tools.json()
    for body in (p, t):
        assert body["count"] == len(body["tokens"])
        assert body["max_model_len"] == MAX_MODEL_LEN
        assert all(isinstance(x, int) and 0 <= x < 8192 for x in body["tokens"])
    assert t["count"] > p["count"] + 20
    # The chat endpoint renders the same prompt: its usage.prompt_tokens matches.
    client = server.client()
    assert chat(client, model, temperature=0, max_tokens=2).usage.prompt_tokens == p["count"]
    assert (chat(client, model, temperature=0, max_tokens=2, tools=TOOLS).usage.prompt_tokens
            == t["count"])
    # /detokenize inverts /tokenize for a plain prompt.
    tok = server.request("POST", "/tokenize", {"model": model, "prompt": PROMPT}).json()
    detok = server.request("POST", "/detokenize", {"model": model, "tokens": tok["tokens"]})
    assert detok.status == 200, detok
    assert detok.json()["prompt"] == PROMPT
