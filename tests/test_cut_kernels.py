"""The cut of a divided evaluation step (:meth:`speed.train.eval.divided.DividedStep.cut`), in
numba kernels (:mod:`speed.train.eval._cut_kernels`), against the numpy it replaced: the same
arrays, in the same order, on real plans of every model (with and without ranking candidates)
for 2 and 3 processes, every rank's.  The evaluations of tests/test_sharded_eval.py check the
cut bit for bit end to end."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import speed
from speed._util import places
from speed.train.eval.divided import Cut, DividedStep, QueryPlan, RowFetch, distinct, shares
from speed.train.model.network import RowLayout, build_model
from speed.train.model.queries import QueryLayout
from speed.train.state.batch_plan import BatchPlan, DyRepPlan
from speed.train.step.engine import Batches
from speed.train.step.loader import EventStream, PlanLoader
from speed.train.step.negatives import RandomNegatives


class NumpyCut(DividedStep):
    """The cut as it was in numpy (about 450 calls a step): the reference."""

    def _owner_of(self, nodes: np.ndarray) -> np.ndarray:
        if self.owner is None or self.size == 1:
            return np.zeros(nodes.shape, dtype=np.int64)
        return self.owner[nodes].astype(np.int64)

    @staticmethod
    def _pending_of_keys(plan, key_mask: np.ndarray):
        """The pending events the keys of ``key_mask`` apply: ``(pe, sel)`` -- positions among the
        plan's pending events and among ``agg_sel`` (its keys with pending events)."""
        chosen = key_mask[plan.agg_sel.numpy()]  # of the keys with pending events
        sel = np.flatnonzero(chosen)
        if plan.agg_identity:
            return sel, sel
        entries = np.flatnonzero(chosen[plan.agg_local.numpy()])
        return distinct(plan.agg_entry.numpy()[entries], plan.pe_t.shape[0]), sel

    @staticmethod
    def _rows_of(plan, keys: np.ndarray, pe: np.ndarray, du: np.ndarray) -> np.ndarray:
        """Positions among ``plan.rows`` that computing ``keys`` (applying pending events ``pe``,
        DyRep's queries ``du``) reads, ascending."""
        parts = [plan.key_row.numpy()[keys], plan.pe_row.numpy()[pe], plan.pe_other_row.numpy()[pe]]
        if plan.dyrep is not None and du.size:
            d = plan.dyrep
            parts += [d.own_row.numpy()[du], d.nb_row.numpy()[du][d.nb_mask.numpy()[du]]]
        return distinct(np.concatenate(parts), plan.rows.shape[0])

    @staticmethod
    def _dyrep_of(plan, pe: np.ndarray) -> np.ndarray:
        if plan.dyrep is None or pe.size == 0:
            return np.empty(0, dtype=np.int64)
        return distinct(plan.dyrep.inv.numpy()[pe], plan.dyrep.own_row.shape[0])

    def _key_plan(self, plan: BatchPlan, keys: np.ndarray, pe: np.ndarray, sel: np.ndarray, du: np.ndarray,
                  rows: np.ndarray) -> BatchPlan:
        """The plan of computing ``keys`` alone, its rows the positions ``rows`` of ``plan.rows``."""
        row_at = places(rows, plan.rows.shape[0])
        remap_row = lambda x: torch.from_numpy(row_at[x])  # noqa: E731
        kpos = places(keys, plan.key_row.shape[0])
        agg_sel = plan.agg_sel.numpy()
        if plan.agg_identity:
            agg_entry = agg_local = torch.arange(sel.size)
        else:
            local = plan.agg_local.numpy()
            sel_at = places(sel, agg_sel.size)
            entries = np.flatnonzero(sel_at[local] >= 0)
            agg_local = torch.from_numpy(sel_at[local[entries]])
            agg_entry = torch.from_numpy(places(pe, plan.pe_t.shape[0])[plan.agg_entry.numpy()[entries]])
        dyrep = None
        if plan.dyrep is not None and du.size:
            d = plan.dyrep
            nb_row = d.nb_row.numpy()[du]
            mask = d.nb_mask.numpy()[du]
            nb = np.where(mask, row_at[nb_row], 0)
            t_du = torch.from_numpy(du)
            dyrep = DyRepPlan(inv=torch.from_numpy(places(du, d.own_row.shape[0])[d.inv.numpy()[pe]]),
                              own_row=remap_row(d.own_row.numpy()[du]), t=d.t.index_select(0, t_du),
                              nb_row=torch.from_numpy(nb.astype(np.int64)), nb_mask=d.nb_mask.index_select(0, t_du),
                              nb_dt=d.nb_dt.index_select(0, t_du), nb_feat=d.nb_feat.index_select(0, t_du),
                              orig=RowLayout(du))
        t_pe = torch.from_numpy(pe)
        empty = torch.empty(0, dtype=torch.long)
        return BatchPlan(
            q_inv=empty, uq_t=torch.empty(0, dtype=torch.float64), uq_key=empty, nb_keys=empty,
            nb_key=torch.empty(0, 0, dtype=torch.long), nb_mask=torch.empty(0, 0, dtype=torch.bool),
            nb_dt=torch.empty(0, 0, dtype=torch.float64), nb_feat=torch.empty(0, 0, 0),
            rows=plan.rows.index_select(0, torch.from_numpy(rows)), key_row=remap_row(plan.key_row.numpy()[keys]),
            pe_row=remap_row(plan.pe_row.numpy()[pe]), pe_other_row=remap_row(plan.pe_other_row.numpy()[pe]),
            pe_node=plan.pe_node.index_select(0, t_pe), pe_other=plan.pe_other.index_select(0, t_pe),
            pe_t=plan.pe_t.index_select(0, t_pe), pe_eid=plan.pe_eid.index_select(0, t_pe),
            pe_feat=plan.pe_feat.index_select(0, t_pe), agg_entry=agg_entry, agg_local=agg_local,
            agg_sel=torch.from_numpy(kpos[agg_sel[sel]]), ob_node=empty, ob_key=empty, ob_latest=empty,
            ev_eid=empty, ev_src=empty, ev_dst=empty, dyrep=dyrep, agg_identity=plan.agg_identity,
            orig_pe=RowLayout(pe), orig_sel=RowLayout(sel), orig_rows=RowLayout(rows))

    @staticmethod
    def _keys_of_queries(plan, uq: np.ndarray) -> np.ndarray:
        """The keys the distinct queries ``uq`` read (their own and their neighbours'), ascending."""
        own = plan.uq_key.numpy()[uq]
        if plan.nb_mask.shape[1]:
            own = np.concatenate([own, plan.nb_keys.numpy()[plan.nb_key.numpy()[uq][plan.nb_mask.numpy()[uq]]]])
        return distinct(own, plan.key_row.shape[0])

    # ------------------------------------------------------------------ the cut
    def cut(self, plan: BatchPlan, step: QueryLayout) -> "Cut":
        """This process's part of the step planned as ``plan`` (its queries laid out by
        ``step``): the keys it computes and the rows they read, its share of the queries, what
        it sends and receives in both exchanges, and its endpoints.  Host work on the plan and
        the owners alone -- no state, no weights, no collective -- so a planning thread does it
        ahead of the step (:func:`~speed.train.eval.evaluator.stream_scores` hands it to the
        loader); :meth:`__call__` runs the step.  Its seconds go to ``work.seconds_dividing``."""
        t0 = time.perf_counter()
        me, size = self.rank, self.size
        row_nodes = plan.rows.numpy()
        key_node = row_nodes[plan.key_row.numpy()]
        key_owner = self._owner_of(key_node)
        mine = key_owner == me
        keys = np.flatnonzero(mine)
        pe, sel = self._pending_of_keys(plan, mine)
        du = self._dyrep_of(plan, pe)
        rows = self._rows_of(plan, keys, pe, du)
        fetch = self._row_fetch(plan, row_nodes, rows, key_owner)
        kplan = self._key_plan(plan, keys, pe, sel, du, rows)
        # my share of the events, its distinct queries and the key states they read
        n = step.m
        bounds = shares(n, size)
        lo, hi = int(bounds[me]), int(bounds[me + 1])
        m = hi - lo
        q_inv = plan.q_inv.numpy()
        positions = step.positions(lo, hi)
        share_q = q_inv[positions]
        uq = distinct(share_q, plan.uq_key.shape[0])
        need = self._keys_of_queries(plan, uq)
        kpos = places(keys, key_owner.size)
        send_idx, send_counts, recv_counts = self._key_sends(plan, step, need, key_owner, kpos)
        owner_need = key_owner[need]
        here = np.flatnonzero(owner_need == me)
        others = np.flatnonzero(owner_need != me)
        recv_at = others[np.argsort(owner_need[others], kind="stable")]  # as they arrive: by owner, then key
        ob_key = plan.ob_key.numpy()
        ob_mine = key_owner[ob_key] == me
        k = step.k
        out = Cut(plan=plan, step=step, lo=lo, hi=hi, keys=int(keys.size), need=need, fetch=fetch, kplan=kplan,
                  qplan=self._query_plan(plan, uq, need), send_idx=send_idx, send_counts=send_counts,
                  recv_counts=recv_counts, here=here, here_k=kpos[need[here]], recv_at=recv_at,
                  z_at=places(uq, plan.uq_key.shape[0])[share_q], ob_node=plan.ob_node.numpy()[ob_mine],
                  ob_at=kpos[ob_key[ob_mine]], pairs=RowLayout.contiguous(lo, m),
                  cands=RowLayout.contiguous(lo * k, m * k) if k else None)
        self.work.seconds_dividing += time.perf_counter() - t0
        return out

    # ------------------------------------------------------------------ the step

    def _query_plan(self, plan, uq: np.ndarray, need: np.ndarray) -> QueryPlan:
        """The queries ``uq`` with their keys as positions among ``need`` (the key table)."""
        t_uq = torch.from_numpy(uq)
        num_keys = plan.key_row.shape[0]
        need_at = places(need, num_keys)
        uq_key = need_at[plan.uq_key.numpy()[uq]]
        k = plan.nb_mask.shape[1]  # (a plan without neighbours has no slots)
        if k:
            mask = plan.nb_mask.numpy()[uq]
            slots = plan.nb_keys.numpy()[plan.nb_key.numpy()[uq]]  # each slot's key (any where empty)
            nbk = distinct(slots[mask], num_keys)
            if nbk.size == 0:
                nbk = need[:1]
            nb_key = np.where(mask, places(nbk, num_keys)[slots], 0)
            nb_keys = need_at[nbk]
            # (the whole step's are its slots' keys, distinct and ascending)
            orig_nbk = places(plan.nb_keys.numpy(), num_keys)[nbk]
        else:
            nb_key = np.zeros((uq.size, 0), dtype=np.int64)
            nb_keys = np.zeros(1 if need.size else 0, dtype=np.int64)
            orig_nbk = np.arange(nb_keys.size)
        return QueryPlan(uq_key=torch.from_numpy(uq_key.astype(np.int64)), uq_t=plan.uq_t.index_select(0, t_uq),
                         nb_keys=torch.from_numpy(nb_keys.astype(np.int64)),
                         nb_key=torch.from_numpy(np.ascontiguousarray(nb_key, dtype=np.int64).reshape(uq.size, k)),
                         nb_feat=plan.nb_feat.index_select(0, t_uq), nb_dt=plan.nb_dt.index_select(0, t_uq),
                         nb_mask=plan.nb_mask.index_select(0, t_uq),
                         orig_uq=RowLayout(uq), orig_nbk=RowLayout(orig_nbk))

    # ------------------------------------------------------------------ exchanges
    def _row_requests(self, plan, key_owner: np.ndarray):
        """``(rank, row)`` pairs, int64 arrays: the stored rows (positions among ``plan.rows``) that
        each key's owner reads to compute its keys -- their own rows, the pending events' both
        endpoints, DyRep's queries and their neighbours -- for every rank at once (what
        :meth:`_rows_of` gives one rank)."""
        agg_sel = plan.agg_sel.numpy()
        if plan.agg_identity:  # pending event j is key agg_sel[j]'s
            pe, pe_req = np.arange(agg_sel.size), key_owner[agg_sel]
        else:
            pe, pe_req = plan.agg_entry.numpy(), key_owner[agg_sel[plan.agg_local.numpy()]]
        req = [key_owner, pe_req, pe_req]
        row = [plan.key_row.numpy(), plan.pe_row.numpy()[pe], plan.pe_other_row.numpy()[pe]]
        if plan.dyrep is not None and pe.size:
            d = plan.dyrep
            inv = d.inv.numpy()[pe]
            mask = d.nb_mask.numpy()[inv]
            req += [pe_req, np.broadcast_to(pe_req[:, None], mask.shape)[mask]]
            row += [d.own_row.numpy()[inv], d.nb_row.numpy()[inv][mask]]
        return np.concatenate(req), np.concatenate(row)

    @staticmethod
    def _pairs(rank: np.ndarray, item: np.ndarray, n: int):
        """The distinct ``(rank, item)`` pairs (``0 <= item < n``), by rank then item."""
        n = max(int(n), 1)
        both = distinct(rank.astype(np.int64) * np.int64(n) + item, int(rank.max(initial=0) + 1) * n)
        return both // n, both % n

    def _row_fetch(self, plan, row_nodes, rows, key_owner) -> "RowFetch":
        """Round 1's plan: what this process sends (the rows of its own that the others' keys
        read) and where what it holds and receives goes among ``rows``.  What each process
        needs is found for all of them in one pass over the plan, so a process's host work does
        not grow with the number of processes."""
        me, size = self.rank, self.size
        row_owner = self._owner_of(row_nodes)
        req, row = self._row_requests(plan, key_owner)
        keep = (row_owner[row] == me) & (req != me)  # rows of mine that another process reads
        dest, row = self._pairs(req[keep], row[keep], row_nodes.size)
        owner_rows = row_owner[rows]
        recv_counts = np.bincount(owner_rows, minlength=size)
        recv_counts[me] = 0
        here = np.flatnonzero(owner_rows == me)
        # the received rows' places among mine: each rank's, ascending by position, in rank order
        others = np.flatnonzero(owner_rows != me)
        at = others[np.argsort(owner_rows[others], kind="stable")]
        return RowFetch(send_ids=row_nodes[row], send_counts=np.bincount(dest, minlength=size).tolist(),
                        recv_counts=recv_counts.tolist(), own_ids=row_nodes[rows[here]],
                        own_at=torch.from_numpy(here), recv_at=torch.from_numpy(at), n=int(rows.size))

    def _key_sends(self, plan, step: QueryLayout, need: np.ndarray, key_owner: np.ndarray, kpos: np.ndarray):
        """Round 2's counts and what this process sends: the key states of its own that the other
        processes' shares of queries read (their own nodes' and their neighbours'), found for all
        shares in one pass.  Returns ``(send_idx, send_counts, recv_counts)``: positions among
        this process's keys, grouped by destination in rank order, keys ascending in each."""
        me, size = self.rank, self.size
        m, g, k = step.m, step.groups, step.k
        bounds = shares(m, size)
        of_event = np.repeat(np.arange(size), np.diff(bounds))  # each event's share
        share = np.concatenate([np.tile(of_event, g), np.repeat(of_event, k)])  # of each query position
        n_uq = plan.uq_key.shape[0]
        s_of, uq = self._pairs(share, plan.q_inv.numpy()[:share.size], n_uq)
        rank, key = [s_of], [plan.uq_key.numpy()[uq]]
        if plan.nb_mask.shape[1]:
            mask = plan.nb_mask.numpy()[uq]
            rank.append(np.broadcast_to(s_of[:, None], mask.shape)[mask])
            key.append(plan.nb_keys.numpy()[plan.nb_key.numpy()[uq]][mask])
        rank, key = np.concatenate(rank), np.concatenate(key)
        keep = (key_owner[key] == me) & (rank != me)
        dest, key = self._pairs(rank[keep], key[keep], key_owner.size)
        recv_counts = np.bincount(key_owner[need], minlength=size)
        recv_counts[me] = 0
        return kpos[key], np.bincount(dest, minlength=size).tolist(), recv_counts.tolist()


