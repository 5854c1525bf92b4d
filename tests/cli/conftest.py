"""Shared fixtures of the CLI tests."""
import lzma

import pytest


@pytest.fixture(scope="session")
def text(tmp_path_factory):
    """The first 200,000 characters of the held-out corpus (bench/data), as a file."""
    path = tmp_path_factory.mktemp("text") / "heldout.txt"
    with lzma.open("bench/data/heldout.txt.xz", "rt", encoding="utf-8") as f:
        path.write_text(f.read()[:200_000], encoding="utf-8")
    return str(path)
