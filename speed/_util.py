"""Small helpers shared by the pipeline: progress bars, timers, atomic output."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob
import math
import mmap
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, Optional, Tuple

import numpy as np
from tqdm.auto import tqdm

from .errors import InputError


def jsonable(x):
    """``x`` with numpy scalars as Python numbers, keys as strings and NaN/inf as None, so
    ``json.dump`` writes standard JSON."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def places(table: np.ndarray, bound: int, dtype=np.int64) -> np.ndarray:
    """Each value's place in ``table`` (distinct integers in ``[0, bound)``): an array of
    ``bound`` entries, -1 where a value is not in ``table``.  ``places(t, b)[v]`` is
    ``np.searchsorted(t, v)`` for ``v`` in a sorted ``t``, in one lookup per value: the global
    to local id map of a rank's nodes, a group's, a plan's positions.  ``dtype``: a narrower
    integer type for a large map (int32 while the places fit)."""
    at = np.full(max(int(bound), 0), -1, dtype=dtype)
    at[table] = np.arange(np.asarray(table).size, dtype=dtype)
    return at


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_ALLOCATOR_TUNED = False


def tune_allocator() -> bool:
    """Keep glibc's malloc from unmapping large freed blocks and page-faulting them back in.

    A training step allocates and frees tensors of a few hundred KiB to a few MiB (activations,
    gradients).  glibc serves blocks above its mmap threshold (128 KiB until a large mmapped
    block is freed, which raises it) with fresh mappings, so each step pays page faults on
    memory it just gave back.  Measured on TGN, 20k nodes, 2 threads: an epoch took 30-33 s
    with the default and 22-23 s with a fixed 32 MiB threshold (benchmarks/scale.py's notes in
    docs/benchmarks.md).  Linux with glibc only; ``SPEED_MALLOC_TUNING=0`` leaves malloc alone.
    Returns whether the settings were applied (once per process).
    """
    global _ALLOCATOR_TUNED
    if _ALLOCATOR_TUNED:
        return True
    if not sys.platform.startswith("linux") or os.environ.get("SPEED_MALLOC_TUNING", "1") == "0":
        return False
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 128 << 20) == 1
    except (OSError, AttributeError):  # not glibc (musl, ...)
        return False
    _ALLOCATOR_TUNED = bool(ok)
    return _ALLOCATOR_TUNED


# events a pass streams between two calls of trim_heap (and of release_pages on a mapped log)
TRIM_EVERY = 1 << 16
_LIBC = None


def trim_heap() -> bool:
    """Give the free pages inside glibc's heaps back to the system (``malloc_trim(0)``).

    What a pass frees (a step's temporaries, arrays regrown as the pending events and the
    neighbour rings fill, a back-up let go) stays in the heaps as free chunks among live ones,
    below the mmap threshold :func:`tune_allocator` raises: the heaps keep their high-water mark
    and the process's resident memory with it.  Measured on a rank of the 1M-event PAC run of
    ``benchmarks/scale.py``: during evaluation the heap grew from 264 to 434 MiB with 166 to
    236 MiB of it in use, and each call gave back 30 to 90 MiB in 2 to 18 ms.  Passes call it
    every :data:`TRIM_EVERY` events and at their ends.  Linux with glibc only; returns whether
    it ran.
    """
    global _LIBC
    if not sys.platform.startswith("linux"):
        return False
    if _LIBC is None:
        import ctypes

        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim  # not glibc (musl, ...): no malloc_trim
        except (OSError, AttributeError):
            _LIBC = False
    if not _LIBC:
        return False
    _LIBC.malloc_trim(0)
    return True


def release_arrays(arrays) -> None:
    """:func:`release_pages` for any arrays: those mapped from a file (``np.load(...,
    mmap_mode="r")``, or views of one) let their pages go; the others are left alone."""
    for a in arrays:
        while a is not None and getattr(a, "_mmap", None) is None and isinstance(getattr(a, "base", None), np.ndarray):
            a = a.base  # a view: its mapping is its base's
        m = getattr(a, "_mmap", None)
        if m is not None and not m.closed and hasattr(mmap, "MADV_DONTNEED"):
            m.madvise(mmap.MADV_DONTNEED)


