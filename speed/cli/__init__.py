"""The ``speed`` command (``speed.cli:main``; ``python -m speed`` is the same).

* :mod:`.parser` -- the arguments (argparse, here and nowhere else in the package);
* :mod:`.commands` -- one function per subcommand, calling the library;
* :mod:`.summaries` -- the tables they print.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from ..errors import InputError, MissingDependencyError
from .commands import COMMANDS
from .parser import EXIT_INPUT, UNSET, build_parser

__all__ = ["EXIT_INPUT", "build_parser", "main"]


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


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train" and args.config is not None:
            _apply_config_file(args, argv)
        return COMMANDS[args.command](args)
    except (InputError, MissingDependencyError) as exc:
        print(f"speed {args.command}: error: {exc}{_flag_hint(exc)}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print(f"speed {args.command}: interrupted", file=sys.stderr)
        return 130
