"""The best epoch's state, kept until its test period is scored, once, at the end of a run.

The test figures of a run are those of its best epoch: the test period streamed on from the
node state at the end of that epoch's validation, with that epoch's weights.  Scoring them at
every new best epoch streams the test period once per improvement and keeps only the last;
instead the state is kept (spilled to disk, :class:`~speed.train.state.spill.Spill`: it costs
disk and page cache, not resident memory) and the test period is scored once, from it, when
training ends -- the same figures, as DyGLib restores its best checkpoint to test it.

:class:`KeptBest` holds, for the best epoch so far: its number, its record for ``best.json``
(taken when it was the best: the optimiser's state changes in place as training goes on), the
back-up of the state, and what node classification reads of it.  ``last.json`` carries all of it,
so a resumed run scores the test period from the same state.
"""

from __future__ import annotations

import copy
from typing import Dict, Optional

import numpy as np
import torch

from ..state.spill import Spill, Streamed, is_spilled, release

class KeptBest:
    """What the best epoch's test figures come from, until they are scored.

    Attributes
    ----------
    epoch : int or None
    state : dict or None
        A whole :meth:`~speed.train.state.snapshots.Snapshots.backup` of the state at the end of the epoch's validation
        (this rank's rows, under PAC), spilled to disk.
    record : dict or None
        The run's record at that epoch, as ``best.json`` keeps it.
    embeddings : tuple or None
        ``(training, validation)`` source embeddings of the epoch (node classification).
    """

    def __init__(self):
        self.epoch: Optional[int] = None
        self.state: Optional[dict] = None
        self.record: Optional[dict] = None
        self.embeddings = None
        self.resumed = False  # the state came from last.json (whole, as the file holds it)

    def keep(self, epoch: int, record: Optional[Dict], state=None, embeddings=None) -> None:
        """Keep epoch ``epoch``: its ``record`` (copied), a back-up of ``state``
        (:class:`~speed.train.state.nodes.NodeStates`, or None: nothing to keep) and ``embeddings``."""
        self.epoch = int(epoch)
        # deep: the optimiser's state dict holds its live tensors, which later steps change in place
        self.record = None if record is None else copy.deepcopy(record)
        self.state = None  # the previous best's back-up goes (its files are unlinked) before the new one
        self.state = None if state is None else state.snapshots.backup(keep=Spill())
        self.embeddings = embeddings
        self.resumed = False

    def tested_earlier(self, best: Dict) -> bool:
        """The best epoch was tested when it happened, by a version that scored the test at
        every best epoch: a run resumed from its ``last.json`` (which kept no state) whose best
        epoch came before the resume.  Its figures and ``best.json`` stand as they are."""
        return self.epoch is None and "test" in (best or {})

    def restore_into(self, states, keep: bool = False) -> None:
        """Make the kept back-up the state of ``states`` (:class:`NodeStates`).

        Either way the back-up is copied into the state's own rows, a window at a time (no
        second copy of the state beside them).  Copied, not adopted: the test passes write and
        read the rows of most nodes, and a spilled back-up held as the state costs a fault a page
        where they first touch it, a copy-on-write fault (a page allocated and copied) for each
        page written.  The generated 2M-event log, TGN, one process: its test new-node pass of
        300 batches took 3.56 / 3.65 s with the back-up adopted (52,633 faults in its memory
        writes, 0.61 s of them; the neighbour sampler 0.54 s against 0.08 s in the test pass
        after it) and 2.74 / 2.82 s with it copied, the copy 0.05 s.

        ``keep=False``: handed over once; nothing here holds it afterwards (its files go at
        once, not after the test that follows).  ``keep=True``: kept untouched: it is the state
        the test period starts from, which ``best.json`` keeps (:meth:`test_start`), read from
        its files rather than copied again."""
        if self.state is None:
            raise RuntimeError("no best epoch's state is kept: nothing to score the test period from")
        if keep:
            states.snapshots.restore(self.state, adopt=False)
            self.release()
            return
        state, self.state = self.state, None
        states.snapshots.restore(state, adopt=False)

    def for_file(self) -> Optional[dict]:
        """The kept back-up as a file takes it: its spilled arrays written a window at a time,
        their pages let go as they are (:class:`~speed.train.state.spill.Streamed`); nothing has
        written to them (they are restored by copy, or adopted once and then no longer kept)."""
        if self.state is None or self.resumed:
            return self.state
        return _streamed(self.state)

    def test_start(self) -> Optional[dict]:
        """The kept back-up as ``best.json``'s test-start state (:meth:`for_file`), after
        :meth:`restore_into` with ``keep``; None when none is kept, or a resumed run's."""
        return None if self.resumed else self.for_file()

    def drop(self) -> None:
        """Let the kept back-up go (its files are unlinked: their space comes back)."""
        self.state = None

    def record_for(self, best: Dict) -> Optional[Dict]:
        """The record ``best.json`` is written with: the best epoch's, with the run's results
        ``best`` (None when none was kept: the run's record now stands in)."""
        return None if self.record is None else dict(self.record, best=best)

    def saved(self, state) -> Dict:
        """What ``last.json`` keeps of it (``state``: the back-up as the file takes it)."""
        if self.epoch is None:
            return {}
        out = {"best_epoch_kept": self.epoch, "best_state": state, "best_record": self.record}
        if self.embeddings is not None:
            out["best_embeddings"] = list(self.embeddings)
        return out

    def release(self) -> None:
        """Let the pages of the kept back-up read so far go (after ``last.json`` read it
        through): it is not written to until it is restored, so they come back from its files
        when read again, and meanwhile do not count in this process's resident memory."""
        if self.state is not None and not self.resumed:
            _release_tree(self.state)

    def resume(self, extra: Dict) -> None:
        """Take back what :meth:`saved` wrote into ``last.json``."""
        if extra.get("best_epoch_kept") is None:
            return
        self.epoch = int(extra["best_epoch_kept"])
        self.resumed = True
        self.state = extra.get("best_state")
        self.record = extra.get("best_record")
        z = extra.get("best_embeddings")
        self.embeddings = None if z is None else tuple(z)


def _map_arrays(value, fn, skip=()):
    """``value`` with each array ``a`` (not under a key in ``skip``) replaced by ``fn(a)``;
    containers copied shallowly, arrays not copied: the one walk over a back-up's tree."""
    if isinstance(value, dict):
        return {k: (v if k in skip else _map_arrays(v, fn, skip)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_arrays(v, fn, skip) for v in value)
    if isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim:
        return fn(value)
    return value


def _release_tree(value) -> None:
    _map_arrays(value, lambda a: release(a))


def _streamed(value):
    """``value`` with its spilled arrays (but the event ids, which a checkpoint may renumber)
    wrapped as :class:`Streamed`."""
    return _map_arrays(value, lambda a: Streamed(a) if is_spilled(a) else a, skip=("nbr_e", "eid", "hold"))