def first_copies(keys: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Which of ``keys`` are copies of ``held`` ones, counted as a multiset: where a key is held
    k times, its first k occurrences in ``keys`` are (bool, shape of ``keys``).  Used to
    recognise events sent again at a log's boundary."""
    keys, held = np.asarray(keys, np.int64), np.asarray(held, np.int64)
    out = np.zeros(keys.size, dtype=bool)
    if keys.size == 0 or held.size == 0:
        return out
    stored, counts = np.unique(held, return_counts=True)
    order = np.argsort(keys, kind="stable")
    ks = keys[order]
    first = np.r_[0, np.flatnonzero(ks[1:] != ks[:-1]) + 1]
    rank = np.arange(ks.size) - np.repeat(first, np.diff(np.r_[first, ks.size]))  # copy number within its key
    pos = np.searchsorted(stored, ks).clip(max=stored.size - 1)
    out[order] = rank < np.where(stored[pos] == ks, counts[pos], 0)
    return out


def full_time(t: float, text: Optional[str] = None) -> str:
    """A time in full, as a user would type it back: ``1453680000``, ``1453680000.25``; with
    ``text="iso"`` (the log had ISO date-times) also the ISO form in UTC."""
    t = float(t)
    s = str(int(t)) if t.is_integer() and abs(t) < 2 ** 53 else repr(t)
    if text == "iso":
        import datetime as dt

        try:
            iso = dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z")
            s += f" ({iso})"
        except (OverflowError, OSError, ValueError):
            pass
    return s


def progress_enabled(progress: Optional[bool] = None) -> bool:
    """Whether to draw progress bars: on for an interactive stderr unless told otherwise."""
    if progress is not None:
        return bool(progress)
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress_bar(total, desc: str, unit: str = "ev", progress: Optional[bool] = None, **kw):
    """A tqdm bar on stderr that disappears when it is done, or a silent one."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        leave=False,
        dynamic_ncols=True,
        disable=not progress_enabled(progress),
        file=sys.stderr,
        **kw,
    )


class StageTimer:
    """Wall-clock seconds per named stage, in the order the stages ran."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def rounded(self, ndigits: int = 4) -> Dict[str, float]:
        return {k: round(v, ndigits) for k, v in self.seconds.items()}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# errno values that mean "the output does not fit": a full disk, a quota, a file-size limit
NO_ROOM = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}  # errnos of a write out of room
_NO_ROOM = NO_ROOM


def _raise_if_no_room(exc: BaseException, target: Path) -> None:
    """A write that ran out of room is the user's to fix (exit 2, one line), not a crash.

    Python reports it as :class:`OSError`; ``torch.save`` as a :class:`RuntimeError` from
    its zip writer (``file write failed``, or ``unexpected pos`` after a short write), which
    carries no errno.
    """
    if isinstance(exc, OSError) and exc.errno in _NO_ROOM:
        raise InputError(f"cannot write: {os.strerror(exc.errno)}", target) from None
    if isinstance(exc, OSError) and exc.errno is None and "requested and" in str(exc):  # numpy's short write
        raise InputError("cannot write (is the disk full, or a file-size limit reached?)", target) from None
    if isinstance(exc, RuntimeError) and any(s in str(exc) for s in ("write failed", "inline_container")):
        raise InputError("cannot write (is the disk full, or a file-size limit reached?)", target) from None


# What speed writes in a shards folder: --overwrite replaces a folder that holds nothing else (a
# user's notes, or a run saved inside a shards folder, make it refuse).  A run folder's names are
# its owner's (speed.train.run.folder.OWNED), given to atomic_dir.
OWNED = {
    "shards folder": ("manifest.json", "events", "events.v*", "nodes.npz", "nodes.v*.npz", "sep.npz", "sep.v*.npz",
                      ".append-*", ".*.tmp-*"),
}


