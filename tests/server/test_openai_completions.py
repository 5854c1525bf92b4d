# POST /v1/completions through the official openai client against a real `s4kv serve`:
# streamed == non-streamed, seeds, stop strings, max_tokens, logprobs shape, usage in streams,
# echo, n, and the four prompt forms (string, list of strings, token ids, list of id lists).
import math

import pytest

from conftest import assert_single_choice, parse_sse, pick_stop

PROMPT = "The history of the city"
OTHER = "Once upon a time"


def complete(client, model, **kwargs):
    kwargs.setdefault("prompt", PROMPT)
    kwargs.setdefault("max_tokens", 16)
    return client.completions.create(model=model, **kwargs)


def stream_complete(client, model, **kwargs):
    """Streams; returns ({index: text}, {index: finish_reason}, chunks)."""
    kwargs.setdefault("prompt", PROMPT)
    kwargs.setdefault("max_tokens", 16)
    chunks = list(client.completions.create(model=model, stream=True, **kwargs))
    texts, reasons = {}, {}
    for chunk in chunks:
        assert chunk.object == "text_completion"
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason is not None:
                assert choice.index not in reasons, "two finish_reasons for one choice"
                reasons[choice.index] = choice.finish_reason
    return texts, reasons, chunks


def token_ids(server, model, text):
    reply = server.request("POST", "/tokenize", {"model": model, "prompt": text})
    if reply.status == 404:
        pytest.skip("POST /tokenize not served")
    assert reply.status == 200, reply
    return reply.json()["tokens"]


def test_non_streaming_shape(client, model):
    r = complete(client, model, temperature=0, max_tokens=12)
    assert r.object == "text_completion"
    assert r.id
    assert_single_choice(r, model, max_tokens=12)
    assert r.choices[0].text


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 99}],
                         ids=["greedy", "seeded"])
def test_stream_equals_non_stream(client, model, sampling):
    full = complete(client, model, max_tokens=24, **sampling)
    texts, reasons, chunks = stream_complete(client, model, max_tokens=24, **sampling)
    assert texts == {0: full.choices[0].text}
    assert reasons == {0: full.choices[0].finish_reason}
    assert len({c.id for c in chunks}) == 1


def test_seed_reproducible(client, model):
    a = complete(client, model, temperature=1.0, seed=3, max_tokens=24).choices[0].text
    b = complete(client, model, temperature=1.0, seed=3, max_tokens=24).choices[0].text
    assert a == b


def test_n2(client, model):
    r = complete(client, model, n=2, temperature=0.8, seed=11, max_tokens=8)
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.text for c in r.choices)
    texts, reasons, _ = stream_complete(client, model, n=2, temperature=0.8, seed=11,
                                        max_tokens=8)
    assert texts == {c.index: c.text for c in r.choices}
    assert reasons == {c.index: c.finish_reason for c in r.choices}


def test_stop_string(client, model):
    full = complete(client, model, temperature=0, max_tokens=40).choices[0].text
    stop = pick_stop(full)
    r = complete(client, model, temperature=0, max_tokens=40, stop=stop)
    assert r.choices[0].text == full[:full.find(stop)], (full, stop)
    assert r.choices[0].finish_reason == "stop"
    texts, reasons, _ = stream_complete(client, model, temperature=0, max_tokens=40, stop=[stop])
    assert texts == {0: full[:full.find(stop)]}
    assert reasons == {0: "stop"}


def test_max_tokens_length(client, model):
    r = complete(client, model, temperature=0, max_tokens=7)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 7


def test_logprobs_shape(client, model):
    r = complete(client, model, temperature=0, max_tokens=8, logprobs=2)
    lp = r.choices[0].logprobs
    n = r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert len(lp.text_offset) == n
    assert lp.text_offset == sorted(lp.text_offset)
    assert lp.text_offset[0] == 0
    if r.choices[0].text.isascii():
        assert "".join(lp.tokens) == r.choices[0].text
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0.0 and math.isfinite(logprob)
        assert len(top) == 2, top  # greedy: the sampled token is one of the top 2
        assert token in top
        assert top[token] == pytest.approx(max(top.values()), abs=1e-4)
        assert logprob == pytest.approx(top[token], abs=1e-4)


def test_stream_include_usage(client, model):
    full = complete(client, model, temperature=0, max_tokens=10)
    _, _, chunks = stream_complete(client, model, temperature=0, max_tokens=10,
                                   stream_options={"include_usage": True})
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_echo(client, model):
    plain = complete(client, model, temperature=0, max_tokens=6).choices[0].text
    echoed = complete(client, model, temperature=0, max_tokens=6, echo=True).choices[0].text
    assert echoed == PROMPT + plain


def test_prompt_list_of_strings(client, model):
    a = complete(client, model, temperature=0, max_tokens=8, prompt=PROMPT)
    b = complete(client, model, temperature=0, max_tokens=8, prompt=OTHER)
    both = complete(client, model, temperature=0, max_tokens=8, prompt=[PROMPT, OTHER])
    by_index = {c.index: c.text for c in both.choices}
    assert by_index == {0: a.choices[0].text, 1: b.choices[0].text}
    assert both.usage.prompt_tokens == a.usage.prompt_tokens + b.usage.prompt_tokens
    assert both.usage.completion_tokens == a.usage.completion_tokens + b.usage.completion_tokens
    texts, _, _ = stream_complete(client, model, temperature=0, max_tokens=8,
                                  prompt=[PROMPT, OTHER])
    assert texts == by_index


def test_prompt_list_of_strings_with_n(client, model):
    r = complete(client, model, temperature=0.8, seed=4, max_tokens=4, prompt=[PROMPT, OTHER],
                 n=2)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]


def test_prompt_token_ids(server, client, model):
    ids = token_ids(server, model, PROMPT)
    by_text = complete(client, model, temperature=0, max_tokens=8)
    by_ids = complete(client, model, temperature=0, max_tokens=8, prompt=ids)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids) == by_text.usage.prompt_tokens


def test_prompt_list_of_token_id_lists(server, client, model):
    ids_a = token_ids(server, model, PROMPT)
    ids_b = token_ids(server, model, OTHER)
    a = complete(client, model, temperature=0, max_tokens=8, prompt=PROMPT).choices[0].text
    b = complete(client, model, temperature=0, max_tokens=8, prompt=OTHER).choices[0].text
    r = complete(client, model, temperature=0, max_tokens=8, prompt=[ids_a, ids_b])
    assert {c.index: c.text for c in r.choices} == {0: a, 1: b}


def test_token_id_out_of_vocab_is_400(server, model):
    reply = server.request("POST", "/v1/completions",
                           {"model": model, "prompt": [1, 2, 8192], "max_tokens": 2})
    assert reply.status == 400, reply


def test_sse_wire_format(server, model):
    reply = server.request("POST", "/v1/completions",
                           {"model": model, "prompt": PROMPT, "max_tokens": 5, "stream": True,
                            "temperature": 0})
    assert reply.status == 200, reply
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(reply.body)
    assert "".join(c["text"] for e in events for c in e["choices"]) == \
        server.client().completions.create(model=model, prompt=PROMPT, max_tokens=5,
                                           temperature=0).choices[0].text
