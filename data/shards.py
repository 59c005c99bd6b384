"""
The token-shard format: llm.c / modded-nanogpt's, so their published shards load here too.

A shard is a header of 256 little-endian int32 (magic 20240520, version 1,
token count, zeros) followed by the tokens as little-endian uint16.
"""

import os

import numpy as np

from files import atomic_write

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_DTYPE = np.dtype("<u2")


class ShardError(ValueError):
    """A token shard that is not valid; the message names the file."""


def write_shard(path: str, tokens: np.ndarray) -> None:
    """Write tokens (values < 65536) as a shard, atomically: a temporary file
    renamed into place, so a crash never leaves a half-written shard behind."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 2**16):
        raise ValueError(f"{path}: token ids must fit in uint16 (0..65535)")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = MAGIC, VERSION, tokens.size
    with atomic_write(path) as f:
        f.write(header.tobytes())
        f.write(tokens.astype(TOKEN_DTYPE, copy=False).tobytes())


def read_header(path: str) -> int:
    """Validate a shard's header against its size; returns its token count."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(HEADER_BYTES), dtype="<i4")
    except OSError as e:
        raise ShardError(f"{path}: cannot read token shard ({e})") from e
    if header.size < HEADER_INTS:
        raise ShardError(f"{path}: truncated token shard ({size} bytes, shorter than the {HEADER_BYTES}-byte header)")
    if header[0] != MAGIC:
        raise ShardError(
            f"{path}: not a token shard (magic {header[0]}, expected {MAGIC}); "
            "prepare the data again with data/prepare.py"
        )
    if header[1] != VERSION:
        raise ShardError(f"{path}: unsupported shard version {header[1]} (expected {VERSION})")
    count = int(header[2])
    expected = HEADER_BYTES + count * TOKEN_DTYPE.itemsize
    if size != expected:
        raise ShardError(
            f"{path}: header says {count} tokens ({expected} bytes) but the file has {size} bytes; "
            "the shard is truncated or corrupt, prepare it again"
        )
    return count


def open_shard(path: str) -> np.memmap:
    """Memory-map a shard's tokens after validating its header."""
    count = read_header(path)
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r", offset=HEADER_BYTES, shape=(count,))
