"""Using a trained run: :func:`load_run` and the :class:`Predictor` it returns.

A run's ``best.json`` (:mod:`speed.train.run.checkpoint`) holds the best weights and the
full-graph node state after the whole log.  For the state to be *used* -- continued on new
events, embedded, scored -- it also carries what the model alone does not
(:func:`predictor_payload`, written by every run, single-process or PAC):

* the original node ids, so users speak in the ids of their files;
* the neighbour rings and pending events, so graph attention and the next memory update
  see what the evaluation saw;
* the edge features of the events those refer to (a compact table: event ids are renumbered
  into it), so the predictor needs nothing but the run directory;
* the same state at the start of the test period, so the test period can be scored again
  exactly as the run's evaluation scored it (``load_run(run, at="test")``).

Causality is the same as in training: :meth:`Predictor.advance` takes events in the run's
batch size (events of one batch do not see each other) and refuses any event older than
the memory's last update; :meth:`Predictor.embed` and :meth:`Predictor.score` refuse times
before it, because the memory already holds later events.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch

from ..._util import full_time, release_arrays, tune_allocator
from ...data.events import Events
from ...errors import InputError
from ..state.spill import View
from . import checkpoint as ckpt
from .folder import RunFolder
from .intake import Intake
from ..config import check_device
from ..model.network import StatefulModel, TemporalGNN, build_model
from ..model.queries import QueryLayout
from ..state.nodes import NodeStates
from ..state.snapshots import Snapshots
from ...data.node_index import NodeIndex

AT = ("end", "test")
PAYLOAD_FORMAT = 2  # 2: pending events kept past simultaneous batches, held sampler events
_CHUNK = 4096  # nodes or pairs per forward pass when embedding and scoring (no state changes)


# ----------------------------------------------------------------------- the payload
def predictor_payload(model: StatefulModel, events: Events, batch_size: int, test_start: Optional[dict],
                      end: Optional[dict] = None) -> Dict:
    """What ``best.json`` needs beyond the model's state dict to be loaded as a predictor.

    Parameters
    ----------
    model : StatefulModel
        The full-graph model after the whole log (built by :func:`build_model`).
    events : Events
        The whole log (node ids, edge features, times).
    batch_size : int
        The run's batch size (updates use it).
    test_start : dict, optional
        ``{"t": float, "state": model.backup()}`` taken when the test period began.
    end : dict, optional
        The state's structures after the log (default ``model.state.snapshots.structures()``), as a PAC
        run writes them from the ranks that hold them
        (:meth:`~speed.train.state.snapshots.Snapshots.written_snapshot`).  Its arrays are written
        as they come: the edge features are then kept whole, not narrowed to the events the
        snapshots name.
    """
    per_side = events.node_ids is not None and np.unique(events.node_ids).size < events.node_ids.size
    # the destinations (bipartite) or endpoints of the log: where an update draws its negatives
    pool = np.zeros(model.num_nodes, dtype=bool)
    pool[np.flatnonzero(events.node_mask(("dst",) if events.bipartite else ("src", "dst")))] = True
    out = _payload(model, events.node_ids, events.msg if events.msg is not None and events.msg.shape[1] > 0 else None,
                   float(events.t_float()[-1]) if len(events) else -np.inf, int(len(events)), batch_size, test_start,
                   # JODIE-style logs number users and items apart, so one id can name two nodes
                   num_src_ids=int(events.src.max()) + 1 if per_side else None, end=end)
    out.update(negative_pool=np.flatnonzero(pool), bipartite=bool(events.bipartite))
    release_arrays([events.src, events.dst, events.t])  # a mapped log's pages read here
    return out


def payload_of(pred: "Predictor", test_start: Optional[dict] = None) -> Dict:
    """The payload of a predictor as it is now (after updates), for a new ``best.json``."""
    ef = pred.state.edge_feature_table()
    features = None if ef is None or pred.net.msg_dim == 0 else np.asarray(ef)
    is_src = (pred.index.sides == "src") if pred.index.per_side else None
    return _payload(pred.stateful, pred.index.ids, features, pred.t_last, pred.next_eid, pred.batch_size, test_start,
                    is_src=is_src)


def _payload(model: StatefulModel, node_ids, msg: Optional[np.ndarray], t_end: float, next_eid: int,
             batch_size: int, test_start: Optional[dict], num_src_ids: Optional[int] = None,
             is_src: Optional[np.ndarray] = None, end: Optional[dict] = None) -> Dict:
    compact = end is None  # arrays written as they come (end given) keep their event ids
    if end is None:
        # pending events, neighbour rings, components (TIGE's values): the live arrays, written
        # into the checkpoint before the state changes again (a copy was the run's peak)
        end = model.state.snapshots.structures(keep=View())
    if test_start is not None:  # a shallow copy: renumbering event ids replaces entries, never edits them
        test_start = {"t": float(test_start["t"]), "state": dict(test_start["state"])}
    snaps = [end] + ([test_start["state"]] if test_start is not None else [])
    features = None
    if msg is not None:
        features = _compact_features(msg, snaps) if compact else np.ascontiguousarray(msg, dtype=np.float32)
    return {
        "format": PAYLOAD_FORMAT,
        "spec": {**model.net.spec, "num_nodes": model.num_nodes},
        "node_ids": node_ids,
        "num_src_ids": num_src_ids,
        "is_src": is_src,  # per-side numbering whose rows are not sources first (after updates)
        "t_end": float(t_end),
        "end": end,
        "test_start": test_start,
        "edge_features": features,
        "next_eid": int(features.shape[0]) if features is not None else int(next_eid),
        "batch_size": int(batch_size),
    }


def _compact_features(msg: np.ndarray, snaps) -> np.ndarray:
    """The rows of ``msg`` that the snapshots' neighbour rings and pending events refer to; the
    snapshots' event ids are renumbered into the returned table (:meth:`~speed.train.state.snapshots.Snapshots.compact_event_ids`)."""
    keep = Snapshots.compact_event_ids(snaps)
    return np.ascontiguousarray(msg[keep], dtype=np.float32)


