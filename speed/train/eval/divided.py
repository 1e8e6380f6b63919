"""One evaluation step, its work divided among the processes that run it together.

Every process of an evaluation builds the same plan of each step (:mod:`speed.train.state.batch_plan`:
the queries, their neighbours, the memory keys and the pending events they apply; host work
that depends on the log, not on the weights), and cuts its own part out of it
(:meth:`DividedStep.cut`, host work on the plan and the owners alone): both can be done ahead of
the step, in a planning thread.  The work of the step is then divided:

* **memory keys**: a key is computed by the owner of its node (``owner``, one rank per node:
  :func:`speed.train.pac.sharded.owners`), which holds the node's stored rows and stores the
  key's state when the node is one of the batch's endpoints;
* **queries and scores**: each process embeds and scores a contiguous share of the batch's
  events (their sources, destinations, negatives and ranking candidates).

Two rounds a step, each in an ``all_to_all_single`` whose counts every process knows from the
plan: the stored rows a key needs from other owners (the other endpoints of the pending events
it applies, DyRep's neighbours), then the key states a share of queries needs from their owners.
Nothing is received twice or by a process that does not need it.  An owner stores its endpoints'
states as soon as it has computed them, so the next step's stored rows go out with this step's
key states (:meth:`DividedStep.merges`): one exchange a step, and one more at a pass's start.
The step's own queries are then embedded and scored in the next call, while its exchange
travels (:meth:`DividedStep.__call__`), and the sampler's gather for a plan is begun a step
before it is waited for (:class:`~speed.train.step.loader.PlanLoader`'s ``overlap``): a rank
meets the others once a step, and waits there only for a rank that is behind.

A key's state, a query's embedding and a pair's score do not depend on which others are
computed with them: the model places each row where it would be among the whole step's
(:class:`~speed.train.model.network.RowLayout`) and computes its attention slot by slot.  So the
figures are bit for bit those of one process doing all of it.  A world of one (every
single-process evaluation, and PAC with one rank) computes the plan as built, each row at its
own index (:meth:`DividedStep._whole`): no share cut out, nothing exchanged or remapped.

TIGE's dual memory also needs each endpoint's embedding at its latest event of the batch on the
endpoint's owner: one more all-reduce of those rows (zeros where a process has none).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch

from ..._util import places
from ..model.network import RowLayout
from ..model.queries import QueryLayout
from ..state.batch_plan import BatchPlan, DyRepPlan, to_device
from ..state.sharded import pack_rows, unpack_rows
from . import _cut_kernels as kernels


@dataclass
class QueryPlan:
    """The distinct queries a process embeds, their keys as positions in a key table (the
    fields :meth:`TemporalGNN.embed_keys` reads)."""

    uq_key: torch.Tensor
    uq_t: torch.Tensor
    nb_keys: torch.Tensor
    nb_key: torch.Tensor
    nb_feat: torch.Tensor
    nb_dt: torch.Tensor
    nb_mask: torch.Tensor
    #: each query's index among the whole step's distinct queries (int64 array or its RowLayout)
    orig_uq: Optional[object] = None
    #: each neighbour key's index among the whole step's (int64 array or its RowLayout)
    orig_nbk: Optional[object] = None

    _DEVICE = ("uq_key", "uq_t", "nb_keys", "nb_key", "nb_feat", "nb_dt", "nb_mask")

    def device_tensors(self) -> list:
        """The tensors that go to the device, in a fixed order (:meth:`with_device_tensors`)."""
        return [getattr(self, n) for n in self._DEVICE]

    def with_device_tensors(self, tensors) -> "QueryPlan":
        return QueryPlan(*tensors, orig_uq=self.orig_uq, orig_nbk=self.orig_nbk)

    def to(self, device) -> "QueryPlan":
        if torch.device(device).type == "cpu":
            return self
        return self.with_device_tensors(to_device(self.device_tensors(), torch.device(device)))


@dataclass
class Work:
    """What one process did and received in an evaluation pass (``metrics.json``)."""

    steps: int = 0
    keys: int = 0  # memory keys computed
    embeddings: int = 0  # distinct queries embedded
    scored: int = 0  # events scored
    rows_received: int = 0
    rows_sent: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    exchanges: int = 0  # collectives in the steps (the sampler's, in the plans, apart)
    seconds_collectives: float = 0.0
    seconds_total: float = 0.0  # in the steps (planning apart)
    # of seconds_total: embedding and scoring a step while the next step's exchange was under way
    seconds_deferred: float = 0.0
    seconds_planning: float = 0.0  # building the steps' plans (every process builds every plan)
    # of seconds_planning: the sampler's gathers of neighbour answers from their owners, waiting
    # for the other processes included (0 for a process alone)
    seconds_planning_gathers: float = 0.0
    seconds_dividing: float = 0.0  # cutting each process's part out of them (DividedStep.cut)
    plan_threads: int = 0  # threads that built the plans ahead of the steps (0: in the steps' thread)
    seconds_pass: float = 0.0  # the pass's wall seconds: its steps, and its plans where not built ahead
    copies_in: int = 0  # host-to-device copies a divided step makes (one packed copy each)
    copies_out: int = 0  # device-to-host copies (each one a wait for the device, on a GPU)
    planned_ahead: int = 0  # steps whose plans a planning thread built while earlier steps computed
    step_threads: int = 0  # torch's threads in the steps (the fewest, where a pass changed them)
    pacing: Optional[dict] = None  # the pass that measured planning ahead: what it saw and chose

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["seconds_compute"] = max(0.0, self.seconds_total - self.seconds_collectives)
        return d


@dataclass
class StepScores:
    """The scores of the events a process scored in one step (its share), on the host."""

    pos: Optional[torch.Tensor] = None
    neg: Optional[torch.Tensor] = None
    mrr: Optional[torch.Tensor] = None
    z_src: Optional[torch.Tensor] = None
    events: int = 0


@dataclass
class RowFetch:
    """Round 1 of a divided step, planned: the stored rows this process sends and where the
    rows it holds and receives go (:func:`._cut_kernels.row_fetch`)."""

    send_ids: np.ndarray  # int64 (s,): node ids of the rows sent, grouped by destination
    send_counts: list
    recv_counts: list
    own_ids: np.ndarray  # int64: the node ids of the rows read that this process holds
    own_at: torch.Tensor  # int64: their places among the rows read
    recv_at: torch.Tensor  # int64: the places of the received rows, in the order they arrive
    n: int  # rows read


@dataclass
class Cut:
    """A step's plan with one process's part cut out (:meth:`DividedStep.cut`): host work that
    depends on the log and the owners only, made ahead of the step by a planning thread."""

    plan: BatchPlan  # the whole step's (host)
    step: QueryLayout
    lo: int  # this process's share of the events: [lo, hi)
    hi: int
    keys: int  # memory keys it computes
    need: np.ndarray  # int64: the keys its share of queries reads (positions among the plan's)
    fetch: RowFetch
    kplan: BatchPlan  # computing its keys alone
    qplan: QueryPlan  # its share's distinct queries
    send_idx: np.ndarray  # round 2: its keys the others' shares read, by destination
    send_counts: list
    recv_counts: list
    here: np.ndarray  # positions among ``need`` of its own keys
    here_k: np.ndarray  # and among its computed keys
    recv_at: np.ndarray  # positions among ``need`` of the received key states, as they arrive
    z_at: np.ndarray  # each of its share's query positions among its distinct queries
    ob_node: np.ndarray  # int64: the batch's endpoints it owns
    ob_at: np.ndarray  # and their keys among its computed ones
    pairs: RowLayout  # its share's pairs, and candidates, at their places in the whole step
    cands: Optional[RowLayout]


def shares(n: int, size: int) -> np.ndarray:
    """Bounds of ``size`` contiguous shares of ``n`` events: share ``r`` is ``[b[r], b[r+1])``."""
    return np.array([n * r // size for r in range(size + 1)], dtype=np.int64)


def distinct(values: np.ndarray, bound: int) -> np.ndarray:
    """``np.unique(values)`` of integers in ``[0, bound)``, by marking them: one pass over
    ``values`` and one over ``bound`` flags, where a sort costs ``n log n`` (a cut's arrays are
    positions in its plan's, so ``bound`` is a plan's size).  int64 (u,), ascending."""
    seen = np.zeros(max(int(bound), 0), dtype=bool)
    seen[values] = True
    return np.flatnonzero(seen)


class DividedStep:
    """Run evaluation steps with the work divided among the processes of ``world``.

    Parameters
    ----------
    world : World, optional
        The processes (:class:`speed.train.world.World`); None: this process alone.
    owner : int ndarray, shape (num_nodes,), optional
        Each node's owner (whose memory rows it holds); None: this process holds every row.
    """

    def __init__(self, world=None, owner: Optional[np.ndarray] = None):
        self.world = world
        self.rank = 0 if world is None else world.rank
        self.size = 1 if world is None else world.size
        self.owner = owner
        self.work = Work()
        #: a world of one's captured evaluation (:class:`~speed.train.eval.captured.CapturedEval`),
        #: which replays the steps whose plans it padded; None: every step eager
        self.captured = None
        #: ``(cut, states, last_update)``: the rows the next step reads from other owners,
        #: received with this step's key states (:meth:`merges`); None: it fetches them itself
        self._fetched = None
        #: the last step's embedding and scoring, left to run while the next step's exchange is
        #: under way (:meth:`flush`); None: nothing left
        self._deferred = None

    def merges(self, model) -> bool:
        """Whether a step's exchange of key states also carries the next step's stored rows
        (round 1 of the next step within round 2 of this one: one collective a step, not two).
        That needs the batch stored before the exchange, so a component that keeps the batch's
        embeddings (TIGE), which come after it, keeps both rounds."""
        return self.size > 1 and not model.state.keeps_embeddings

    def flush(self) -> List[StepScores]:
        """The scores of a step whose embedding was left for the next one (see :meth:`__call__`),
        computed now: ``[scores]``, or ``[]`` where none was left."""
        finish, self._deferred = self._deferred, None
        return [finish()] if finish is not None else []

    # ------------------------------------------------------------------ the cut
    def _owner_of(self, nodes: np.ndarray) -> np.ndarray:
        if self.owner is None or self.size == 1:
            return np.zeros(nodes.shape, dtype=np.int64)
        return self.owner[nodes].astype(np.int64)

    @staticmethod
    def _dyrep_of(plan, pe: np.ndarray) -> np.ndarray:
        if plan.dyrep is None or pe.size == 0:
            return np.empty(0, dtype=np.int64)
        return distinct(plan.dyrep.inv.numpy()[pe], plan.dyrep.own_row.shape[0])

    @staticmethod
    def _dyrep_reads(plan, key_owner: np.ndarray, du: np.ndarray):
        """DyRep's stored-row reads (positions among ``plan.rows``): ``(rows, req, row)`` -- the
        rows this process's keys read for their queries ``du`` (the pending events' other
        endpoints) and those queries' neighbours, and the ``(process, row)`` pairs of every
        process's keys' such reads (empty for the other models)."""
        empty = np.empty(0, dtype=np.int64)
        d = plan.dyrep
        if d is None:
            return empty, empty, empty
        own_row, nb_row, nb_mask = d.own_row.numpy(), d.nb_row.numpy(), d.nb_mask.numpy()
        rows = np.concatenate([own_row[du], nb_row[du][nb_mask[du]]]) if du.size else empty
        agg_sel = plan.agg_sel.numpy()
        if plan.agg_identity:  # pending event j is key agg_sel[j]'s
            pe, pe_req = np.arange(agg_sel.size), key_owner[agg_sel]
        else:
            pe, pe_req = plan.agg_entry.numpy(), key_owner[agg_sel[plan.agg_local.numpy()]]
        if pe.size == 0:
            return rows, empty, empty
        inv = d.inv.numpy()[pe]
        mask = nb_mask[inv]
        req = np.concatenate([pe_req, np.broadcast_to(pe_req[:, None], mask.shape)[mask]])
        return rows, req.astype(np.int64), np.concatenate([own_row[inv], nb_row[inv][mask]]).astype(np.int64)

    def _key_plan(self, plan: BatchPlan, pe: np.ndarray, sel: np.ndarray, du: np.ndarray, rows: np.ndarray,
                  row_at: np.ndarray, key_row, pe_row, pe_other_row, agg_entry, agg_local, agg_sel) -> BatchPlan:
        """The plan of computing this process's keys alone, its rows the positions ``rows`` of
        ``plan.rows`` (the kernels' remapped indices: :func:`._cut_kernels.key_plan`)."""
        dyrep = None
        if plan.dyrep is not None and du.size:
            d = plan.dyrep
            nb_row = d.nb_row.numpy()[du]
            mask = d.nb_mask.numpy()[du]
            nb = np.where(mask, row_at[nb_row], 0)
            t_du = torch.from_numpy(du)
            dyrep = DyRepPlan(inv=torch.from_numpy(places(du, d.own_row.shape[0])[d.inv.numpy()[pe]]),
                              own_row=torch.from_numpy(row_at[d.own_row.numpy()[du]]), t=d.t.index_select(0, t_du),
                              nb_row=torch.from_numpy(nb.astype(np.int64)), nb_mask=d.nb_mask.index_select(0, t_du),
                              nb_dt=d.nb_dt.index_select(0, t_du), nb_feat=d.nb_feat.index_select(0, t_du),
                              orig=RowLayout(du))
        t_pe = torch.from_numpy(pe)
        empty = torch.empty(0, dtype=torch.long)
        return BatchPlan(
            q_inv=empty, uq_t=torch.empty(0, dtype=torch.float64), uq_key=empty, nb_keys=empty,
            nb_key=torch.empty(0, 0, dtype=torch.long), nb_mask=torch.empty(0, 0, dtype=torch.bool),
            nb_dt=torch.empty(0, 0, dtype=torch.float64), nb_feat=torch.empty(0, 0, 0),
            rows=plan.rows.index_select(0, torch.from_numpy(rows)), key_row=torch.from_numpy(key_row),
            pe_row=torch.from_numpy(pe_row), pe_other_row=torch.from_numpy(pe_other_row),
            pe_node=plan.pe_node.index_select(0, t_pe), pe_other=plan.pe_other.index_select(0, t_pe),
            pe_t=plan.pe_t.index_select(0, t_pe), pe_eid=plan.pe_eid.index_select(0, t_pe),
            pe_feat=plan.pe_feat.index_select(0, t_pe), agg_entry=torch.from_numpy(agg_entry),
            agg_local=torch.from_numpy(agg_local), agg_sel=torch.from_numpy(agg_sel), ob_node=empty, ob_key=empty,
            ob_latest=empty, ev_eid=empty, ev_src=empty, ev_dst=empty, dyrep=dyrep, agg_identity=plan.agg_identity,
            orig_pe=RowLayout(pe), orig_sel=RowLayout(sel), orig_rows=RowLayout(rows))

    def cut(self, plan: BatchPlan, step: QueryLayout) -> "Cut":
        """This process's part of the step planned as ``plan`` (its queries laid out by
        ``step``): the keys it computes and the rows they read, its share of the queries, what
        it sends and receives in both exchanges, and its endpoints.  Host work on the plan and
        the owners alone -- no state, no weights, no collective -- so a planning thread does it
        ahead of the step (:func:`~speed.train.eval.evaluator.stream_scores` hands it to the
        loader); :meth:`__call__` runs the step.  The set operations are five numba kernels
        (:mod:`._cut_kernels`; about 450 numpy calls a step before).  Its seconds go to
        ``work.seconds_dividing``."""
        t0 = time.perf_counter()
        me, size = self.rank, self.size
        row_nodes = plan.rows.numpy()
        row_owner = self._owner_of(row_nodes)
        key_row = plan.key_row.numpy()
        key_owner = row_owner[key_row]
        agg = (plan.agg_sel.numpy(), plan.agg_local.numpy(), plan.agg_entry.numpy(), bool(plan.agg_identity))
        pe_row, pe_other_row = plan.pe_row.numpy(), plan.pe_other_row.numpy()
        n_pe = plan.pe_t.shape[0]
        # the keys I compute, the pending events they apply and the stored rows they read
        keys, pe, sel = kernels.owned_keys(me, key_owner, *agg, n_pe)
        du = self._dyrep_of(plan, pe)
        dy_rows, dy_req, dy_row = self._dyrep_reads(plan, key_owner, du)
        rows, row_at, *remapped, kpos = kernels.key_plan(keys, pe, sel, key_row, pe_row, pe_other_row, dy_rows, *agg,
                                                         row_nodes.size, key_row.size, n_pe)
        # round 1: the rows of mine the others' keys read, and where mine come from
        send_ids, send_counts, recv_counts, own_ids, own_at, recv_at = kernels.row_fetch(
            me, size, row_nodes, row_owner, key_owner, key_row, pe_row, pe_other_row, *agg, dy_req, dy_row, rows)
        fetch = RowFetch(send_ids=send_ids, send_counts=send_counts.tolist(), recv_counts=recv_counts.tolist(),
                         own_ids=own_ids, own_at=torch.from_numpy(own_at), recv_at=torch.from_numpy(recv_at),
                         n=int(rows.size))
        kplan = self._key_plan(plan, pe, sel, du, rows, row_at, *remapped)
        # my share of the events (shares()), its distinct queries and the key states they read;
        # round 2: the key states of mine the others' shares read
        m, k = step.m, step.k
        lo, hi = m * me // size, m * (me + 1) // size
        q = (plan.q_inv.numpy(), plan.uq_key.numpy(), plan.nb_keys.numpy(), plan.nb_key.numpy(), plan.nb_mask.numpy())
        (uq, z_at, need, here, here_k, key_recv_at, key_recv_counts, uq_key, nb_keys, nb_key, orig_nbk, ob_mine,
         ob_at) = kernels.query_share(me, size, m, step.groups, k, *q, key_owner, kpos, plan.ob_key.numpy())
        send_idx, key_send_counts = kernels.key_sends(me, size, m, step.groups, k, *q, key_owner, kpos)
        t_uq = torch.from_numpy(uq)
        qplan = QueryPlan(uq_key=torch.from_numpy(uq_key), uq_t=plan.uq_t.index_select(0, t_uq),
                          nb_keys=torch.from_numpy(nb_keys), nb_key=torch.from_numpy(nb_key),
                          nb_feat=plan.nb_feat.index_select(0, t_uq), nb_dt=plan.nb_dt.index_select(0, t_uq),
                          nb_mask=plan.nb_mask.index_select(0, t_uq), orig_uq=RowLayout(uq),
                          orig_nbk=RowLayout(orig_nbk))
        out = Cut(plan=plan, step=step, lo=lo, hi=hi, keys=int(keys.size), need=need, fetch=fetch, kplan=kplan,
                  qplan=qplan, send_idx=send_idx, send_counts=key_send_counts.tolist(),
                  recv_counts=key_recv_counts.tolist(), here=here, here_k=here_k, recv_at=key_recv_at, z_at=z_at,
                  ob_node=plan.ob_node.numpy()[ob_mine], ob_at=ob_at, pairs=RowLayout.contiguous(lo, hi - lo),
                  cands=RowLayout.contiguous(lo * k, (hi - lo) * k) if k else None)
        self.work.seconds_dividing += time.perf_counter() - t0
        return out

    # ------------------------------------------------------------------ the step
    @torch.no_grad()
    def __call__(self, model, plan, step: QueryLayout, collect: bool = False, score: bool = True,
                 after=None) -> List[StepScores]:
        """Run one evaluation step of ``model`` on the host plan ``plan`` (its queries laid out
        by ``step``), or on the :class:`Cut` of it made ahead, and take the batch into the
        state.  ``after``: the next step's :class:`Cut`, when every process runs one
        (:meth:`merges`: its rows then travel with this step's key states).

        Returns the scores of this process's shares of the events, of the steps finished in
        this call, in step order.  Where this step's exchange also carries the next step's rows,
        its batch is stored before the exchange and nothing after the exchange changes the
        state, so the step's embedding and scoring are left for the next call, which runs them
        while its own exchange is under way (gloo moves the rows meanwhile, and a rank does not
        wait for the others between its keys and its queries): such a call returns the previous
        step's scores, and :meth:`flush` gives the last ones.  The figures are the same: a
        query's embedding reads the key states computed and received for its step only."""
        if self.size == 1:
            return self.flush() + [self._whole(model, plan, step, collect, score)]
        cut = plan if isinstance(plan, Cut) else self.cut(plan, step)
        plan, step = cut.plan, cut.step
        t_start = time.perf_counter()
        work = self.work
        net, state, dev = model.net, model.state, model.device
        # round 1, host to host: the stored rows my keys read, mine and the others' from their
        # owners (received with the last step's key states, where it carried them)
        fetched, self._fetched = self._fetched, None
        if fetched is not None and fetched[0] is cut:
            s_rows, l_rows = self._place_rows(cut.fetch, state, fetched[1], fetched[2])
        else:
            s_rows, l_rows = self._fetch_rows(cut.fetch, state)
        work.keys += cut.keys
        need = cut.need
        # ---- one copy to the device of everything the step reads there (a GPU does not wait for
        # it); pageable copies, one per index, would each wait for the device's queue to drain
        static_ids = plan.rows[plan.key_row[torch.from_numpy(need)]] if net.static is not None else None
        (kdev, s_dev, l_dev, qdev, static_ids, send_t, here_t, here_k, recv_t, z_at, ob_at, pairs,
         cands) = self._to_device(dev, cut.kplan, s_rows, l_rows, cut.qplan, static_ids, cut.send_idx, cut.here,
                                  cut.here_k, cut.recv_at, cut.z_at, cut.ob_at, cut.pairs, cut.cands)
        work.embeddings += int(cut.qplan.uq_key.shape[0])
        states, lasts = net.key_states(kdev, (s_dev, l_dev), state.message_inputs(kdev), invariant=True)

        # ---- one copy back: the key states the others' shares read, and those my endpoints store
        out_rows = pack_rows(torch.cat([states.index_select(0, send_t), states.index_select(0, ob_at)]),
                             torch.cat([lasts.index_select(0, send_t), lasts.index_select(0, ob_at)]))
        work.copies_out += 1
        out_rows = out_rows.cpu()
        ns = int(cut.send_idx.size)
        lo, hi = cut.lo, cut.hi
        m = hi - lo
        stored = after is not None and self.merges(model)
        if stored:
            # the batch is stored now (its embeddings are not needed for it), so that the next
            # step's rows, read after it, go out with this step's key states; the step before
            # is embedded and scored while they travel
            s_ob, l_ob = unpack_rows(out_rows[ns:])
            self._absorb(model, plan, step.m, lo, hi, None, torch.from_numpy(cut.ob_node), s_ob, l_ob)
            exchanging = self._key_states_and_rows(out_rows[:ns], cut, after, state)
            done = self.flush()
            got = exchanging()
        else:
            done = self.flush()
            # round 2, host to host: the key states my share reads, from their owners
            t0 = time.perf_counter()
            got = self.world.host_exchange(out_rows[:ns], cut.send_counts, cut.recv_counts)
            self._count(got.shape[0], ns, got.shape[1] * 4, time.perf_counter() - t0)
        (got,) = self._to_device(dev, got)
        s_in, l_in = unpack_rows(got)
        t_states = states.new_empty((need.size, states.shape[1]))
        t_lasts = lasts.new_empty((need.size,))
        # index_copy_, not t[idx] = ...: the same rows, without the general index kernel's cost
        t_states.index_copy_(0, here_t, states.index_select(0, here_k)).index_copy_(0, recv_t, s_in)
        t_lasts.index_copy_(0, here_t, lasts.index_select(0, here_k)).index_copy_(0, recv_t, l_in)
        work.scored += m
        work.steps += 1

        def finish():
            """Embed and score my share (from the key states above alone)."""
            t0 = time.perf_counter()
            static = net.key_static(static_ids) if static_ids is not None else None
            z = net.embed_keys(qdev, t_states, t_lasts, static, invariant=True).index_select(0, z_at)
            out = StepScores(events=m)
            share = step.share(m)  # this share's queries, laid out as a step's
            if score and m:
                # each pair at its event's place in the batch, each candidate at its own
                out.pos, out.neg, out.mrr = share.score(net.score, z, pairs, cands)
            if collect and m:
                out.z_src = z[share.src]
            if not stored:
                # ---- take the batch in: each owner stores its endpoints' states (on the host, as copied)
                s_ob, l_ob = unpack_rows(out_rows[ns:])
                self._absorb(model, plan, step.m, lo, hi, z, torch.from_numpy(cut.ob_node), s_ob, l_ob)
            if stored:  # (run inside the next step's call, whose seconds include these)
                work.seconds_deferred += time.perf_counter() - t0
            return out

        if stored:
            self._deferred = finish
        else:
            done.append(finish())
        work.seconds_total += time.perf_counter() - t_start
        return done

    def _whole(self, model, plan: BatchPlan, step: QueryLayout, collect: bool, score: bool) -> StepScores:
        """The step of a world of one: every key and every query is this process's, so the plan
        is computed as built -- no share cut out of it, nothing exchanged, no index remapped --
        row by row as a divided step's rows are (each at its own index, :meth:`RowLayout.leading`),
        which gives every figure the bits of the divided step.  The host work left is the
        plan's (built ahead by the loader) and the dispatch of the forward and the state writes;
        a plan padded for a captured evaluation (``plan.packed``, :mod:`.captured`) is replayed."""
        t_start = time.perf_counter()
        work, n = self.work, step.m
        out = StepScores(events=n)
        if plan.packed is not None and self.captured is not None:
            out.pos, out.neg = self.captured.run(model, plan, step, score)
        else:
            if plan.q_inv.device != model.device:  # (the loader moves it, in its thread, where it can)
                plan = plan.to(model.device)
            out.pos, out.neg, out.mrr, z = whole_step(model, plan, step, score)
            if collect and n:
                out.z_src = z[step.src]
        work.keys += int(plan.key_row.shape[0])  # (a padded plan's: what the device computed)
        work.embeddings += int(plan.uq_key.shape[0])
        work.scored += n
        work.steps += 1
        work.seconds_total += time.perf_counter() - t_start
        return out

    # ------------------------------------------------------------------ exchanges
    def _fetch_rows(self, fetch: "RowFetch", state):
        """Round 1: every process's key rows, from their owners (one ``all_to_all_single``):
        ``(states, last_update)`` of the rows a :class:`Cut`'s key plan reads, in its order."""
        s_send, l_send = state.held_rows(fetch.send_ids)
        t0 = time.perf_counter()
        got = self.world.host_exchange(pack_rows(s_send, l_send), fetch.send_counts, fetch.recv_counts)
        self._count(got.shape[0], fetch.send_ids.size, got.shape[1] * 4, time.perf_counter() - t0)
        return self._place_rows(fetch, state, *unpack_rows(got))

    def _key_states_and_rows(self, states_out: torch.Tensor, cut: "Cut", after: "Cut", state) -> torch.Tensor:
        """Round 2 of ``cut``'s step and round 1 of the next (``after``) in one
        ``all_to_all_single``: to each process, the key states it reads of mine, then the stored
        rows its next keys read of mine (read now: this step's batch is stored).  Begins it and
        returns a callable that waits for it and gives the key states received, in round 2's
        order; the rows wait for the next step (``_fetched``)."""
        size, fetch = self.size, after.fetch
        rows_out = pack_rows(*state.held_rows(fetch.send_ids))
        s2, s1 = np.cumsum([0] + list(cut.send_counts)), np.cumsum([0] + list(fetch.send_counts))
        send = torch.cat([part for r in range(size)
                          for part in (states_out[s2[r]:s2[r + 1]], rows_out[s1[r]:s1[r + 1]])])
        counts2, counts1 = list(cut.recv_counts), list(fetch.recv_counts)
        t0 = time.perf_counter()
        exchange = self.world.host_exchange_start(send, [int(s2[r + 1] - s2[r] + s1[r + 1] - s1[r])
                                                         for r in range(size)],
                                                  [a + b for a, b in zip(counts2, counts1)])
        posted = time.perf_counter() - t0

        def received() -> torch.Tensor:
            t1 = time.perf_counter()
            (got,) = exchange.wait()
            self._count(got.shape[0], send.shape[0], got.shape[1] * 4, posted + time.perf_counter() - t1)
            keys, rows, at = [], [], 0
            for r in range(size):  # from each process: its key states, then its rows
                keys.append(got[at:at + counts2[r]])
                rows.append(got[at + counts2[r]:at + counts2[r] + counts1[r]])
                at += counts2[r] + counts1[r]
            self._fetched = (after, *unpack_rows(torch.cat(rows)))
            return torch.cat(keys)

        return received

    @staticmethod
    def _place_rows(fetch: "RowFetch", state, s_in: torch.Tensor, l_in: torch.Tensor):
        """The rows a key plan reads, in its order: those this process holds, read now, and
        those received from the other owners (``s_in``, ``l_in``, as they arrived)."""
        s_own, l_own = state.held_rows(fetch.own_ids)
        s_all = torch.empty(fetch.n, s_own.shape[1], dtype=torch.float32)
        l_all = torch.empty(fetch.n, dtype=torch.float64)
        s_all.index_copy_(0, fetch.own_at, s_own).index_copy_(0, fetch.recv_at, s_in)
        l_all.index_copy_(0, fetch.own_at, l_own).index_copy_(0, fetch.recv_at, l_in)
        return s_all, l_all

    def _to_device(self, dev, *items):
        """``items`` on ``dev`` in one copy (:func:`~speed.train.state.batch_plan.to_device`): host
        tensors, int64 arrays, plans (:class:`BatchPlan`, :class:`QueryPlan`; their row layouts
        become :class:`RowLayout` objects whose positions travel too), row layouts, or None."""
        flat, spans = [], []
        for it in items:
            start = len(flat)
            if isinstance(it, np.ndarray):
                it = torch.from_numpy(np.ascontiguousarray(it))
            if isinstance(it, (BatchPlan, QueryPlan)):
                flat += it.device_tensors()
                for lay in _layouts_of(it):
                    flat.append(lay.host_positions())
            elif isinstance(it, RowLayout):
                flat.append(it.host_positions())
            elif it is not None:
                flat.append(it)
            spans.append((it, start, len(flat)))
        real = [i for i, t in enumerate(flat) if t is not None]
        moved = [None] * len(flat)
        if real:
            self.work.copies_in += 1
            for i, t in zip(real, to_device([flat[i] for i in real], torch.device(dev))):
                moved[i] = t
        out = []
        for it, start, stop in spans:
            got = moved[start:stop]
            if isinstance(it, (BatchPlan, QueryPlan)):
                lays = _layouts_of(it)
                body = got[:len(got) - len(lays)]
                for lay, pos in zip(lays, got[len(got) - len(lays):]):
                    lay.hold(dev, pos)
                out.append(it.with_device_tensors(body))
            elif isinstance(it, RowLayout):
                it.hold(dev, got[0])
                out.append(it)
            else:
                out.append(got[0] if got else None)
        return out

    def _count(self, rows_in: int, rows_out: int, row_bytes: int, seconds: float) -> None:
        work = self.work
        work.exchanges += 1
        work.rows_received += int(rows_in)
        work.rows_sent += int(rows_out)
        work.bytes_received += int(rows_in) * int(row_bytes)
        work.bytes_sent += int(rows_out) * int(row_bytes)
        work.seconds_collectives += seconds

    # ------------------------------------------------------------------ absorb
    def _absorb(self, model, plan, n, lo, hi, z, nodes, states, lasts) -> None:
        """The batch's endpoints store their memory as seen at its last time, each on its owner
        (``nodes``, this process's endpoints, and their ``states``/``lasts`` on the host); a
        component that keeps embeddings (TIGE) gets each endpoint's at its latest event."""
        state, dev = model.state, model.device
        ob_node = plan.ob_node.numpy()
        if ob_node.size == 0:
            return
        z_ob = None
        if state.keeps_embeddings:
            # each endpoint's latest query is among the batch's first 2n (sources, destinations)
            latest = plan.ob_latest.numpy()
            event = latest % n
            here = np.flatnonzero((event >= lo) & (event < hi))
            m = hi - lo
            row = np.where(latest[here] < n, latest[here] - lo, m + latest[here] - n - lo)
            z_ob = torch.zeros(ob_node.size, z.shape[1], dtype=z.dtype, device=z.device)
            if here.size:
                z_ob[torch.from_numpy(here).to(z.device)] = z.index_select(0, torch.from_numpy(row).to(z.device))
            if self.size > 1:  # the rows of the others' shares (zeros here, a sum is exact)
                t0 = time.perf_counter()
                z_ob = self.world.all_reduce(z_ob) if z_ob.device.type != "cpu" else self.world.host_all_reduce(z_ob)
                # (each of its rows reaches every other rank; it receives the others')
                self._count(ob_node.size - here.size, here.size * (self.size - 1), z.shape[1] * 4,
                            time.perf_counter() - t0)
        # (a component reads the plan beside the embeddings: on their device)
        state.observe(plan.to(dev) if z_ob is not None else plan, nodes, states, lasts, z_ob)


def whole_step(model, plan: BatchPlan, step: QueryLayout, score: bool = True):
    """One evaluation step of a world of one on the device plan ``plan``: the key states, the
    queries' embeddings, the scores (each pair at its event's place, each candidate at its own)
    and the batch taken into the state.  Returns ``(pos, neg, mrr, z)`` (None where not scored;
    ``z``: every query's embedding).  What :class:`DividedStep` runs for one process, and what a
    captured evaluation records (:class:`~speed.train.eval.captured.CapturedEval`)."""
    net, state = model.net, model.state
    states, lasts = net.key_states(plan, state.read(plan), state.message_inputs(plan), invariant=True)
    static = net.key_static(plan.rows.index_select(0, plan.key_row)) if net.static is not None else None
    z = net.embed_keys(plan, states, lasts, static, invariant=True).index_select(0, plan.q_inv)
    n = step.m
    pos = neg = mrr = None
    if score and n:
        k = step.k
        pos, neg, mrr = step.score(net.score, z, RowLayout.leading(n), RowLayout.leading(n * k) if k else None)
    model.absorb(plan, states, lasts, z)
    return pos, neg, mrr, z


def _layouts_of(plan) -> list:
    """The row layouts a divided plan carries (:class:`RowLayout` objects), in a fixed order."""
    if isinstance(plan, QueryPlan):
        names = [plan.orig_uq, plan.orig_nbk]
    else:
        names = [plan.orig_pe, plan.orig_sel, plan.orig_rows] + ([plan.dyrep.orig] if plan.dyrep is not None else [])
    return [x for x in names if isinstance(x, RowLayout)]


def gather_scores(world, parts: List[StepScores], sizes: List[int]):
    """Every process's step scores, in event order (each step's shares in rank order), on every
    process: ``(pos, neg, mrr, z_src)`` numpy arrays (None where nothing was scored)."""
    names = ("pos", "neg", "mrr", "z_src")
    mine = {name: [getattr(p, name) for p in parts if getattr(p, name) is not None] for name in names}
    local = {name: (torch.cat([x.detach().cpu() for x in v]) if v else None) for name, v in mine.items()}
    if world is None or world.size == 1:
        return tuple(None if local[nm] is None else local[nm].numpy() for nm in names)
    out = []
    size = world.size
    for name in names:
        have = local[name] is not None
        if not any(world.objects(have)):
            out.append(None)
            continue
        x = local[name]
        if x is None:
            width = None
        else:
            width = tuple(x.shape[1:])
        widths = [w_ for w_ in world.objects(width) if w_ is not None]
        if x is None:
            x = torch.zeros((0,) + widths[0], dtype=torch.float32)
        got = world.host_all_gather_rows(x.float())
        # interleave: step s of rank r has shares(sizes[s], size)[r] rows
        offsets = [0] * size
        pieces = []
        for n in sizes:
            b = shares(n, size)
            for r in range(size):
                c = int(b[r + 1] - b[r])
                pieces.append(got[r][offsets[r]:offsets[r] + c])
                offsets[r] += c
        out.append(torch.cat(pieces).numpy() if pieces else None)
    return tuple(out)