def _plans(name: str, k: int, seed: int):
    """A pass's host plans of ``name`` on a small generated log, each with its query layout:
    negatives drawn, and ``k`` ranking candidates an event where ``k``."""
    ev = speed.generate_events(num_nodes=60, num_events=700, seed=seed)
    model = build_model(name, ev.num_nodes)
    rng = np.random.default_rng(seed)
    extra = None
    if k:
        cand = rng.integers(0, ev.num_nodes, (len(ev), k))

        def extra(positions, t):
            return cand[positions].reshape(-1), np.repeat(t, k)

    got = []
    loader = PlanLoader(model, EventStream(ev), Batches(np.arange(len(ev)), 64),
                        RandomNegatives(np.arange(ev.num_nodes), [0, 1]).next_edges, extra_queries=extra,
                        fix=lambda plan, step: got.append((plan, step.layout(k))) or plan)
    for _ in loader:
        pass
    return ev.num_nodes, got


def _same(a, b, where):
    """Deep equality of two cuts' fields (arrays by value and dtype, layouts by their places)."""
    if isinstance(a, torch.Tensor):
        a, b = a.numpy(), b.numpy()
    if isinstance(a, np.ndarray):
        b = np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), where
    elif isinstance(a, RowLayout):
        assert (a.n, a.rows, a.first) == (b.n, b.rows, b.first), where
        if not a.first:
            _same(a.host_positions(), b.host_positions(), where)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, (BatchPlan, DyRepPlan, QueryPlan, RowFetch, Cut)):
        for f in vars(a):
            if f not in ("plan", "step", "packed"):
                _same(getattr(a, f), getattr(b, f), f"{where}.{f}")
    else:
        assert a == b, where


