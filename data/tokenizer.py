"""
The tokenizers: the GPT-2 BPE through tiktoken (resolved offline where it has to be), and raw
UTF-8 bytes (vocabulary 256 + a delimiter), for small models whose compute should go into the
transformer rather than a 50K-row embedding (the CPU mini reproduction).

Everything in the project that tokenises calls get_encoding(name) ("gpt2", the default, or
"bytes"). tiktoken's
'r50k_base' is GPT-2's BPE (same ranks, same split pattern, <|endoftext|> =
50256) stored in ONE file, so it is the encoding we load. Where it comes from,
in order:
  1. tiktoken's own cache or download (TIKTOKEN_CACHE_DIR is honoured by tiktoken);
  2. the openai-whisper source distribution from the package index (pip
     download: works on clusters that reach only a PyPI mirror), which ships
     the byte-identical file whisper/assets/gpt2.tiktoken; its sha256 is checked
     against tiktoken's pin and it is put where tiktoken's cache looks.
"""

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile

import numpy as np
import tiktoken

from config import TOKENIZERS
from files import atomic_write

EOT_TOKEN = 50256  # <|endoftext|>, the document delimiter
R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
R50K_CACHE_KEY = hashlib.sha1(R50K_URL.encode()).hexdigest()  # the file name tiktoken's cache looks for

HOW_TO_SUPPLY = (
    "Cannot load the GPT-2 BPE (tiktoken 'r50k_base'): tiktoken could not download it and the "
    "openai-whisper sdist could not be fetched from the package index. Supply it by hand: put the "
    f"file r50k_base.tiktoken (sha256 {R50K_SHA256}; openai-whisper ships it as "
    "whisper/assets/gpt2.tiktoken) into a folder under the name "
    f"{R50K_CACHE_KEY} and set TIKTOKEN_CACHE_DIR to that folder."
)


def tiktoken_cache_dir() -> str:
    """Where tiktoken looks for cached vocabularies (mirrors tiktoken.load)."""
    return os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), "data-gym-cache"
    )


def _fetch_from_whisper_sdist() -> None:
    """Copy gpt2.tiktoken out of the openai-whisper sdist into tiktoken's cache."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             "--dest", tmp, "openai-whisper"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300,
        )
        (archive,) = [os.path.join(tmp, n) for n in os.listdir(tmp) if n.endswith(".tar.gz")]
        with tarfile.open(archive) as tar:
            (member,) = [m for m in tar.getmembers() if m.name.endswith("whisper/assets/gpt2.tiktoken")]
            data = tar.extractfile(member).read()
    if hashlib.sha256(data).hexdigest() != R50K_SHA256:
        raise ValueError("gpt2.tiktoken in the openai-whisper sdist does not have r50k_base's sha256")
    cache_dir = tiktoken_cache_dir()
    os.makedirs(cache_dir, exist_ok=True)
    with atomic_write(os.path.join(cache_dir, R50K_CACHE_KEY)) as f:
        f.write(data)


class ByteEncoding:
    """UTF-8 bytes as token ids 0-255, <|endoftext|> as 256: the part of tiktoken's Encoding interface
    the project uses (encode_to_numpy with no special tokens, encode, decode, eot_token, n_vocab)."""

    name = "bytes"
    eot_token = 256
    n_vocab = 257

    def encode_to_numpy(self, text: str, disallowed_special=()) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)

    def encode(self, text: str, allowed_special=()) -> list[int]:
        return self.encode_to_numpy(text).tolist()

    def decode(self, tokens: list[int]) -> str:
        return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")


Encoding = tiktoken.Encoding | ByteEncoding  # what get_encoding returns


def get_encoding(name: str = "gpt2") -> Encoding:
    """The tokenizer `name`: "bytes", or "gpt2", the GPT-2 BPE from tiktoken's cache/download or
    else the openai-whisper sdist."""
    if name == "bytes":
        return ByteEncoding()
    if name != "gpt2":
        raise ValueError(f"unknown tokenizer {name!r}; choose one of {', '.join(TOKENIZERS)}")
    try:
        return tiktoken.get_encoding("r50k_base")
    except Exception as download_error:
        print(f"tiktoken could not load r50k_base ({type(download_error).__name__}); "
              "fetching it from the openai-whisper sdist on the package index", file=sys.stderr)
    try:
        _fetch_from_whisper_sdist()
        return tiktoken.get_encoding("r50k_base")
    except Exception as e:
        raise RuntimeError(f"{HOW_TO_SUPPLY} (last error: {e})") from e
