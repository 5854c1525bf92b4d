# `s4kv serve --async-scheduling` against a server without it, through the official openai
# client: greedy and seeded requests, completions and chat, streamed and not, with logprobs,
# stop strings and length limits, must give the same text, tokens, logprobs, finish reasons and
# usage. Requests go one at a time, so both servers run the same batch shapes (one sequence)
# and the CPU backend's numbers are bit-identical; the exact property under concurrency (many
# requests, aborts, preemption, n > 1) is tested one level down on a batch-invariant fake
# backend (tests/engine/async_scheduling_test.cc).
import pytest

from conftest import SESSION_ARGS, Server

PROMPTS = [
    "The river that runs through the old city",
    "Once upon a time, in a castle by the sea,",
    "List three colours:",
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    started = []
    try:
        for name, extra in (("sync", []), ("async", ["--async-scheduling"])):
            srv = Server(tmp_path_factory.mktemp("async") / f"{name}.log", SESSION_ARGS + extra)
            started.append(srv)
        for srv in started:
            srv.wait_ready()
        yield started
    finally:
        for srv in started:
            code = srv.terminate()
            srv.close()
            assert code == 0, f"{srv.cmd}: exit code {code}"


SETTINGS = [
    dict(temperature=0.0, max_tokens=40),
    dict(temperature=0.0, max_tokens=30, stop=[" the", "."]),
    dict(temperature=0.9, top_p=0.9, seed=7, max_tokens=40),
    dict(temperature=1.0, seed=11, max_tokens=25, stop=["e"]),
]


def completion(client, model, prompt, settings, stream):
    kwargs = dict(model=model, prompt=prompt, logprobs=2, **settings)
    if not stream:
        r = client.completions.create(**kwargs)
        c = r.choices[0]
        return (c.text, c.finish_reason, c.logprobs.tokens, c.logprobs.token_logprobs,
                c.logprobs.top_logprobs, r.usage.completion_tokens, r.usage.prompt_tokens)
    text, tokens, lps, tops, finish, usage = "", [], [], [], None, None
    for chunk in client.completions.create(stream=True, stream_options={"include_usage": True},
                                           **kwargs):
        if chunk.usage is not None:
            usage = (chunk.usage.completion_tokens, chunk.usage.prompt_tokens)
        for c in chunk.choices:
            text += c.text
            if c.logprobs is not None:
                tokens += c.logprobs.tokens
                lps += c.logprobs.token_logprobs
                tops += c.logprobs.top_logprobs
            finish = c.finish_reason or finish
    return (text, finish, tokens, lps, tops) + usage


def chat(client, model, prompt, settings, stream):
    kwargs = dict(model=model, messages=[{"role": "user", "content": prompt}], logprobs=True,
                  top_logprobs=2, **settings)
    if not stream:
        r = client.chat.completions.create(**kwargs)
        c = r.choices[0]
        lps = [(t.token, t.logprob, [(x.token, x.logprob) for x in t.top_logprobs])
               for t in c.logprobs.content]
        return (c.message.content, c.finish_reason, lps, r.usage.completion_tokens,
                r.usage.prompt_tokens)
    text, lps, finish, usage = "", [], None, None
    for chunk in client.chat.completions.create(stream=True,
                                                stream_options={"include_usage": True},
                                                **kwargs):
        if chunk.usage is not None:
            usage = (chunk.usage.completion_tokens, chunk.usage.prompt_tokens)
        for c in chunk.choices:
            text += c.delta.content or ""
            if c.logprobs is not None and c.logprobs.content:
                lps += [(t.token, t.logprob, [(x.token, x.logprob) for x in t.top_logprobs])
                        for t in c.logprobs.content]
            finish = c.finish_reason or finish
    return (text, finish, lps) + usage


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("endpoint", [completion, chat], ids=["completions", "chat"])
def test_async_scheduling_gives_the_same_outputs(servers, endpoint, stream):
    sync, asyn = servers
    clients = [srv.client() for srv in servers]
    for prompt in PROMPTS:
        for settings in SETTINGS:
            want, got = (endpoint(c, srv.model, prompt, settings, stream)
                         for c, srv in zip(clients, (sync, asyn)))
            assert got == want, f"{prompt!r} {settings}"


def test_streamed_equals_whole_with_async_scheduling(servers):
    asyn = servers[1]
    client = asyn.client()
    for settings in SETTINGS:
        whole = completion(client, asyn.model, PROMPTS[0], settings, False)
        streamed = completion(client, asyn.model, PROMPTS[0], settings, True)
        assert streamed == whole, settings
