"""numba kernels of a divided evaluation step's cut (:meth:`speed.train.eval.divided.DividedStep.cut`).

The cut is host work on a step's plan and the nodes' owners alone: which keys this process
computes, the pending events and stored rows they read, what it sends and receives in the two
exchanges, and its share's distinct queries.  Every piece is a set operation on small integer
arrays (a plan's positions, a few thousand a step), so in numpy it was about 450 calls a step,
each costing more than its arithmetic: 0.94 ms a cut on a 2M-event log's steps, 9% of a PAC
rank's evaluation.  These kernels do it in five calls, none holding the interpreter lock.

Each kernel returns exactly what the numpy it replaces returned (the same arrays, the same
order, int64); the numpy survives as the reference in ``tests/test_cut_kernels.py``, which
checks the two on real plans of every model for 2 and 3 processes.

Conventions: a *position* is an index into one of the plan's arrays; ``distinct`` sets come
out ascending; a set "grouped by rank" lists rank 0's members, then rank 1's, ... each ascending.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _flagged(flags):
    """Positions of the set flags, ascending (``np.flatnonzero``)."""
    n = 0
    for i in range(flags.shape[0]):
        if flags[i]:
            n += 1
    out = np.empty(n, dtype=np.int64)
    j = 0
    for i in range(flags.shape[0]):
        if flags[i]:
            out[j] = i
            j += 1
    return out


@numba.njit(cache=True, nogil=True)
def _places(table, bound):
    """Each value's place in ``table`` (distinct, in ``[0, bound)``); -1 for the others."""
    at = np.full(bound, -1, dtype=np.int64)
    for i in range(table.shape[0]):
        at[table[i]] = i
    return at


@numba.njit(cache=True, nogil=True)
def _by_owner(owner_of, me, size):
    """Split positions ``0 .. n-1`` by ``owner_of``: ``(here, there, counts)`` -- those whose owner
    is ``me`` (ascending), the others ordered by owner then position (a stable sort by owner: the
    order rows arrive in an ``all_to_all``), and each rank's count with ``me``'s set to 0."""
    n = owner_of.shape[0]
    counts = np.zeros(size, dtype=np.int64)
    for i in range(n):
        counts[owner_of[i]] += 1
    start = np.zeros(size, dtype=np.int64)
    acc = 0
    for r in range(size):
        if r != me:
            start[r] = acc
            acc += counts[r]
    here = np.empty(counts[me], dtype=np.int64)
    there = np.empty(acc, dtype=np.int64)
    h = 0
    for i in range(n):
        r = owner_of[i]
        if r == me:
            here[h] = i
            h += 1
        else:
            there[start[r]] = i
            start[r] += 1
    counts[me] = 0
    return here, there, counts


@numba.njit(cache=True, nogil=True)
def owned_keys(me, key_owner, agg_sel, agg_local, agg_entry, identity, n_pe):
    """The keys ``me`` computes and the pending events they apply.

    Parameters
    ----------
    me : int
    key_owner : int64 (K,)
        Each key's owner.
    agg_sel : int64 (S,)
        The keys with pending events.
    agg_local, agg_entry : int64 (E,)
        Each aggregation entry's key (a position among ``agg_sel``) and pending event
        (unused where ``identity``: pending event ``j`` is key ``agg_sel[j]``'s).
    identity : bool
    n_pe : int
        The plan's pending events.

    Returns
    -------
    keys : int64, positions among the keys, ascending
    pe : int64, positions among the pending events, ascending
    sel : int64, positions among ``agg_sel``, ascending
    """
    kf = np.zeros(key_owner.shape[0], dtype=np.bool_)
    for i in range(key_owner.shape[0]):
        kf[i] = key_owner[i] == me
    keys = _flagged(kf)
    sf = np.zeros(agg_sel.shape[0], dtype=np.bool_)
    for j in range(agg_sel.shape[0]):
        sf[j] = kf[agg_sel[j]]
    sel = _flagged(sf)
    if identity:
        return keys, sel.copy(), sel
    pf = np.zeros(n_pe, dtype=np.bool_)
    for e in range(agg_local.shape[0]):
        if sf[agg_local[e]]:
            pf[agg_entry[e]] = True
    return keys, _flagged(pf), sel