# ----------------------------------------------------------------------- predictor
class Predictor:
    """A trained temporal GNN with its node state, ready to use.

    Built by :func:`load_run`.  Node ids are the original ids of the log the run trained on
    (ints or strings); ids the run never saw are new nodes with an empty memory.

    Attributes
    ----------
    model : TemporalGNN
        The weights, in eval mode.
    state : NodeStates
        The node state; it moves on with :meth:`advance`.
    t_last : float
        Time of the latest event in the memory: updates, embeddings and scores must not be
        earlier.
    config : dict
        The run's :class:`~speed.train.config.TrainConfig` fields.
    """

    def __init__(self, model: StatefulModel, index: NodeIndex, t_last: float, next_eid: int, batch_size: int,
                 config: Dict, run: Optional[Path] = None):
        self._model = model.eval()
        self.index = index
        self.t_last = float(t_last)
        self.next_eid = int(next_eid)
        self.batch_size = int(batch_size)
        self.config = config
        self.run = run
        self.intake = Intake(self)  # checks new events, gives them rows and ids (run/intake.py)

    @property
    def net(self) -> TemporalGNN:
        """The weights (in eval mode)."""
        return self._model.net

    @property
    def model(self) -> TemporalGNN:
        """The weights: deprecated name of :attr:`net` ("model" is the weights and their node
        state together elsewhere, :attr:`stateful`)."""
        warnings.warn("Predictor.model is deprecated: use Predictor.net (the weights)", DeprecationWarning,
                      stacklevel=2)
        return self.net

    @property
    def state(self) -> NodeStates:
        """The node state, moving on with :meth:`update`."""
        return self._model.state

    @property
    def stateful(self) -> StatefulModel:
        """Weights and node state together: what an engine steps (:mod:`speed.train.online.update`)."""
        return self._model

    def load_weights(self, params: Dict[str, torch.Tensor]) -> None:
        """Replace the weights (a state dict of the network), keeping the node state."""
        self._model.load_params(params)

    @property
    def device(self) -> torch.device:
        return self._model.device

    @property
    def node_ids(self) -> np.ndarray:
        """Original id of every node the predictor knows, in row order (see :meth:`embed_all`)."""
        return self.index.ids

    @property
    def embedding_dim(self) -> int:
        return int(self._model.net.embedding.out_dim)

    def __repr__(self) -> str:
        return (f"Predictor({self._model.name}, {len(self.index)} nodes, t_last={full_time(self.t_last)}"
                + (f", run={str(self.run)!r})" if self.run is not None else ")"))

    # ------------------------------------------------------------------ helpers
    def _read_rows(self, ids, side: str) -> torch.Tensor:
        """Rows of ``ids`` for reading only (``embed``, ``score``): an id the run never saw
        reads the cold row, the first row past the known nodes, which nothing writes until
        ``update`` gives it to a node: zero memory, no neighbours, no pending events, exactly
        what a new node starts with.  Nothing is added."""
        rows = self.index.lookup(ids, side)
        if (rows < 0).any():
            cold = len(self.index)
            self._model.grow(cold + 1)
            rows = np.where(rows < 0, cold, rows)
        return torch.from_numpy(rows).to(self.device)

    def _times(self, t, n: int, what: str) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64) if not isinstance(t, np.ndarray) or t.dtype.kind != "f" \
            else t.astype(np.float64, copy=False)
        if t.ndim == 0:
            t = np.full(n, float(t))
        if t.shape != (n,):
            raise InputError(f"{what}: t must be one time or {n} times, got shape {t.shape}")
        if not np.all(np.isfinite(t)):
            raise InputError(f"{what}: times must be finite")
        if n and t.min() < self.t_last:
            k = int(np.argmin(t))
            raise InputError(f"{what}: time {full_time(t[k])} (entry {k}) is before the memory's last update "
                             f"({full_time(self.t_last)}); the memory already holds later events")
        return t

    # ------------------------------------------------------------------ verbs
    @torch.no_grad()
    def embed(self, nodes, t=None, side: Optional[str] = None) -> np.ndarray:
        """Node embeddings ``z_i(t)``.

        Parameters
        ----------
        nodes : array-like, shape (n,)
            Original node ids.
        t : float or array-like of shape (n,), optional
            Times (default: :attr:`t_last`); not before :attr:`t_last`.
        side : {"src", "dst"}, optional
            Needed only when the run numbered sources and destinations apart.

        Returns
        -------
        float32 ndarray, shape (n, embedding_dim)
        """
        nodes = np.asarray(nodes)
        nodes = nodes.reshape(-1) if nodes.ndim == 0 else nodes
        rows = self._read_rows(nodes, self.index.side(side))
        t = self._times(self.t_last if t is None else t, rows.numel(), "embed")
        return self._embed_rows(rows, t)

    def embed_all(self, t=None) -> np.ndarray:
        """Embeddings of every known node at ``t`` (default :attr:`t_last`), in the order of
        :attr:`node_ids`: float32, shape (len(node_ids), embedding_dim)."""
        t = self._times(self.t_last if t is None else t, 1, "embed")[0]
        rows = torch.arange(len(self.index), device=self.device)
        return self._embed_rows(rows, np.full(rows.numel(), t))

    @torch.no_grad()
    def _embed_rows(self, rows: torch.Tensor, t: np.ndarray) -> np.ndarray:
        tt = torch.from_numpy(t).to(self.device)
        out = [self._model.embed(rows[i:i + _CHUNK], tt[i:i + _CHUNK]).cpu()
               for i in range(0, rows.numel(), _CHUNK)]
        dim = self.embedding_dim
        return torch.cat(out).numpy() if out else np.empty((0, dim), dtype=np.float32)

    @torch.no_grad()
    def score(self, src, dst, t=None, logits: bool = False) -> np.ndarray:
        """Link probabilities of the pairs ``(src[i], dst[i])`` at ``t[i]``, from the current
        memory (scoring changes no state).

        Parameters
        ----------
        src, dst : array-like, shape (n,)
            Original node ids.
        t : float or array-like of shape (n,), optional
            Default :attr:`t_last`; not before it.
        logits : bool
            Return the decoder's logits instead of probabilities.

        Returns
        -------
        float32 ndarray, shape (n,)
        """
        src, dst = np.atleast_1d(np.asarray(src)), np.atleast_1d(np.asarray(dst))
        if src.shape != dst.shape or src.ndim != 1:
            raise InputError(f"score: src and dst must be two 1-D arrays of one length, got {src.shape} and "
                             f"{dst.shape}")
        s, d = self._read_rows(src, "src"), self._read_rows(dst, "dst")
        t = torch.from_numpy(self._times(self.t_last if t is None else t, s.numel(), "score")).to(self.device)
        out = []
        for i in range(0, s.numel(), _CHUNK):
            n = min(_CHUNK, s.numel() - i)
            z = self._model.embed(torch.cat([s[i:i + n], d[i:i + n]]), torch.cat([t[i:i + n], t[i:i + n]]))
            out.append(QueryLayout(n, neg_dst=False).score(self._model.score, z, which=("pos",))[0].cpu())
        x = torch.cat(out) if out else torch.empty(0)
        return (x if logits else torch.sigmoid(x)).numpy()

    def score_stream(self, src, dst, t, neg_src=None, neg_dst=None, msg=None, candidates=None,
                     progress: Optional[bool] = None):
        """Score events as the evaluation does while taking them into the memory: each batch (the
        run's batch size) is one step, in which the events are scored against their negatives
        and candidates -- seeing the earlier events of the batch as neighbours, as the
        evaluation's events do -- and then stored.

        Parameters
        ----------
        src, dst, t : array-like, shape (n,)
            The events, in time order (original ids).
        neg_src, neg_dst : array-like, shape (n,), optional
            One negative edge per event (e.g. the event's own source and a negative
            destination).
        msg : array-like, shape (n, msg_dim), optional
        candidates : array-like, shape (n, K), optional
            Negative destinations per event to rank the event against (original ids).

        Returns
        -------
        pos : float32 ndarray, shape (n,)
            Logits of the events.
        neg : float32 ndarray, shape (n,), or None
            Logits of their negatives.
        cand : float32 ndarray, shape (n, K), or None
            Logits of ``(src, candidate)`` pairs.
        """
        if (neg_src is None) != (neg_dst is None):
            raise InputError("score_stream: give both neg_src and neg_dst, or neither")
        neg_rows = None
        if neg_src is not None:
            neg_rows = (self.intake.rows(np.asarray(neg_src), "src").cpu().numpy(),
                        self.intake.rows(np.asarray(neg_dst), "dst").cpu().numpy())
        cand_rows = None
        if candidates is not None:
            candidates = np.asarray(candidates)
            cand_rows = self.intake.rows(candidates.reshape(-1), "dst").cpu().numpy().reshape(candidates.shape)
        pos, neg, cand = [], [], []

        drawn, k = neg_rows is not None, 0 if cand_rows is None else cand_rows.shape[1]

        def extra(i: int, j: int, t_batch: np.ndarray):  # the queries after the events' own
            lay = QueryLayout(j - i, neg_dst=drawn, neg_src=drawn, k=k)
            return [lay.after_events(t_batch, neg_rows[1][i:j] if drawn else None, neg_rows[0][i:j] if drawn else None,
                                     cand_rows[i:j] if k else None)]

        def scored(i: int, j: int, z: torch.Tensor):
            lay = QueryLayout(j - i, neg_dst=drawn, neg_src=drawn, k=k)
            p, n, c = lay.score(self._model.score, z)
            pos.append(p.cpu().numpy())
            if n is not None:
                neg.append(n.cpu().numpy())
            if c is not None:
                cand.append(c.cpu().numpy())

        self._take((src, dst, t) + (() if msg is None else (msg,)), progress, extra, scored, desc="score")
        cat = (lambda xs: np.concatenate(xs) if xs else None)
        return cat(pos) if pos else np.empty(0, dtype=np.float32), cat(neg), cat(cand)

    @torch.no_grad()
    def advance(self, events, progress: Optional[bool] = None) -> "Predictor":
        """Continue the memory with new events, in the run's batch size; the weights stay as they
        are (``speed update`` also trains them: :func:`speed.update`).

        Parameters
        ----------
        events : Events, path-like, or tuple ``(src, dst, t[, msg])``
            Events in time order, none older than :attr:`t_last`; ids are original ids (an
            :class:`Events` maps its compact ids through its ``node_ids``).  A path is read
            with :func:`speed.read_events` (unsorted files are refused with their line).
            Runs with edge features need ``msg`` (float, shape (n, msg_dim)).
        """
        return self._take(events, progress)

    def update(self, events, progress: Optional[bool] = None) -> "Predictor":
        """Deprecated name of :meth:`advance` (``update`` is ``speed update``, which trains)."""
        warnings.warn("Predictor.update is deprecated: use Predictor.advance (memory only; speed.update trains)",
                      DeprecationWarning, stacklevel=2)
        return self.advance(events, progress)

    @torch.no_grad()
    def _take(self, events, progress, extra=None, scored=None, desc: str = "update") -> "Predictor":
        """Admit ``events`` and step the model through them a batch at a time; ``extra(i, j, t)``
        adds queries to a batch's step and ``scored(i, j, z)`` reads its embeddings."""
        from ..._util import progress_bar

        s, d, tt, eid = self.intake.admit(events)
        n = s.size
        with progress_bar(n, desc, progress=progress) as bar:
            for i in range(0, n, self.batch_size):
                j = min(n, i + self.batch_size)
                z = self._model.step_events(s[i:j], d[i:j], tt[i:j], eid[i:j],
                                           extra=extra(i, j, tt[i:j]) if extra is not None else None)
                if scored is not None:
                    scored(i, j, z)
                bar.update(j - i)
        return self