def check_output_path(target, kind: str = "folder", what: str = "output") -> list:
    """Refuse, in one line naming the path, an output that cannot be created, written or
    replaced -- before any work, so nothing is left behind.

    A file where a folder is wanted (or a folder where a file is), a file among its parents, a
    read-only or pseudo file system, missing permission: each is an :class:`InputError` with
    the reason.  Missing parent folders are fine: they are created (as ``mkdir -p`` would),
    and returned so the caller can say so.  Whether the nearest existing folder takes files is
    found by creating and removing a probe file there.

    Parameters
    ----------
    target : path-like
    kind : {"folder", "file"}
        What the output is.
    what : str
        Its name in the message (``"run folder"``, ``"--output"``).

    Returns
    -------
    list of Path
        The parent folders that do not exist yet and will be created, outermost first.
    """
    target = Path(target)
    if target.exists() or target.is_symlink():
        if kind == "folder" and not target.is_dir():
            raise InputError(f"is a file, not a folder: the {what} must be a folder (choose another path)", target)
        if kind == "file" and target.is_dir():
            raise InputError(f"is a folder: the {what} must be a file (choose another path)", target)
    missing = []
    parent = target.parent
    while not parent.exists() and not parent.is_symlink() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"cannot create the {what}: {parent} is a file, not a folder", target)
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".speed-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise InputError(f"cannot create the {what}: {parent} does not take new files ({reason})", target) from None
    return list(reversed(missing))


def check_output_dir(target, overwrite: bool, markers: Tuple[str, ...] = (), kind: str = "output") -> None:
    """Raise :class:`~speed.InputError` unless ``target`` may be written.

    It may when it does not exist or is an empty folder; with ``overwrite``, also when it
    holds one of ``markers`` (a file only ``speed`` writes there: ``manifest.json`` of a
    shards folder, ``metrics.json`` or ``last.json`` of a run).  ``--overwrite`` therefore
    replaces what ``speed`` wrote and never a folder of the user's.

    Parameters
    ----------
    target : path-like
    overwrite : bool
    markers : tuple of str
        File names that mark a folder as ``speed``'s own; empty: any folder may be replaced.
    kind : str
        What the folder should be, for the message ("shards folder", "run folder").
    """
    target = Path(target)
    if not target.exists():
        return
    if not target.is_dir():
        raise InputError(f"output exists and is not a folder; expected a {kind}", target)
    try:
        here = Path.cwd().resolve()
    except OSError:  # the working directory is gone
        here = None
    if here is not None and (target.resolve() == here or target.resolve() in here.parents):
        # the folder is written beside and renamed into place: it cannot replace the folder the
        # command (and the user's shell) stands in
        raise InputError(f"the output is the current folder{'' if target.resolve() == here else ' or one above it'}; "
                         f"name a folder to create, e.g. {Path('runs' if 'run' in kind else 'shards')}", target)
    if not any(target.iterdir()):
        return
    if not overwrite:
        raise InputError("output already exists (pass overwrite=True or --overwrite)", target)
    if markers and not any((target / m).exists() for m in markers):
        raise InputError(f"refusing to replace a folder that is not a {kind} (no {' or '.join(markers)} in it); "
                         "remove it yourself or choose another output", target)


def check_replaceable(target, kind: str, owned: Optional[Tuple[str, ...]] = None) -> None:
    """Refuse to replace a folder of ``kind`` that holds anything ``speed`` did not write there
    (``owned`` name patterns; by default :data:`OWNED`'s for ``kind``): replacing removes the
    whole folder, and a user's file or a run saved inside it would go with it."""
    owned = OWNED.get(kind) if owned is None else owned
    target = Path(target)
    if owned is None or not target.is_dir():
        return
    foreign = sorted(p.name for p in target.iterdir() if not any(fnmatch.fnmatch(p.name, pat) for pat in owned))
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise InputError(f"refusing to replace this {kind}: it holds {foreign[0]!r}{more}, which speed did not "
                         "write there; move it out first or choose another output", target)


def inside_shards(target) -> Optional[Path]:
    """The shards folder ``target`` would lie in (a folder above it with a manifest and events),
    or None."""
    for p in Path(target).resolve().parents:
        if (p / "manifest.json").is_file() and (p / "events").is_dir():
            return p
    return None


def check_output_file(target, overwrite: bool) -> None:
    """Raise :class:`~speed.InputError` if ``target`` exists and ``overwrite`` is not set."""
    target = Path(target)
    if target.is_dir():
        raise InputError("output is a folder; give a file name", target)
    if target.exists() and not overwrite:
        raise InputError("output already exists (pass overwrite=True or --overwrite)", target)


def _owner_tag() -> str:
    """``host-pid`` of this process, written into temporary names so a later run can tell
    which leftovers belong to a process that no longer exists (a ``kill -9``)."""
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:32] or "host"
    return f"{host}-{os.getpid()}"