@numba.njit(cache=True, nogil=True)
def key_plan(keys, pe, sel, key_row, pe_row, pe_other_row, extra_rows, agg_sel, agg_local, agg_entry, identity,
             n_rows, n_keys, n_pe):
    """The plan of computing ``keys`` alone
    (:meth:`~speed.train.eval.divided.DividedStep._key_plan`): the stored rows they read and
    every index of theirs remapped to the part.

    Parameters
    ----------
    keys, pe, sel : int64
        As :func:`owned_keys` returns them.
    key_row : int64 (K,), pe_row, pe_other_row : int64 (P,)
        The plan's positions among its rows.
    extra_rows : int64
        More rows the keys read (DyRep's queries and their neighbours; empty otherwise).
    agg_sel, agg_local, agg_entry, identity
        The plan's aggregation (:func:`owned_keys`).
    n_rows, n_keys, n_pe : int
        The plan's rows, keys and pending events.

    Returns
    -------
    rows : int64, positions among the plan's rows, ascending
    row_at : int64 (n_rows,), each plan row's place among ``rows`` (-1: not read)
    k_key_row, k_pe_row, k_pe_other_row : int64, the keys' and their events' rows among ``rows``
    k_agg_entry, k_agg_local, k_agg_sel : int64, the aggregation among the part's
    kpos : int64 (n_keys,), each plan key's place among ``keys`` (-1: another process's)
    """
    rf = np.zeros(n_rows, dtype=np.bool_)
    for i in range(keys.shape[0]):
        rf[key_row[keys[i]]] = True
    for i in range(pe.shape[0]):
        rf[pe_row[pe[i]]] = True
        rf[pe_other_row[pe[i]]] = True
    for i in range(extra_rows.shape[0]):
        rf[extra_rows[i]] = True
    rows = _flagged(rf)
    row_at = _places(rows, n_rows)
    k_key_row = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        k_key_row[i] = row_at[key_row[keys[i]]]
    k_pe_row = np.empty(pe.shape[0], dtype=np.int64)
    k_pe_other_row = np.empty(pe.shape[0], dtype=np.int64)
    for i in range(pe.shape[0]):
        k_pe_row[i] = row_at[pe_row[pe[i]]]
        k_pe_other_row[i] = row_at[pe_other_row[pe[i]]]
    kpos = _places(keys, n_keys)
    if identity:
        k_agg_entry = np.arange(sel.shape[0])
        k_agg_local = np.arange(sel.shape[0])
    else:
        sel_at = _places(sel, agg_sel.shape[0])
        pe_at = _places(pe, n_pe)
        n = 0
        for e in range(agg_local.shape[0]):
            if sel_at[agg_local[e]] >= 0:
                n += 1
        k_agg_local = np.empty(n, dtype=np.int64)
        k_agg_entry = np.empty(n, dtype=np.int64)
        j = 0
        for e in range(agg_local.shape[0]):
            s = sel_at[agg_local[e]]
            if s >= 0:
                k_agg_local[j] = s
                k_agg_entry[j] = pe_at[agg_entry[e]]
                j += 1
    k_agg_sel = np.empty(sel.shape[0], dtype=np.int64)
    for i in range(sel.shape[0]):
        k_agg_sel[i] = kpos[agg_sel[sel[i]]]
    return rows, row_at, k_key_row, k_pe_row, k_pe_other_row, k_agg_entry, k_agg_local, k_agg_sel, kpos