# ----------------------------------------------------------------------- loading
def load_run(run, at: str = "end", device: str = "cpu") -> Predictor:
    """Load a run directory from ``speed train`` (single-process or PAC) as a :class:`Predictor`.

    Parameters
    ----------
    run : path-like
        The run directory (with ``best.json``).
    at : {"end", "test"}
        The node state after the whole log (to go on from), or at the start of the test
        period (to score it again as the run's evaluation did).
    device : str
        Where the model computes (``"cpu"``, ``"cuda"``, ``"cuda:N"``).

    Returns
    -------
    Predictor
    """
    if at not in AT:
        raise InputError(f"at must be one of {', '.join(AT)}, got {at!r}")
    saved, payload = open_checkpoint(run)
    return predictor_from(saved, payload, at, device, Path(run))


def open_checkpoint(run):
    """A run's best checkpoint and its predictor payload (InputErrors name what is missing)."""
    path = RunFolder(run).require_finished()
    saved = ckpt.load_checkpoint(path)
    payload = saved.extra.get("predictor") if isinstance(saved.extra, dict) else None
    if not payload or payload.get("format") != PAYLOAD_FORMAT:
        raise InputError("this checkpoint has no predictor state (written by an older version of speed); "
                         "train the run again to use it", path)
    return saved, payload


