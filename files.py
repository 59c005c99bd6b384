"""
Durable file writes, for everything the project keeps on disk (token shards, manifests, checkpoints,
config.json, results): a file is written whole or not at all, a rename survives a crash, and a file's
sha256 is read in chunks. Standard library only.
"""

import contextlib
import hashlib
import os
from collections.abc import Iterator
from typing import IO


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
    digest = hashlib.sha256()  # (not hashlib.file_digest: Python 3.11+, and the project runs on 3.10)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


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
