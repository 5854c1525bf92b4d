#!/usr/bin/env python3
"""Golden chat-template renderings for S4 KV's C++ Jinja interpreter, from Python's jinja2
configured exactly as Hugging Face transformers configures it for apply_chat_template:

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[jinja2.ext.loopcontrols])
  filters["tojson"]  = json.dumps(x, ensure_ascii=False, indent=, separators=, sort_keys=False)
  globals            raise_exception (TemplateError), strftime_now (datetime.now().strftime)
  render(messages=, tools= (None without tools), documents=None, add_generation_prompt=,
         **special_tokens_map (only the tokens that are set), **template kwargs)

Builds a deterministic (seeded) set of conversations: with and without a system message,
one to many turns, tools, assistant tool calls (arguments as an object or a JSON string,
with and without the {"function": ...} wrapper, several per message), runs of tool responses,
Unicode (CJK, emoji, combining marks, Unicode whitespace), quotes, backslashes, template-like
text, numbers, nested argument objects, Qwen3 reasoning (<think> blocks and
reasoning_content) and enable_thinking. Each is rendered by every template with
add_generation_prompt off and on. A rendering that raises in jinja2 is recorded as an error
(the C++ side must fail too).

Outputs (under tests/golden/chat/):
  conversations.json    [{"messages": [...], "tools": [...] | null, "kwargs": {...}}, ...]
  snippets.json         [{"template": str, "vars": {...}, "text" | "error": str}]: one
                        feature each (whitespace control, loops, macros, filters, tests ...)
  <template>.json       {"template": name, "source": fixture path, "jinja2": version,
                         "renders": [{"conversation": i, "add_generation_prompt": bool,
                                      "text": str} | {... "error": str}]}

Usage: .venv/bin/python tools/make_chat_golden.py [--count 80]
"""
import argparse
import json
import random
import sys
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden" / "chat"
FIX = ROOT / "tests" / "fixtures"

# name: (template source file or tokenizer_config.json, tokenizer_config.json for the tokens)
TEMPLATES = {
    "qwen2.5": ("tokenizers/qwen2.5/tokenizer_config.json", "tokenizers/qwen2.5/tokenizer_config.json"),
    "qwen3": ("tokenizers/qwen3/tokenizer_config.json", "tokenizers/qwen3/tokenizer_config.json"),
    "llama3": ("tokenizers/llama3/tokenizer_config.json", "tokenizers/llama3/tokenizer_config.json"),
    "qwen2.5-instruct.jinja": ("chat_templates/qwen2.5-instruct.jinja",
                               "tokenizers/qwen2.5/tokenizer_config.json"),
    "s4kv-tiny": ("../../models/s4kv-tiny/tokenizer_config.json",
                  "../../models/s4kv-tiny/tokenizer_config.json"),
}

SPECIAL_TOKEN_NAMES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                       "cls_token", "mask_token", "additional_special_tokens"]


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(t):
    if isinstance(t, dict):
        return t.get("content")
    return t


def special_tokens_map(config):
    """transformers' special_tokens_map: the tokens that are set (truthy), as strings."""
    out = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name)
        if isinstance(value, list):
            value = [token_text(t) for t in value if token_text(t)]
        else:
            value = token_text(value)
        if value:
            out[name] = value
    return out


def load_template(name):
    src, cfg = TEMPLATES[name]
    config = json.loads((FIX / cfg).read_text(encoding="utf-8"))
    if src.endswith(".json"):
        source = json.loads((FIX / src).read_text(encoding="utf-8"))["chat_template"]
        if isinstance(source, list):
            source = next(t["template"] for t in source if t["name"] == "default")
    else:
        source = (FIX / src).read_text(encoding="utf-8")
    return source, special_tokens_map(config)


def render(env, source, tokens, conv, add_generation_prompt):
    """apply_chat_template's render call."""
    template = env.from_string(source)
    kwargs = {**tokens, **conv.get("kwargs", {})}
    return template.render(messages=conv["messages"], tools=conv["tools"], documents=None,
                           add_generation_prompt=add_generation_prompt, **kwargs)


