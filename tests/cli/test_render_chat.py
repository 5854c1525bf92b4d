"""`s4kv render-chat` end to end: the real binary ($S4KV_BIN) against Python's jinja2, live,
configured as transformers configures it (tools/make_chat_golden.py), on a few conversations
per template; plus --chat-template overrides and the one-line errors (exit 2)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import make_chat_golden as golden  # noqa: E402

MODELS = {
    "qwen2.5": ROOT / "tests/fixtures/tokenizers/qwen2.5",
    "qwen3": ROOT / "tests/fixtures/tokenizers/qwen3",
    "llama3": ROOT / "tests/fixtures/tokenizers/llama3",
    "s4kv-tiny": ROOT / "models/s4kv-tiny",
}

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hi there 👋"}], "tools": None},
    {"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in 東京?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather",
                                              "arguments": {"city": "東京", "days": 2.5}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "21 degrees."},
        {"role": "user", "content": "Thanks \"friend\"\n"}],
     "tools": [golden.TOOLS[0], golden.TOOLS[3]]},
    {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
        {"role": "user", "content": "and 3+3?"}], "tools": []},
]


def run(*args, stdin):
    binary = os.environ.get("S4KV_BIN")
    if not binary:
        pytest.skip("S4KV_BIN is not set (run through ctest)")
    return subprocess.run([binary, "render-chat", *args], input=stdin.encode("utf-8"),
                          capture_output=True, timeout=60)


def expected(model, conv, agp, template_file=None):
    config = json.loads((MODELS[model] / "tokenizer_config.json").read_text(encoding="utf-8"))
    source = (Path(template_file).read_text(encoding="utf-8") if template_file
              else config["chat_template"])
    return golden.render(golden.make_env(), source, golden.special_tokens_map(config),
                         {**conv, "kwargs": {}}, agp)


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("index", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("agp", [False, True])
def test_matches_jinja2(model, index, agp):
    conv = CONVERSATIONS[index]
    args = ["--model", str(MODELS[model])] + (["--add-generation-prompt"] if agp else [])
    proc = run(*args, stdin=json.dumps(conv, ensure_ascii=False))
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr == b""
    assert proc.stdout.decode("utf-8") == expected(model, conv, agp)


def test_chat_template_file_overrides(tmp_path):
    tmpl = tmp_path / "t.jinja"
    tmpl.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}"
                    "{% if add_generation_prompt %}<assistant>{% endif %}\n")
    conv = CONVERSATIONS[2]
    proc = run("--model", str(MODELS["qwen3"]), "--chat-template", str(tmpl),
               "--add-generation-prompt", stdin=json.dumps(conv))
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode() == expected("qwen3", conv, True, template_file=tmpl)


def one_line_error(proc, fragment):
    assert proc.returncode == 2
    assert proc.stdout == b""
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and fragment in lines[0], lines[0]


def test_errors_are_one_line(tmp_path):
    good = json.dumps(CONVERSATIONS[0])
    one_line_error(run("--model", str(MODELS["qwen3"]), stdin="{not json"), "not valid JSON")
    one_line_error(run("--model", str(MODELS["qwen3"]), stdin="[]"), "one JSON object")
    one_line_error(run("--model", str(MODELS["qwen3"]), stdin='{"messages": 3}'),
                   '"messages" must be an array')
    one_line_error(run("--model", str(MODELS["qwen3"]), stdin='{"messages": [], "x": 1}'),
                   'unknown field "x"')
    one_line_error(run("--model", str(tmp_path / "missing"), stdin=good), "missing")
    bad = tmp_path / "bad.jinja"
    bad.write_text("line 1\n{% if %}\n")
    one_line_error(run("--model", str(MODELS["qwen3"]), "--chat-template", str(bad), stdin=good),
                   "chat template syntax error: line 2:")
    raising = tmp_path / "raise.jinja"
    raising.write_text("{{ raise_exception('Only user and assistant roles are supported!') }}")
    one_line_error(run("--model", str(MODELS["qwen3"]), "--chat-template", str(raising),
                       stdin=good),
                   "raised an exception at line 1: Only user and assistant roles are supported!")
    nomodel = tmp_path / "empty"
    nomodel.mkdir()
    shutil.copyfile(MODELS["qwen3"] / "tokenizer_config.json", nomodel / "tokenizer_config.json")
    cfg = json.loads((nomodel / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (nomodel / "tokenizer_config.json").write_text(json.dumps(cfg))
    one_line_error(run("--model", str(nomodel), stdin=good), "has no chat_template")