@numba.njit(cache=True, nogil=True)
def row_fetch(me, size, row_nodes, row_owner, key_owner, key_row, pe_row, pe_other_row, agg_sel, agg_local,
              agg_entry, identity, extra_req, extra_row, rows):
    """Round 1 of the step (:class:`~speed.train.eval.divided.RowFetch`): the rows of ``me``'s that every
    other process's keys read, and where the rows ``me``'s keys read come from.  What each
    process reads is found for all of them in one pass over the plan.

    Parameters
    ----------
    me, size : int
    row_nodes : int64 (R,)
        The plan's rows' nodes.
    row_owner : int64 (R,)
        Each row's owner.
    key_owner, key_row, pe_row, pe_other_row, agg_sel, agg_local, agg_entry, identity
        As :func:`owned_keys` and :func:`key_plan` take them.
    extra_req, extra_row : int64 (X,)
        More ``(process, row)`` reads (DyRep's; empty otherwise).
    rows : int64
        The rows ``me``'s keys read (:func:`key_plan`).

    Returns
    -------
    send_ids : int64, the node ids of the rows sent, grouped by destination
    send_counts : int64 (size,)
    recv_counts : int64 (size,), 0 for ``me``
    own_ids : int64, the node ids of the rows read that ``me`` holds
    own_at : int64, their places among ``rows``
    recv_at : int64, the places of the received rows, in the order they arrive
    """
    n_rows = row_nodes.shape[0]
    want = np.zeros(size * n_rows, dtype=np.bool_)  # (process, row) read, of rows of mine
    for i in range(key_owner.shape[0]):
        r, row = key_owner[i], key_row[i]
        if r != me and row_owner[row] == me:
            want[r * n_rows + row] = True
    n_entries = agg_sel.shape[0] if identity else agg_local.shape[0]
    for e in range(n_entries):
        if identity:
            p, r = e, key_owner[agg_sel[e]]
        else:
            p, r = agg_entry[e], key_owner[agg_sel[agg_local[e]]]
        if r != me:
            if row_owner[pe_row[p]] == me:
                want[r * n_rows + pe_row[p]] = True
            if row_owner[pe_other_row[p]] == me:
                want[r * n_rows + pe_other_row[p]] = True
    for i in range(extra_req.shape[0]):
        r, row = extra_req[i], extra_row[i]
        if r != me and row_owner[row] == me:
            want[r * n_rows + row] = True
    pairs = _flagged(want)  # by process, then row
    send_ids = np.empty(pairs.shape[0], dtype=np.int64)
    send_counts = np.zeros(size, dtype=np.int64)
    for i in range(pairs.shape[0]):
        send_ids[i] = row_nodes[pairs[i] % n_rows]
        send_counts[pairs[i] // n_rows] += 1
    owner_rows = np.empty(rows.shape[0], dtype=np.int64)
    for i in range(rows.shape[0]):
        owner_rows[i] = row_owner[rows[i]]
    here, there, recv_counts = _by_owner(owner_rows, me, size)
    own_ids = np.empty(here.shape[0], dtype=np.int64)
    for i in range(here.shape[0]):
        own_ids[i] = row_nodes[rows[here[i]]]
    return send_ids, send_counts, recv_counts, own_ids, here, there


@numba.njit(cache=True, nogil=True)
def _share_of_events(m, size):
    """Each of ``m`` events' share among ``size`` processes (share ``r``: ``[m r // size, m (r+1) // size)``)."""
    out = np.empty(m, dtype=np.int64)
    for r in range(size):
        for e in range(m * r // size, m * (r + 1) // size):
            out[e] = r
    return out


@numba.njit(cache=True, nogil=True)
def query_share(me, size, m, groups, k, q_inv, uq_key, nb_keys, nb_key, nb_mask, key_owner, kpos, ob_key):
    """``me``'s share of the step's queries (:meth:`DividedStep.cut`): its events' distinct
    queries, the keys they read, where each comes from, and the share's query plan.

    Parameters
    ----------
    me, size, m, groups, k : int
        This process, the processes, the step's events, its query groups of ``m`` and its
        candidates per event (:class:`~speed.train.model.queries.QueryLayout`).
    q_inv : int64 (Q,)
        Each query's distinct query.
    uq_key : int64 (U,), nb_keys : int64 (N,), nb_key : int64 (U, k'), nb_mask : bool (U, k')
        The distinct queries' keys, the neighbours' distinct keys and each slot's among them.
    key_owner, kpos : int64 (K,)
        Each key's owner and its place among ``me``'s keys.
    ob_key : int64 (O,)
        The batch's endpoints' keys.

    Returns
    -------
    uq : int64, the share's distinct queries (positions among the plan's), ascending
    z_at : int64, each of the share's query positions among ``uq``
    need : int64, the keys the share reads, ascending
    here, here_k : int64, the positions among ``need`` of ``me``'s keys, and among ``me``'s keys
    recv_at : int64, the positions among ``need`` of the received key states, as they arrive
    recv_counts : int64 (size,)
    q_uq_key : int64, each of ``uq``'s key among ``need``
    q_nb_keys : int64, the share's neighbour keys among ``need``
    q_nb_key : int64 (len(uq), k'), each slot's among ``q_nb_keys`` (0 where empty)
    orig_nbk : int64, each of ``q_nb_keys``' place among the plan's ``nb_keys``
    ob_mine : int64, positions among the endpoints of those ``me`` owns
    ob_at : int64, their keys among ``me``'s
    """
    n_uq, n_keys, kk = uq_key.shape[0], key_owner.shape[0], nb_mask.shape[1]
    lo, hi = m * me // size, m * (me + 1) // size
    share = hi - lo
    n_pos = groups * share + share * k
    share_q = np.empty(n_pos, dtype=np.int64)
    j = 0
    for g in range(groups):
        for e in range(lo, hi):
            share_q[j] = q_inv[g * m + e]
            j += 1
    for c in range(lo * k, hi * k):
        share_q[j] = q_inv[groups * m + c]
        j += 1
    uf = np.zeros(n_uq, dtype=np.bool_)
    for i in range(n_pos):
        uf[share_q[i]] = True
    uq = _flagged(uf)
    uq_at = _places(uq, n_uq)
    z_at = np.empty(n_pos, dtype=np.int64)
    for i in range(n_pos):
        z_at[i] = uq_at[share_q[i]]
    kf = np.zeros(n_keys, dtype=np.bool_)
    nf = np.zeros(n_keys, dtype=np.bool_)  # the neighbours' keys alone
    for a in range(uq.shape[0]):
        u = uq[a]
        kf[uq_key[u]] = True
        for s in range(kk):
            if nb_mask[u, s]:
                key = nb_keys[nb_key[u, s]]
                kf[key] = True
                nf[key] = True
    need = _flagged(kf)
    need_at = _places(need, n_keys)
    owner_need = np.empty(need.shape[0], dtype=np.int64)
    for i in range(need.shape[0]):
        owner_need[i] = key_owner[need[i]]
    here, recv_at, recv_counts = _by_owner(owner_need, me, size)
    here_k = np.empty(here.shape[0], dtype=np.int64)
    for i in range(here.shape[0]):
        here_k[i] = kpos[need[here[i]]]
    q_uq_key = np.empty(uq.shape[0], dtype=np.int64)
    for a in range(uq.shape[0]):
        q_uq_key[a] = need_at[uq_key[uq[a]]]
    if kk:
        nbk = _flagged(nf)
        if nbk.shape[0] == 0:  # (a key table of one: the embedding reads no neighbour)
            nbk = need[:1].copy()
        nbk_at = _places(nbk, n_keys)
        q_nb_key = np.zeros((uq.shape[0], kk), dtype=np.int64)
        for a in range(uq.shape[0]):
            u = uq[a]
            for s in range(kk):
                if nb_mask[u, s]:
                    q_nb_key[a, s] = nbk_at[nb_keys[nb_key[u, s]]]
        q_nb_keys = np.empty(nbk.shape[0], dtype=np.int64)
        for i in range(nbk.shape[0]):
            q_nb_keys[i] = need_at[nbk[i]]
        nbk_orig = _places(nb_keys, n_keys)
        orig_nbk = np.empty(nbk.shape[0], dtype=np.int64)
        for i in range(nbk.shape[0]):
            orig_nbk[i] = nbk_orig[nbk[i]]
    else:
        q_nb_key = np.zeros((uq.shape[0], 0), dtype=np.int64)
        q_nb_keys = np.zeros(1 if need.shape[0] else 0, dtype=np.int64)
        orig_nbk = np.arange(q_nb_keys.shape[0])
    n_ob = 0
    for i in range(ob_key.shape[0]):
        if key_owner[ob_key[i]] == me:
            n_ob += 1
    ob_mine = np.empty(n_ob, dtype=np.int64)
    ob_at = np.empty(n_ob, dtype=np.int64)
    j = 0
    for i in range(ob_key.shape[0]):
        if key_owner[ob_key[i]] == me:
            ob_mine[j] = i
            ob_at[j] = kpos[ob_key[i]]
            j += 1
    return (uq, z_at, need, here, here_k, recv_at, recv_counts, q_uq_key, q_nb_keys, q_nb_key, orig_nbk, ob_mine,
            ob_at)


@numba.njit(cache=True, nogil=True)
def key_sends(me, size, m, groups, k, q_inv, uq_key, nb_keys, nb_key, nb_mask, key_owner, kpos):
    """Round 2's sends (:attr:`~speed.train.eval.divided.Cut.send_idx`): the key states of
    ``me``'s that every other process's share of queries reads (their nodes' own and their
    neighbours'), found for all shares in one pass.  Returns ``(send_idx, send_counts)``: positions among ``me``'s keys,
    grouped by destination, keys ascending in each; and the count for each destination."""
    n_uq, n_keys, kk = uq_key.shape[0], key_owner.shape[0], nb_mask.shape[1]
    of_event = _share_of_events(m, size)
    asked = np.zeros(size * n_uq, dtype=np.bool_)  # (share, distinct query)
    for g in range(groups):
        for e in range(m):
            r = of_event[e]
            if r != me:
                asked[r * n_uq + q_inv[g * m + e]] = True
    for c in range(m * k):
        r = of_event[c // k]
        if r != me:
            asked[r * n_uq + q_inv[groups * m + c]] = True
    sent = np.zeros(size * n_keys, dtype=np.bool_)  # (share, key of mine)
    for r in range(size):
        if r == me:
            continue
        for u in range(n_uq):
            if not asked[r * n_uq + u]:
                continue
            key = uq_key[u]
            if key_owner[key] == me:
                sent[r * n_keys + key] = True
            for s in range(kk):
                if nb_mask[u, s]:
                    key = nb_keys[nb_key[u, s]]
                    if key_owner[key] == me:
                        sent[r * n_keys + key] = True
    pairs = _flagged(sent)
    send_idx = np.empty(pairs.shape[0], dtype=np.int64)
    send_counts = np.zeros(size, dtype=np.int64)
    for i in range(pairs.shape[0]):
        send_idx[i] = kpos[pairs[i] % n_keys]
        send_counts[pairs[i] // n_keys] += 1
    return send_idx, send_counts
