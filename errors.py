"""
Bad input: the error every entry point reports by name, without a traceback; how a failed write is
explained; and the command-line argument types the entry points share. Standard library only, so that a
process that only waits on a run (a sweep's SLURM task) reports errors without importing torch.
"""

import argparse
import contextlib
import errno
import sys
from collections.abc import Callable


class InputError(Exception):
    """Bad input from the user (a path, a file's contents, a name): the message names it and the fix."""


class ConfigError(InputError, ValueError):
    """A configuration that cannot run; the message names the key and the fix."""


def write_failure(e: OSError) -> str:
    """Why a write failed and what to do, for a message: '(No space left on device); free disk space'."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = "free disk space (or lower ckpt_keep), or raise the quota or file-size limit"
    elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make the folder writable, or choose another out_dir"
    else:
        fix = "check the folder and its file system"
    return f"({e.strerror or e}); {fix}"


@contextlib.contextmanager
def exit_on_input_error(*errors: type[BaseException]):
    """Entry points' main(): an InputError (or one of `errors`) ends the program with its message
    and exit status 2, no traceback; anything else is a bug and keeps its traceback."""
    try:
        yield
    except (InputError, *errors) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def at_least(minimum: float, kind: type = int) -> Callable[[str], float]:
    """An argparse type: a `kind` number no smaller than minimum."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"'{text}' is not a {'whole number' if kind is int else 'number'}") from None
        if not value >= minimum:  # (NaN too)
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        return value

    return parse