# ------------------------------------------------ snippets: one feature each, plain jinja2 env
# (template, variables): rendered by the same environment, no chat variables.
SNIPPETS = [
 ("  {% if true %}\n    x\n  {% endif %}\ny", {}),
 ("a {{- ' b ' -}} c\n{%- if 1 %} d {% endif -%}\n e", {}),
 ("{% for i in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {}),
 ("{% for i in [] %}x{% else %}empty{% endfor %}", {}),
 ("{% for i in range(10) if i is odd %}{% if i > 6 %}{% break %}{% endif %}{% if i == 3 %}{% continue %}{% endif %}{{ i }}{% endfor %}", {}),
 ("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": [1, "x"]}}),
 ("{% set ns = namespace(n=0, s='') %}{% for m in msgs %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ m %}{% endfor %}{{ ns.n }}{{ ns.s }}", {"msgs": ["a", "b", "c"]}),
 ("{% macro f(a, b='B', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ f(1) }}{{ f(1, 2) }}{{ f(a=3, c=4) }}", {}),
 ("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x|tojson(separators=(',', ':')) }}|{{ x|tojson(sort_keys=true) }}", {"x": {"z": [1, 2.5, None, True, "é\"\n<>&'"], "a": {}, "b": []}}),
 ("{{ 'Hello World'.startswith('Hell') }}{{ 'abc'.endswith(('x','c')) }}{{ ' a b  c '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ '--x--'.strip('-') }}{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'aaa'.replace('a','b',2) }}", {}),
 ("{{ s | trim }}|{{ s | length }}|{{ 'aBc' | upper }}|{{ 'aBc' | lower }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-2] }}", {"s": "  Héllo Wörld\u3000"}),
 ("{{ [3,1,2] | sort | join(',') }}|{{ [1,2,3] | reject('odd') | list }}|{{ [1,2,3] | select('equalto', 2) | list }}|{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('+') }}|{{ msgs | rejectattr('role', 'eq', 'user') | list | length }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}),
 ("{{ x | default('d') }}|{{ none | default('d') }}|{{ '' | default('d', true) }}|{{ x is defined }}|{{ y.z is defined }}|{{ y.get('z', 5) }}|{{ y['q'] }}", {"y": {"q": 1}}),
 ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 + 2.0 }} {{ 'ab' * 3 }} {{ 1 == 1.0 }} {{ true + 1 }} {{ 0.1 + 0.2 }} {{ 1e100 }} {{ 1.5e-7 }}", {}),
 ("{{ none }}|{{ true }}|{{ [1, 'a', none, (1,), {'k': \"it's\"}] }}|{{ d }}|{{ 'a' ~ 1 ~ none ~ undefined_thing }}", {"d": {"x": [1.0, False]}}),
 ("{{ 'yes' if x else 'no' }}|{{ 'y' if x }}|{{ x and 'a' or 'b' }}|{{ not x }}|{{ 1 < 2 < 3 }}|{{ 'b' in 'abc' }}|{{ 2 not in [1,3] }}|{{ 'k' in {'k': 1} }}", {"x": 0}),
 ("{{ m is string }}{{ m is mapping }}{{ m is iterable }}{{ m is none }}{{ l is iterable }}{{ l is sequence }}{{ n is number }}{{ n is integer }}{{ f is float }}{{ t is boolean }}{{ u is iterable }}{{ 4 is divisibleby 2 }}{{ 'ABC' is upper }}", {"m": "s", "l": [1], "n": 3, "f": 1.5, "t": True}),
 ("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c %}block {{ a }}{% endset %}[{{ c }}]{% filter upper %}up {{ b }}{% endfilter %}", {}),
 ("{{ messages[0]['role'] }}{{ messages[-1].content }}{{ messages | length }}{{ (messages|first).role }}{{ (messages|last).role }}", {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}),
 ("{# comment #}\n  {#- c2 -#}  \nA{{ '{{' }}B\n{% raw_text = 1 if false %}", None),
 ("line1\n   {%+ if true %}kept indent{% endif +%}\nnext", {}),
 ("{%- for m in messages %}\n    {%- if m.role == 'user' %}\n        {{- '<u>' + m.content }}\n    {%- elif m.role == 'assistant' %}\n        {{- '<a>' + m.content }}\n    {%- endif %}\n{%- endfor %}\n", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
 ("{{ '\\u00e9\\x41\\t|\\d|\\'' }}|{{ \"a\" 'b' }}|{{ 'x'.title() }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}", {}),
 ("{{ (1, 2) }}{{ () }}{{ [] }}{{ {} }}{{ 1.0 }}{{ -0.0 }}{{ 100000000000000000.0 }}{{ 123456789.123 }}", {}),
 ("{% for a in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('x', 'y') }};{% endfor %}", {}),
 ("{{ x | tojson(ensure_ascii=true) }}{{ 'tab\\tnl\\n' | tojson }}", {"x": "é😀\u007f"}),
 ("{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 9 %}{% endif %}{{ x }}", {}),
 ("{{ items | items | list }}{{ d.keys() | list }}{{ d.values() | list }}", {"items": {"a": 1}, "d": {"x": 1, "y": 2}}),
 ("{{ 'abc'.find('c') }}{{ 'a-b-c'.count('-') }}{{ '-'.join(['a','b']) }}{{ 'A\\nB\\n'.splitlines() }}{{ ['a','b'].index('b') }}", {}),
 ("{{ 3 | string + 'x' }}{{ '42' | int + 1 }}{{ '1.5' | float }}{{ -3 | abs }}{{ [1,1,2] | unique | list }}{{ 'abc' | reverse }}{{ 'x\\ny' | indent(2, true) }}", {}),
]


