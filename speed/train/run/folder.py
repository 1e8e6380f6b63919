"""A run folder: the one module that knows its files, its lock, its refusals and its layout.

``speed train --out RUN`` (and ``speed.train(out=RUN)``) writes::

    RUN/metrics.json                 every figure of the run (speed.train.run.report)
    RUN/curves.png                   loss and validation per epoch
    RUN/best.json + best.*.safetensors   the best epoch: weights, node state, the predictor's payload
    RUN/last.json + last.*.safetensors   everything --resume needs
    RUN/negatives.npz                the evaluation's negatives, to score other models on the same ones
    RUN/config.toml                  the resolved settings (speed train; --config reads it back)

and ``speed update RUN DATA --out RUN2`` writes a new folder of the same layout with
``updates.png`` in place of ``curves.png``'s role (``metrics.json`` gains ``updates``).  Commands and
the library ask this module whether a folder may be written, read, resumed or updated, and hold its
lock while they write it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Dict, Iterator, Optional

from ..._util import check_output_dir, inside_shards
from ...errors import InputError

KIND = "run folder"  # what the messages call it
METRICS = "metrics.json"
CURVES = "curves.png"
BEST = "best.json"
LAST = "last.json"
NEGATIVES = "negatives.npz"
CONFIG = "config.toml"
UPDATES_PLOT = "updates.png"
# the pickled checkpoints of format 1, read only by convert_run(trust_pickle=True)
OLD_BEST = "checkpoint.pt"
OLD_LAST = "last.pt"
# a folder holding one of these is a run folder: --overwrite may reuse it
MARKERS = (METRICS, LAST, BEST, OLD_LAST, OLD_BEST)
# every name speed writes here: --overwrite replaces a folder that holds nothing else
OWNED = (METRICS, CURVES, BEST, "best.*.safetensors", LAST, "last.*.safetensors", NEGATIVES, CONFIG, UPDATES_PLOT,
         OLD_BEST, OLD_LAST, ".*.tmp-*")
# what a run leaves in its folder, in the order a summary names them (the files of a new training
# run replace all of them: those it does not write again would describe another run)
RESULTS = (METRICS, CURVES, BEST, "best.*.safetensors", LAST, "last.*.safetensors", NEGATIVES, CONFIG, UPDATES_PLOT)

NO_LAST = ("no checkpoint here to resume from (a run stopped before its first epoch ended keeps none: start it "
           "again without --resume)")
CONVERT_HINT = ("a run folder of an earlier version of speed, whose checkpoints are pickles (opening one can run "
                "code): convert it with `speed convert-run OLD NEW --trust-pickle`, only if you trust where it came "
                "from")


def refuse_pickled(checkpoint: Path) -> None:
    """The refusal of a run folder of an earlier version: where ``checkpoint`` (``best.json`` or
    ``last.json``) is missing but its pickled predecessor is there, a one-line error saying how
    to convert it (it is never opened: unpickling can run code)."""
    checkpoint = Path(checkpoint)
    if (checkpoint.parent / (OLD_BEST if checkpoint.name == BEST else OLD_LAST)).exists():
        raise InputError(CONVERT_HINT, checkpoint.parent)


class RunFolder:
    """The run folder at ``path`` (which need not exist yet).

    Parameters
    ----------
    path : path-like
    """

    def __init__(self, path):
        self.path = Path(path)

    @classmethod
    def of(cls, folder) -> Optional["RunFolder"]:
        """``folder`` itself when it is a RunFolder (a run holds one), else one for the path
        (None stays None)."""
        return folder if folder is None or isinstance(folder, RunFolder) else cls(folder)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    @property
    def best(self) -> Path:
        return self.path / BEST

    @property
    def last(self) -> Path:
        return self.path / LAST

    # ------------------------------------------------------------------ refusals
    def check_new_training(self, overwrite: bool, resume: bool) -> None:
        """``speed train --out``: refuse a folder that holds anything unless ``--overwrite`` or
        ``--resume`` says what to do with it, and a folder of someone else's even then."""
        p = self.path
        if p.exists() and not (overwrite or resume) and p.is_dir() and any(p.iterdir()):
            raise InputError(f"{KIND} already exists (pass --overwrite, or --resume to continue it)", p)
        check_output_dir(p, True, MARKERS, KIND)
        self.check_outside_shards()

    def check_outside_shards(self) -> None:
        """A run folder is never made inside a shards folder: replacing the shards (``speed
        partition --overwrite``) would take it along."""
        shards = inside_shards(self.path)
        if shards is not None:
            raise InputError(f"the {KIND} would be inside the shards folder {shards}, and go with it when the shards "
                             "are replaced: choose an output outside it", self.path)

    def check_update_output(self, source: "RunFolder", overwrite: bool) -> None:
        """``speed update RUN ... --out OUT``: OUT is a folder of its own that may be written."""
        if self.path.resolve() == source.path.resolve():
            raise InputError("the updated run needs its own folder (--out): the run it starts from stays as it was",
                             self.path)
        self.check_outside_shards()
        check_output_dir(self.path, overwrite, MARKERS, KIND)

    def require_finished(self) -> Path:
        """``best.json``, or a one-line error saying why it is not here; returns its path."""
        if not self.path.is_dir():
            raise InputError("not a run directory" if self.path.exists() else "no such run directory", self.path)
        if self.best.exists():
            return self.best
        model = self.model_name()
        if model is not None and model.startswith("edgebank"):
            raise InputError(f"{model} is a baseline with no trained model to load", self.path)
        refuse_pickled(self.best)
        raise InputError(f"no {BEST} here: not a finished `speed train` run", self.path)

    def require_resumable(self) -> Path:
        """``last.json`` exists: a cheap check a launcher makes before any rank starts, so
        ``--resume`` on the wrong folder is a one-line error, not a failure inside every rank.
        Returns its path (the ranks read it fully: :func:`~.checkpoint.load_checkpoint`)."""
        if not self.last.exists():
            refuse_pickled(self.last)
            raise InputError(NO_LAST, self.last)
        return self.last

    # ------------------------------------------------------------------ reading
    def metrics(self) -> Dict:
        """``metrics.json``, or ``{}`` when there is none."""
        path = self.path / METRICS
        return json.loads(path.read_text()) if path.exists() else {}

    def model_name(self) -> Optional[str]:
        """The model the run trained, from ``metrics.json`` (None when unreadable)."""
        try:
            return self.metrics().get("model")
        except (OSError, ValueError, AttributeError):
            return None

    def recorded_threads(self) -> Optional[int]:
        """The thread count the run trained with, from its ``last.json`` (read without its
        tensors), or None: ``--resume`` trains on with it, since the figures follow it."""
        try:
            doc = json.loads(self.last.read_text())
            n = doc["value"]["config"].get("num_threads")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return int(n) if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None

    # ------------------------------------------------------------------ writing
    def files(self) -> list:
        """The names of the run's files in the folder now (``RESULTS``' order; a checkpoint's
        tensor files go under its ``.json``)."""
        return [n for n in RESULTS if "*" not in n and (self.path / n).is_file()]

    def clear_stale(self) -> None:
        """A new training run replaces the folder's run: remove every file of the earlier one
        (a run whose epochs are all cut writes no ``best.json``, and one that was never updated
        no ``updates.png``: the old ones would stay and describe another run).  Scratch folders
        (``.*.tmp-*``) stay: a rank may be using one."""
        for pattern in RESULTS:
            for p in self.path.glob(pattern):
                if p.is_file():
                    p.unlink(missing_ok=True)

    def write_results(self, metrics: Dict, negatives=None) -> None:
        """``metrics.json``, ``curves.png`` (loss and validation per epoch; a baseline trains no
        epochs and has none) and, given the evaluator, ``negatives.npz``."""
        from .report import plot_curves, write_metrics

        self.path.mkdir(parents=True, exist_ok=True)
        write_metrics(self.path / METRICS, metrics)
        if metrics.get("epochs"):
            plot_curves(metrics, self.path / CURVES)
        if negatives is not None:
            negatives.save_negatives(self.path / NEGATIVES)

    def scratch(self, name: str) -> Path:
        """A fresh hidden folder for a run's scratch files: in the run folder when it exists
        (the same disk as its outputs; ``.NAME.tmp-*``, owned, swept after a killed run), else
        in the system's temporary folder."""
        from ..._util import scratch_dir

        base = self.path if self.path.is_dir() else Path(tempfile.gettempdir())
        return scratch_dir(base, name)

    def write_config(self, config: Dict) -> Path:
        """``config.toml``: the run's resolved settings, as ``--config`` reads them back."""
        from ..config_file import dump_toml

        path = self.path / CONFIG
        path.write_text(dump_toml(config))
        return path

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder while a run writes it: a second run into the same folder is refused
        at once (both would write ``best.json`` and ``metrics.json``, and the figures would be
        of neither).  An advisory lock on the folder itself (created if need be, and removed
        again if the run fails before it writes anything)."""
        made = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            import fcntl
        except ImportError:  # no advisory locks here (not POSIX)
            fcntl = None
        fd = os.open(self.path, os.O_RDONLY)
        ok = False
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    made = False  # another run's folder: not ours to remove
                    raise InputError(f"another run is writing this {KIND}; wait for it to end, or choose another "
                                     "output", self.path) from None
                except OSError:  # a file system without advisory locks (some network mounts): unlocked
                    pass
            yield
            ok = True
        finally:
            os.close(fd)  # (closing releases the lock)
            if made and not ok:
                with contextlib.suppress(OSError):
                    self.path.rmdir()  # only when empty


def kept_threads(config, folder) -> Optional[int]:
    """The thread count a run trains with when ``config`` resumes the run in ``folder`` (a
    :class:`RunFolder`, a path, or None): the count it began with, since the figures follow it;
    None when it does not resume or none was recorded."""
    if not config.resume or folder is None:
        return None
    return RunFolder.of(folder).recorded_threads()
