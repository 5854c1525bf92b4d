"""`s4kv tokenize`: JSON Lines in, JSON Lines out, same ids and text as Hugging Face
tokenizers; bad input gives one `error:` line and exit code 2, never a crash."""
import json
import os
import subprocess

import pytest
from tokenizers import Tokenizer

BIN = os.environ.get("S4KV_BIN", "build/src/cli/s4kv")
MODEL = "models/s4kv-tiny"
TEXTS = ["Hello world", "", "<|im_start|>user\nこんにちは 👍🏽<|im_end|>", "  \t\r\n x = 1234567;",
         "e\u0301 café"]


def run(args, stdin):
    return subprocess.run([BIN, "tokenize", *args], input=stdin.encode("utf-8"),
                          capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def hf():
    return Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))


def test_encode_matches_hugging_face(hf):
    r = run(["--model", MODEL], "".join(json.dumps(t) + "\n" for t in TEXTS))
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert got == [hf.encode(t, add_special_tokens=False).ids for t in TEXTS]


def test_decode_matches_hugging_face(hf):
    ids = [hf.encode(t).ids for t in TEXTS] + [[8190, 300, 8191], [101, 232]]
    stdin = "".join(json.dumps(x) + "\n" for x in ids)
    for flags, skip in (([], False), (["--skip-special-tokens"], True)):
        r = run(["--tokenizer", os.path.join(MODEL, "tokenizer.json"), "--decode", *flags], stdin)
        assert r.returncode == 0, r.stderr
        got = [json.loads(line) for line in r.stdout.decode("utf-8").splitlines()]
        assert got == [hf.decode(x, skip_special_tokens=skip) for x in ids]


def test_add_special_tokens_flag_accepted(hf):
    r = run(["--model", MODEL, "--add-special-tokens"], '"hi"\n')
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == hf.encode("hi", add_special_tokens=True).ids


@pytest.mark.parametrize("args,stdin,needle", [
    ([], "not json\n", "line 1"),
    ([], '"ok"\n42\n', "line 2: expected a JSON string"),
    ([], '"\\ud800"\n', "line 1"),
    ([], "\n", "line 1"),
    (["--decode"], '"text"\n', "expected a JSON array"),
    (["--decode"], "[1, -1]\n", "element 1"),
    (["--decode"], "[1, 99999999999]\n", "element 1"),
    (["--decode"], "[1.5]\n", "element 0"),
    (["--decode"], '[[1]]\n', "element 0"),
])
def test_bad_lines_exit_2_with_one_line(args, stdin, needle):
    r = run(["--model", MODEL, *args], stdin)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err


def test_bad_tokenizer_file_exit_2(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "WordPiece", "vocab": {}}}')
    r = run(["--tokenizer", str(bad)], '"x"\n')
    assert r.returncode == 2
    assert b"WordPiece" in r.stderr and r.stderr.count(b"\n") == 1
    r = run(["--model", str(tmp_path / "missing")], '"x"\n')
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1


def test_both_or_neither_source_refused():
    r = run([], '"x"\n')
    assert r.returncode == 2 and r.stderr.startswith(b"error: ")