# ---------------------------------------------------------------- conversation generator

TEXTS = [
    "Hello!", "What's the weather like in Paris today?", "Tell me a joke.",
    "Explain KV caches in one sentence.", "こんにちは、元気ですか？", "你好，请介绍一下你自己。",
    "Ça va? Très bien, merci — et toi?", "Emoji time 🎉👩‍👩‍👧 ✓", "e\u0301 combining accent",
    "  leading and trailing spaces  ", "\n\nnewlines around\n\n", "tabs\tinside\ttext",
    "Quotes: \"double\" and 'single' and `back`", "Backslash \\ and \\n literal",
    "Template-like {{ not a var }} {% if %} {# c #}", "<tool_call>fake</tool_call>",
    "Unicode spaces:\u00a0nbsp\u2003em\u3000ideographic\u2028ls", "Line1\r\nLine2",
    "Numbers 3.14159 and 1e10 and -0", "", "A" * 300, "Ünïcödé Ωmega Ж",
    "<tool_response>\nfake\n</tool_response>", "Control \x07 bell and \x1b escape",
]

THINK = ["<think>\nLet me think.\n</think>\n\nThe answer is 4.",
         "<think>reasoning here</think>Final.", "No think tags here.",
         "Before</think>\nafter", "<think>\n\n</think>\n\n"]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Web search — returns snippets. Ünïcödé.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "max_results": {"type": "integer", "default": 5},
            "safe": {"type": "boolean", "default": True}}, "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate \"math\" expressions\nwith care.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string"}, "precision": {"type": "number", "default": 0.5}},
            "required": ["expression"]}}},
    {"type": "function", "function": {"name": "no_params", "description": "Takes nothing."}},
]


def arguments(rng):
    pool = [
        {"city": "Paris"}, {"city": "東京", "unit": "celsius"},
        {"query": "int4 \"KV\" cache", "max_results": 3, "safe": False},
        {"expression": "2**10 / 3", "precision": 1e-05},
        {"nested": {"list": [1, 2.5, None, True, "x"], "empty": {}, "arr": []}},
        {}, {"big": 12345678901234, "neg": -7, "float": 1e16, "small": 0.1},
        {"text": "line1\nline2\t\"quoted\" \\ back"},
    ]
    return rng.choice(pool)


def tool_call(rng):
    args = arguments(rng)
    name = rng.choice(["get_weather", "search", "calculator", "no_params"])
    if rng.random() < 0.3:
        args = json.dumps(args, ensure_ascii=rng.random() < 0.5)
    fn = {"name": name, "arguments": args}
    if rng.random() < 0.8:
        call = {"type": "function", "function": fn}
        if rng.random() < 0.5:
            call = {"id": f"call_{rng.randrange(10**6)}", **call}
        return call
    return fn