@pytest.mark.parametrize("name", ["tgn", "dyrep", "jodie", "tige"])
@pytest.mark.parametrize("k", [0, 3])
def test_the_cut_in_kernels_is_the_numpy_cut(name, k):
    num_nodes, plans = _plans(name, k, seed=11)
    assert len(plans) == 11
    rng = np.random.default_rng(5)
    for size in (2, 3):
        owner = rng.integers(0, size, num_nodes).astype(np.int16)  # (an owner array is narrow)
        for rank in range(size):
            world = type("World", (), {"rank": rank, "size": size})()
            fast, ref = DividedStep(world, owner), NumpyCut(world, owner)
            for i, (plan, step) in enumerate(plans):
                _same(fast.cut(plan, step), ref.cut(plan, step), f"{name} k={k} size={size} rank={rank} step {i}")
            assert fast.work.seconds_dividing > 0


def test_every_rank_computes_every_key_once_and_reads_what_it_needs():
    # what the cut promises, whatever its arithmetic: the ranks' keys partition the step's, each
    # share's queries read keys that are computed here or received, and what one rank sends
    # another is what that one counts on receiving
    num_nodes, plans = _plans("tgn", 2, seed=12)
    size = 3
    owner = np.random.default_rng(1).integers(0, size, num_nodes)
    for plan, step in plans:
        world = lambda r: type("World", (), {"rank": r, "size": size})()  # noqa: E731
        cuts = [DividedStep(world(r), owner).cut(plan, step) for r in range(size)]
        assert sum(c.keys for c in cuts) == plan.key_row.shape[0]
        for r, c in enumerate(cuts):
            assert c.here.size + c.recv_at.size == c.need.size
            for s, other in enumerate(cuts):
                if s != r:
                    assert other.send_counts[r] == c.recv_counts[s]
                    assert other.fetch.send_counts[r] == c.fetch.recv_counts[s]
        assert sum(c.hi - c.lo for c in cuts) == step.m
