"""
The token-shard format: llm.c / modded-nanogpt's, so their published shards load here too.

A shard is a header of 256 little-endian int32 (magic 20240520, version 1,
token count, zeros) followed by the tokens as little-endian uint16.
"""

import contextlib
import hashlib
import os
from collections.abc import Iterator
from typing import IO

import numpy as np

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_DTYPE = np.dtype("<u2")


class ShardError(ValueError):
    """A token shard that is not valid; the message names the file."""


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "wb") -> Iterator[IO]:
    """Write path through a temporary file that is fsync'ed and renamed over it, so a crash
    leaves the old file or the new one, never half of one (shards, manifests, checkpoints)."""
    tmp = path + ".tmp"
    try:
        with open(tmp, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # A partial temporary file is of no use, and on a full disk it keeps the space taken.
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    fsync_directory(os.path.dirname(path) or ".")


def file_sha256(path: str) -> str:
    """The hex sha256 of a file's bytes (shards, checkpoints), read in chunks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fsync_directory(path: str) -> None:
    """Make a rename in the folder durable (a crash after it keeps the new name)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # a platform or filesystem without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