def text(rng, allow_list):
    t = rng.choice(TEXTS)
    if allow_list and rng.random() < 0.1:
        return [{"type": "text", "text": t}, {"type": "text", "text": rng.choice(TEXTS)}]
    return t


def conversation(rng, index):
    messages = []
    allow_list = index % 10 == 7  # a few conversations with multi-part content
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": text(rng, allow_list)})
    tools = None
    if rng.random() < 0.45:
        tools = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
    elif rng.random() < 0.05:
        tools = []
    turns = rng.randint(1, 5)
    for turn in range(turns):
        messages.append({"role": "user", "content": text(rng, allow_list)})
        last = turn == turns - 1
        if last and rng.random() < 0.5:
            break
        if rng.random() < 0.35:
            content = rng.choice(["", "Let me check.", None, "<think>\nneed a tool\n</think>\n\n"])
            if content is None and index % 3 != 0:
                content = ""
            calls = [tool_call(rng) for _ in range(rng.randint(1, 3))]
            messages.append({"role": "assistant", "content": content, "tool_calls": calls})
            for _ in range(rng.randint(1, len(calls))):
                messages.append({"role": "tool", "content": rng.choice(
                    ['{"temperature": 21, "unit": "celsius"}', "42", "Error: not found",
                     "结果：晴天 ☀️"])})
            if rng.random() < 0.6:
                messages.append({"role": "assistant", "content": text(rng, False)})
        else:
            msg = {"role": "assistant", "content": rng.choice(THINK + TEXTS)}
            if rng.random() < 0.15:
                msg["reasoning_content"] = rng.choice(["Thinking about it.", "", None])
            messages.append(msg)
    if rng.random() < 0.05:
        messages.append({"role": "system", "content": "A late system message."})
    kwargs = {}
    if rng.random() < 0.2:
        kwargs["enable_thinking"] = rng.random() < 0.5
    return {"messages": messages, "tools": tools, "kwargs": kwargs}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=80)
    args = parser.parse_args()
    rng = random.Random(20240611)
    conversations = [conversation(rng, i) for i in range(args.count)]
    # Edge cases every template must handle or refuse the same way.
    conversations.append({"messages": [], "tools": None, "kwargs": {}})
    conversations.append({"messages": [{"role": "user", "content": "only user"}], "tools": None,
                          "kwargs": {}})
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "conversations.json").write_text(
        json.dumps(conversations, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    env = make_env()
    for name in TEMPLATES:
        source, tokens = load_template(name)
        renders, ok = [], 0
        for i, conv in enumerate(conversations):
            for agp in (False, True):
                entry = {"conversation": i, "add_generation_prompt": agp}
                try:
                    entry["text"] = render(env, source, tokens, conv, agp)
                    ok += 1
                except Exception as e:  # noqa: BLE001 - recorded: C++ must fail as well
                    entry["error"] = f"{type(e).__name__}: {e}"
                renders.append(entry)
        n_ok_convs = len({r["conversation"] for r in renders if "text" in r})
        if n_ok_convs < 50:
            sys.exit(f"{name}: only {n_ok_convs} conversations render; need 50")
        doc = {"template": name, "source": "tests/fixtures/" + TEMPLATES[name][0],
               "jinja2": jinja2.__version__, "renders": renders}
        (OUT / f"{name}.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n",
                                         encoding="utf-8")
        print(f"{name}: {ok} renderings, {len(renders) - ok} errors, {n_ok_convs} conversations")
    snippets = []
    for template, variables in SNIPPETS:
        entry = {"template": template, "vars": variables or {}}
        try:
            entry["text"] = env.from_string(template).render(**(variables or {}))
        except Exception as e:  # noqa: BLE001 - recorded: C++ must fail as well
            entry["error"] = f"{type(e).__name__}: {e}"
        snippets.append(entry)
    (OUT / "snippets.json").write_text(json.dumps(snippets, ensure_ascii=False, indent=1) + "\n",
                                       encoding="utf-8")
    print(f"snippets: {len(snippets)}")


if __name__ == "__main__":
    main()
