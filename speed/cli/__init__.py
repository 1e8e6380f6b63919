"""The ``speed`` command (``speed.cli:main``; ``python -m speed`` is the same).

* :mod:`.parser` -- the arguments (argparse, here and nowhere else in the package);
* :mod:`.commands` -- one function per subcommand, calling the library;
* :mod:`.summaries` -- the tables they print.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from typing import List, Optional

from .._signals import Stopped, stop_on_signals, under_torchrun
from .._util import NO_ROOM
from ..errors import InputError, MissingDependencyError
from .commands import COMMANDS
from .parser import EXIT_INPUT, UNSET, build_parser


def _say(line: str, file=None) -> None:
    """One line on stderr in one write: with unbuffered output (PYTHONUNBUFFERED) ``print``
    writes the text and its newline apart, and the lines of processes sharing the stream (ranks,
    parallel commands) could then run together."""
    file = sys.stderr if file is None else file
    file.write(line + "\n")
    file.flush()

__all__ = ["EXIT_INPUT", "build_parser", "main"]

# errnos of a path the system refuses: the user's to fix (one line and exit 2, no traceback)
_PATH_ERRORS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOENT,
                errno.ENAMETOOLONG, errno.ELOOP, errno.EXDEV}


def _apply_config_file(args, argv) -> None:
    """Settings from ``--config`` into ``args``, except those given as flags."""
    from ..train.config_file import load_config_file

    explicit = build_parser(unset=True).parse_args(sys.argv[1:] if argv is None else argv)
    for key, value in load_config_file(args.config).items():
        if getattr(explicit, key, UNSET) is UNSET:
            setattr(args, key, value)


def _flag_hint(exc: Exception) -> str:
    """`` (--flag)`` for an error about a training parameter the command line exposes."""
    from ..train.config import ConfigError, flag_of

    if isinstance(exc, ConfigError) and flag_of(exc.param):
        return f" ({flag_of(exc.param)})"
    return ""


def _signal_handlers():
    """SIGTERM/SIGHUP end the command cleanly (:mod:`speed._signals`) -- except in a rank
    under torchrun: a rank blocked in a collective would not run a Python handler until the
    collective returns, so there the default action (die at once) is the right one, and
    torchrun's agent reports it."""
    return contextlib.nullcontext() if under_torchrun() else stop_on_signals()


def _quiet_broken_pipe() -> None:
    """stdout's reader went away (``speed ... | head``): send the rest nowhere, quietly."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


@contextlib.contextmanager
def _one_line_warnings(command: str):
    """Warnings as ``speed CMD: warning: ...`` on one line of stderr (not Python's two-line
    form with a source line of ours), for the duration of the command."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        _say(f"speed {command}: warning: {message}", sys.stderr if file is None else file)

    saved = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    with _one_line_warnings(args.command):
        return _run(args, argv)


def _run(args, argv) -> int:
    try:
        with _signal_handlers():
            if args.command == "train" and args.config is not None:
                _apply_config_file(args, argv)
            return COMMANDS[args.command](args)
    except (InputError, MissingDependencyError) as exc:
        _say(f"speed {args.command}: error: {exc}{_flag_hint(exc)}")
        return EXIT_INPUT
    except BrokenPipeError:
        _quiet_broken_pipe()
        return 128 + signal.SIGPIPE
    except OSError as exc:
        # out of room (disk full, a file-size limit, a quota), or a path the system refuses (no
        # permission, a read-only or pseudo file system, a file where a folder is): the user's to
        # fix, said in one line naming the path
        if exc.errno not in NO_ROOM and exc.errno not in _PATH_ERRORS:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        verb = "cannot write" if exc.errno in NO_ROOM else "cannot use this path"
        _say(f"speed {args.command}: error: {where}{verb}: {os.strerror(exc.errno)}")
        return EXIT_INPUT
    except KeyboardInterrupt:
        _say(f"speed {args.command}: interrupted")
        return 130
    except Stopped as exc:
        _say(f"speed {args.command}: {exc}")
        return exc.exit_code
