"""The one tokenizer resolver: tiktoken's cache, then the openai-whisper sdist, then a clear error."""

import os
import subprocess

import pytest

from conftest import PYTHON, REPO

PROBE = "from data.tokenizer import get_encoding; e = get_encoding(); print(e.n_vocab, e.encode_ordinary('hello world'))"


def resolve_in_fresh_process(cache_dir: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=cache_dir, **(extra_env or {}))
    return subprocess.run([PYTHON, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.quick
def test_loads_from_tiktoken_cache():
    proc = resolve_in_fresh_process(os.environ["TIKTOKEN_CACHE_DIR"])
    assert proc.stdout.split(None, 1) == ["50257", "[31373, 995]\n"], proc.stderr


def test_falls_back_to_the_whisper_sdist_from_the_package_index(tmp_path):
    # An empty cache and no vocabulary host: the BPE must come from PyPI's openai-whisper sdist.
    proc = resolve_in_fresh_process(str(tmp_path))
    assert proc.stdout.split(None, 1) == ["50257", "[31373, 995]\n"], proc.stderr
    assert "openai-whisper" in proc.stderr
    (cached,) = os.listdir(tmp_path)
    assert cached == "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4"  # tiktoken's cache key for r50k_base


def test_says_how_to_supply_the_vocabulary_when_everything_fails(tmp_path):
    # A package index that does not answer: pip fails fast, and the error says what to do.
    proc = resolve_in_fresh_process(str(tmp_path), {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0",
                                                     "PIP_TIMEOUT": "2"})
    assert proc.returncode != 0
    assert "TIKTOKEN_CACHE_DIR" in proc.stderr and "306cd27f" in proc.stderr