def _sweep_leftovers(parent: Path, name: str) -> None:
    """Remove ``.NAME.tmp-*``/``.NAME.old-*`` left in ``parent`` by a killed process of this host.

    A leftover is removed only when its process is gone: a writer still running (this
    host) or on another host sharing the folder keeps its files.
    """
    host = _owner_tag().rsplit("-", 1)[0]
    for kind in ("tmp", "old"):
        for entry in parent.glob(f".{glob.escape(name)}.{kind}-{host}-*-*"):
            pid = entry.name[len(f".{name}.{kind}-{host}-"):].split("-", 1)[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()


def scratch_dir(parent, name: str) -> Path:
    """A fresh folder ``parent/.NAME.tmp-HOST-PID-*`` for this process's scratch files, after
    removing those that killed processes of this host left under the same name (a run killed
    while it held one leaves nothing behind for long)."""
    parent = Path(parent)
    _sweep_leftovers(parent, name)
    return Path(tempfile.mkdtemp(prefix=f".{name}.tmp-{_owner_tag()}-", dir=parent))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


@contextlib.contextmanager
def atomic_dir(target, overwrite: bool = False, markers: Tuple[str, ...] = (),
               kind: str = "output", owned: Optional[Tuple[str, ...]] = None) -> Iterator[Path]:
    """Build a directory under a temporary name and move it into place on success.

    The temporary directory sits next to ``target`` so the final ``os.replace`` is a
    rename on the same file system.  On any exception it is removed, so a failed run
    leaves nothing behind; what a ``kill -9`` leaves (a hidden ``.NAME.tmp-HOST-PID-*``)
    is never taken for the output, and the next write of the same target removes it.

    Parameters
    ----------
    target : path-like
        Final directory.
    overwrite : bool
        Replace ``target`` if it exists; otherwise an existing non-empty ``target``
        raises :class:`~speed.InputError` before anything is written.
    markers, kind
        See :func:`check_output_dir`: with them, ``overwrite`` replaces only a folder
        ``speed`` wrote.
    owned : tuple of str, optional
        The names ``speed`` writes in such a folder (:func:`check_replaceable`).
    """
    target = Path(target)
    check_output_dir(target, overwrite, markers, kind)
    if overwrite:
        check_replaceable(target, kind, owned)
    parent = target.parent if str(target.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    _sweep_leftovers(parent, target.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{_owner_tag()}-", dir=parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the result should look like mkdir's
    try:
        yield tmp
        if not overwrite:
            # created exclusively: a rename onto a folder that another command filled meanwhile
            # fails (ENOTEMPTY), so two writers of one output cannot both succeed
            try:
                os.rename(tmp, target)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                    raise
                raise InputError(f"{kind} was written by another command meanwhile; nothing was written "
                                 "(pass --overwrite to replace it)", target) from None
            return
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-{_owner_tag()}-", dir=parent))
            os.replace(target, old / "x")
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _raise_if_no_room(exc, target)
        raise


@contextlib.contextmanager
def atomic_file(target) -> Iterator[Path]:
    """Write a file under a temporary name in the same folder, then rename it into place."""
    target = Path(target)
    parent = target.parent if str(target.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    _sweep_leftovers(parent, target.name)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.tmp-{_owner_tag()}-", dir=parent)
    os.close(fd)
    os.chmod(tmp_name, 0o666 & ~_umask())
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        _raise_if_no_room(exc, target)
        raise


@contextlib.contextmanager
def captured_fds() -> Iterator[list]:
    """Capture what C/C++ code writes to file descriptors 1 and 2 (e.g. METIS's log).

    Python-level ``sys.stdout`` redirection cannot catch native writes, and they would
    corrupt ``--json`` output.  The captured text is appended to the yielded list so a
    caller can show it when something fails.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    captured: list = []
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield captured
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            captured.append(sink.read().decode(errors="replace"))


class Registered:
    """The names of a registry as they are when asked: a row added to the registry (a protocol,
    a recipe, a sync rule) is a choice of its option at once, in the config and the CLI alike."""

    def __init__(self, *names: Callable[[], Iterable[str]]):
        self._names = names

    def _now(self) -> Tuple[str, ...]:
        return tuple(n for names in self._names for n in names())

    def __iter__(self):
        return iter(self._now())

    def __contains__(self, value) -> bool:
        return value in self._now()

    def __len__(self) -> int:
        return len(self._now())

    def __add__(self, other) -> Tuple[str, ...]:
        return self._now() + tuple(other)

    def __repr__(self) -> str:
        return repr(self._now())
