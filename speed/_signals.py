"""How a run ends when it is told to stop: terminating signals, a dead parent, a closed pipe.

* :func:`stop_on_signals` turns SIGTERM and SIGHUP (what a batch scheduler, ``timeout``,
  systemd or a closed terminal send) into :class:`Stopped`, raised in the main thread the way
  SIGINT becomes :class:`KeyboardInterrupt`.  The stack then unwinds through every
  ``finally``: temporary outputs are removed, spawned ranks are stopped, and the command
  exits ``128 + signal`` with one line saying so.
* :func:`die_with_parent` makes a spawned rank end when the process that started it ends,
  however that happens (``kill -9`` included), so no rank is ever left running on its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from typing import Iterator, Tuple

# Linux prctl(2) option: the signal this process gets when its parent thread exits
_PR_SET_PDEATHSIG = 1

STOP_SIGNALS: Tuple[int, ...] = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
                                      if s is not None)


class Stopped(BaseException):
    """A terminating signal arrived.  Like :class:`KeyboardInterrupt` it is not an
    :class:`Exception`, so ``except Exception`` clauses do not swallow it.

    Attributes
    ----------
    signum : int
        The signal's number.
    """

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(f"stopped by {signal.Signals(self.signum).name}")

    @property
    def exit_code(self) -> int:
        """``128 + signum``, what a shell reports for a process the signal killed."""
        return 128 + self.signum


def _raise_stopped(signum, frame):
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals(signals: Tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within the block, the given signals raise :class:`Stopped` in the main thread.

    Outside the main thread (where Python cannot install handlers) this does nothing.
    The previous handlers are restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_stopped) for s in signals}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def under_torchrun() -> bool:
    """This process is one rank of a torchrun job (torchrun set ``RANK`` and ``WORLD_SIZE``)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def die_with_parent(parent_pid: int) -> None:
    """End this process (SIGKILL) as soon as its parent ends.

    Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere a no-op.  If the parent is already
    gone when this runs, the process exits at once: the signal would never come.

    Parameters
    ----------
    parent_pid : int
        The PID the parent had when it started this process.
    """
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(128 + signal.SIGKILL)