def predictor_from(saved, payload: Dict, at: str = "end", device: str = "cpu", run: Optional[Path] = None
                   ) -> Predictor:
    """A :class:`Predictor` from an opened checkpoint (:func:`open_checkpoint`).

    The predictor holds the checkpoint's arrays themselves (mapped copy-on-write, written in
    place as its memory moves on), so an opened checkpoint makes one predictor: open it again
    for another."""
    if payload.get("adopted"):
        raise ValueError("this opened checkpoint already made a predictor, which holds its arrays: open it again")
    check_device(device, auto=False)
    tune_allocator()  # updates step like training: keep MiB-sized blocks mapped
    path = None if run is None else RunFolder(run).best
    # the node rows come from the checkpoint's arrays, mapped copy-on-write and held as they are
    # (adopt): opening a run costs the rows a command touches, not every node's (a model built for
    # spec["num_nodes"] rows would first fill them all with zeros)
    spec = payload["spec"]
    table = saved.model.get("static.table")  # a static memory's table keeps its own rows (weights, not state)
    model = build_model(**{**spec, "num_nodes": 0,
                           "static_nodes": int(spec["num_nodes"] if table is None else table.shape[0])})
    model.state.set_edge_features(payload["edge_features"])
    if at == "end":
        model.state.snapshots.load_structures(payload["end"], adopt=True)
        model.load_weights_and_memories(saved.model, adopt=True)
        t_last = payload["t_end"]
    else:
        model.load_weights_and_memories(saved.model, adopt=True)
        if payload["test_start"] is None:
            raise InputError("this run kept no state at the start of its test period", path)
        model.state.snapshots.restore(payload["test_start"]["state"])
        t_last = payload["test_start"]["t"]
    payload["adopted"] = True
    model = model.to(torch.device(device))
    index = NodeIndex(payload["node_ids"], model.num_nodes, payload["num_src_ids"], sides=payload.get("is_src"))
    return Predictor(model, index, t_last, payload["next_eid"], payload["batch_size"], saved.config, run)
