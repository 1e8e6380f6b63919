"""Taking new events into a :class:`~.predictor.Predictor`: checked, given node rows (new ids
get new rows) and event ids, their features added -- the first half of every way events come in
(:meth:`Predictor.advance`, :meth:`Predictor.score_stream`, ``speed update``).

:class:`Intake` (a predictor's ``intake``) changes when what a new event may be changes; the
predictor answers queries and steps its model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import torch

from ..._util import first_copies, full_time
from ...data.events import Events
from ...errors import InputError


class Intake:
    """How new events enter a predictor (``Predictor.intake``).

    Parameters
    ----------
    pred : Predictor
        Its node index, model, ``t_last`` and ``next_eid`` (which :meth:`admit` moves on).
    """

    def __init__(self, pred):
        self.pred = pred

    def rows(self, ids, side: str) -> torch.Tensor:
        """Rows of ``ids``, adding the ids never seen (the node state and a static table grow)."""
        rows, n = self.pred.index.rows(ids, side)
        self.pred.stateful.grow(n)
        return torch.from_numpy(rows).to(self.pred.device)

    def already_held(self, events: Events) -> np.ndarray:
        """Which of ``events`` repeat events this predictor took in at its last time: a file
        that starts where the previous one ended may send them again.  Those events still wait
        to enter the neighbour rings (a query moves only earlier ones in), so they are known
        exactly; counted as a multiset (an event held once and sent twice is new once).

        Returns
        -------
        bool ndarray, shape (len(events),)
        """
        t = events.t_float()
        out = np.zeros(len(events), dtype=bool)
        at = np.flatnonzero(t == self.pred.t_last)
        if at.size == 0:
            return out
        ids = events.node_ids
        src = events.src[at] if ids is None else ids[events.src[at]]
        dst = events.dst[at] if ids is None else ids[events.dst[at]]
        try:
            s, d = self.pred.index.lookup(src, "src"), self.pred.index.lookup(dst, "dst")
        except InputError:
            return out  # ids of another kind: none of them is held
        held_src, held_dst = self.pred.stateful.state.held_at(self.pred.t_last)
        n = np.int64(max(len(self.pred.index), 1))
        held = held_src * n + held_dst
        known = (s >= 0) & (d >= 0)
        out[at[known]] = first_copies(s[known] * n + d[known], held)
        return out

    def admit(self, events) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Check new events and give them node rows and event ids: the first half of taking
        events in, shared by :meth:`Predictor.advance`, :meth:`Predictor.score_stream` and the online updater
        (:mod:`speed.train.online.update`).

        Ids never seen get new rows (the node state and a static table grow), the events' edge
        features join the state's table, and the predictor's ``t_last`` and ``next_eid`` move
        past the events: the caller then steps the model through them.

        Parameters
        ----------
        events : Events, path-like, or tuple ``(src, dst, t[, msg])``
            As for :meth:`Predictor.advance`.

        Returns
        -------
        src, dst : int64 ndarray, shape (n,)
            Node rows.
        t : float64 ndarray, shape (n,)
        eid : int64 ndarray, shape (n,)
            Event ids, following those the predictor holds.
        """
        from ...data.readers import event_line, read_events

        where = None
        if isinstance(events, (str, Path)):
            events = read_events(events, sort=False, progress=False)
        if isinstance(events, Events):
            where = events
            ids = events.node_ids
            src = events.src if ids is None else ids[events.src]
            dst = events.dst if ids is None else ids[events.dst]
            t, msg = events.t_float(), events.msg
        else:
            try:
                src, dst, t, *rest = events
            except (TypeError, ValueError):
                raise InputError("update takes Events, a path, or a tuple (src, dst, t[, msg])") from None
            msg = rest[0] if rest else None
            src, dst = np.atleast_1d(np.asarray(src)), np.atleast_1d(np.asarray(dst))
            t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        n = len(src)
        if len(dst) != n or len(t) != n:
            raise InputError(f"update: src, dst and t must have one length, got {len(src)}, {len(dst)}, {len(t)}")
        self._check_update(src, dst, t, where, event_line)
        msg = self._check_msg(msg, n, where)
        try:
            s, d = self.rows(src, "src").cpu().numpy(), self.rows(dst, "dst").cpu().numpy()
        except InputError as e:
            if where is None or e.path is not None:
                raise
            raise InputError(e.problem, where.meta.source) from None
        eid = np.arange(self.pred.next_eid, self.pred.next_eid + n, dtype=np.int64)
        if msg is not None:
            self.pred.stateful.state.add_edge_features(msg)
        self.pred.next_eid += n
        if n:
            self.pred.t_last = float(t[-1])
        return s, d, np.ascontiguousarray(t, dtype=np.float64), eid

    def _check_update(self, src, dst, t, where: Optional[Events], event_line) -> None:
        def fail(k: int, problem: str):
            if where is not None and where.meta.source:
                raise InputError(problem, where.meta.source, event_line(where, k))
            raise InputError(f"update: event {k}: {problem}")

        bad = np.flatnonzero(~np.isfinite(t))
        if bad.size:
            fail(int(bad[0]), f"time {t[bad[0]]} is not finite")
        back = np.flatnonzero(np.diff(t) < 0)
        if back.size:
            fail(int(back[0]) + 1, f"time {full_time(t[back[0] + 1])} is earlier than the previous event's "
                                   f"{full_time(t[back[0]])}")
        old = np.flatnonzero(t < self.pred.t_last)
        if old.size:
            fail(int(old[0]), f"event at time {full_time(t[old[0]])} is older than the memory's last update "
                              f"({full_time(self.pred.t_last)})")

    def _check_msg(self, msg, n: int, where) -> Optional[np.ndarray]:
        d = self.pred.stateful.net.msg_dim
        src = where.meta.source if where is not None else None
        if d == 0:
            return None  # a model without edge features ignores any given
        if msg is None:
            raise InputError(f"the model uses {d} edge features per event; these events have none", src)
        msg = np.asarray(msg, dtype=np.float32)
        msg = msg[:, None] if msg.ndim == 1 else msg
        if msg.shape != (n, d):
            raise InputError(f"the model uses {d} edge features per event; got shape {msg.shape}", src)
        return msg
