"""numba kernels of a batch plan's memory keys (:func:`speed.train.state.batch_plan.build_plan`).

From the step's distinct queries, their sampled neighbours and the batch's endpoints to the
memory keys they read and the pending events those keys apply: two kernels, with the parallel
count of pending events between them, none holding the interpreter lock.  A pipelined plan is
built in a thread beside the step; on a GPU the step's thread spends its time in Python
dispatching operators, so every stretch of numpy the planning thread runs between kernels is
time the step waits for the lock (and the planning thread for it).  The numpy version of this part was about 40 calls a plan; it survives as the reference in
``tests/test_state_kernels.py``, which checks that the two give the same arrays.

:func:`residue_positions` places the rows of a :class:`~speed.train.model.network.RowLayout`
(several a divided evaluation step: its pending events, keys, rows, queries and neighbours);
tests/test_row_layout.py checks it against the stable sort it replaces.
"""

from __future__ import annotations

import numba
import numpy as np

from ._kernels import unique_first_inverse


@numba.njit(cache=True, nogil=True)
def plan_reads(uq_node, uq_t, nb_node, nb_mask, ob_node, ob_t):
    """A step's memory reads: each distinct query's own node at its time, each real neighbour
    slot's node at its query's time, each observed endpoint at ``ob_t``, in that order.

    Parameters
    ----------
    uq_node : int64 (m,), uq_t : float64 (m,)
        The distinct queries.
    nb_node : int64 (m, k or 0), nb_mask : bool (m, k or 0)
        Their neighbours (C-contiguous; no column when none were sampled).
    ob_node : int64 (n,), ob_t : float
        The batch's distinct endpoints, read at ``ob_t``.

    Returns
    -------
    slot : int64 (S,)
        The real slots, as flat positions in ``nb_mask``.
    read_node : int64 (m + S + n,), read_t : float64 (m + S + n,)
    """
    m = uq_node.shape[0]
    kk = nb_node.shape[1]  # k, or 0 without neighbours
    flat_node = nb_node.reshape(-1)
    flat_mask = nb_mask.reshape(-1)
    n_slot = 0
    for s in range(m * kk):
        if flat_mask[s]:
            n_slot += 1
    slot = np.empty(n_slot, dtype=np.int64)
    a = 0
    for s in range(m * kk):
        if flat_mask[s]:
            slot[a] = s
            a += 1
    n_ob = ob_node.shape[0]
    n_read = m + n_slot + n_ob
    read_node = np.empty(n_read, dtype=np.int64)
    read_t = np.empty(n_read, dtype=np.float64)
    for a in range(m):
        read_node[a] = uq_node[a]
        read_t[a] = uq_t[a]
    for a in range(n_slot):
        read_node[m + a] = flat_node[slot[a]]
        read_t[m + a] = uq_t[slot[a] // kk]
    for a in range(n_ob):
        read_node[m + n_slot + a] = ob_node[a]
        read_t[m + n_slot + a] = ob_t
    return slot, read_node, read_t


@numba.njit(cache=True, nogil=True)
def plan_keys(m, k, slot, read_node, read_c, dedup, mean, start, count, pend_other, pend_t, pend_eid):
    """The memory keys of a step's reads (:func:`plan_reads`) and the pending events they apply.

    A read applies its node's pending events strictly earlier than its time, so it is determined
    by the node and that count (``read_c``, :func:`~._kernels.pending_counts`): one key per
    distinct ``(node, count)`` (with ``dedup``; else one per read).  Keys are ordered by
    ``node * (max count + 1) + count``.

    (The counts come from the caller: a cached kernel that calls a ``parallel`` one crashes a
    process in which no parallel kernel has started numba's threads yet.)

    Parameters
    ----------
    m, k : int
        Distinct queries, and neighbour slots per query in the plan (``nb_key``'s width).
    slot, read_node : int64
        From :func:`plan_reads`.
    read_c : int64 (reads,)
        Each read's count of pending events before its time.
    dedup, mean : bool
        One key per distinct read; a key applies all its pending events (else its latest).
    start, count : int64 (num_nodes,); pend_other, pend_t, pend_eid : (entries,)
        The pending store (:class:`~speed.train.state.store.MessageStore`): node ``i``'s events
        are entries ``start[i] .. start[i] + count[i] - 1``, in time order.

    Returns
    -------
    uq_key : int64 (m,)
        Each query's own key.
    nb_keys : int64 (u,)
        The distinct keys of the neighbour slots, ascending (one key 0 when there are none and
        ``m > 0``).
    nb_key : int64 (m * k,)
        Each slot's key as a position in ``nb_keys`` (0 in empty slots).
    ob_key : int64 (n,)
    key_node : int64 (K,)
        Each key's node.
    agg_sel : int64 (H,)
        The keys that apply pending events (count > 0), ascending.
    agg_local, agg_entry : int64 (L,)
        Member ``l`` is pending event ``agg_entry[l]`` of key ``agg_sel[agg_local[l]]``.
    pe_node, pe_other : int64 (P,), pe_t : float64 (P,), pe_eid : int64 (P,)
        The pending events applied, each once: grouped by node (ascending), in time order.
    """
    n_slot = slot.shape[0]
    n_read = read_node.shape[0]
    if dedup:
        width = np.int64(1)
        if n_read:
            width = read_c.max() + 1
        _, key_first, read_key = unique_first_inverse(read_node * width + read_c)
        key_node = read_node[key_first]
        key_c = read_c[key_first]
    else:
        read_key = np.arange(n_read, dtype=np.int64)
        key_node = read_node.copy()
        key_c = read_c.copy()
    uq_key = read_key[:m].copy()
    nb_keys, _, nb_pos = unique_first_inverse(read_key[m:m + n_slot].copy())
    if nb_keys.shape[0] == 0 and m > 0:  # no neighbour at all: one row for the empty slots to point at
        nb_keys = np.zeros(1, dtype=np.int64)
    nb_key = np.zeros(m * k, dtype=np.int64)
    for a in range(n_slot):
        nb_key[slot[a]] = nb_pos[a]
    ob_key = read_key[m + n_slot:].copy()

    # the keys that apply pending events, their distinct nodes, and where each node's events
    # start among the nodes' events laid end to end (ascending node)
    n_has = 0
    for a in range(key_c.shape[0]):
        if key_c[a] > 0:
            n_has += 1
    agg_sel = np.empty(n_has, dtype=np.int64)
    a = 0
    for x in range(key_c.shape[0]):
        if key_c[x] > 0:
            agg_sel[a] = x
            a += 1
    nodes_u, _, node_of = unique_first_inverse(key_node[agg_sel])
    seg_start = np.empty(nodes_u.shape[0], dtype=np.int64)
    total = 0
    for u in range(nodes_u.shape[0]):
        seg_start[u] = total
        total += count[nodes_u[u]]

    if mean:  # every pending event before the key's time, each applied event once
        n_mem = 0
        for h in range(n_has):
            n_mem += key_c[agg_sel[h]]
        agg_local = np.empty(n_mem, dtype=np.int64)
        entry = np.empty(n_mem, dtype=np.int64)
        a = 0
        for h in range(n_has):
            base = seg_start[node_of[h]]
            for w in range(key_c[agg_sel[h]]):
                agg_local[a] = h
                entry[a] = base + w
                a += 1
        used, _, agg_entry = unique_first_inverse(entry)
        # each used position's node: the last segment starting at or before it
        n_used = used.shape[0]
        used_u = np.empty(n_used, dtype=np.int64)
        u = 0
        for a in range(n_used):
            while u + 1 < seg_start.shape[0] and seg_start[u + 1] <= used[a]:
                u += 1
            used_u[a] = u
    else:  # the latest pending event before the key's time: one per key, in key order
        agg_local = np.arange(n_has, dtype=np.int64)
        agg_entry = agg_local.copy()
        n_used = n_has
        used = np.empty(n_has, dtype=np.int64)
        used_u = np.empty(n_has, dtype=np.int64)
        for h in range(n_has):
            used_u[h] = node_of[h]
            used[h] = seg_start[node_of[h]] + key_c[agg_sel[h]] - 1
    pe_node = np.empty(n_used, dtype=np.int64)
    pe_other = np.empty(n_used, dtype=np.int64)
    pe_t = np.empty(n_used, dtype=np.float64)
    pe_eid = np.empty(n_used, dtype=np.int64)
    for a in range(n_used):
        node = nodes_u[used_u[a]]
        e = start[node] + used[a] - seg_start[used_u[a]]
        pe_node[a] = node
        pe_other[a] = pend_other[e]
        pe_t[a] = pend_t[e]
        pe_eid[a] = pend_eid[e]
    return (uq_key, nb_keys, nb_key, ob_key, key_node, agg_sel, agg_local, agg_entry, pe_node, pe_other, pe_t,
            pe_eid)


@numba.njit(cache=True, nogil=True)
def residue_positions(index, period):
    """Each row's place when rows of one residue of ``index`` modulo ``period`` go one after
    another, ``period`` apart, in the order given: the ``j``-th row (in ``index``'s order) whose
    index is ``r`` modulo ``period`` goes to ``period * j + r``
    (:class:`speed.train.model.network.RowLayout`).  One pass, where a stable sort by residue
    costs a sort a layout (several layouts a divided evaluation step).

    Parameters
    ----------
    index : int64 (n,)
        Non-negative.
    period : int

    Returns
    -------
    positions : int64 (n,)
    height : int
        ``positions.max() + 1`` (0 for no rows).
    """
    seen = np.zeros(period, dtype=np.int64)
    out = np.empty(index.shape[0], dtype=np.int64)
    height = 0
    for i in range(index.shape[0]):
        r = index[i] % period
        p = period * seen[r] + r
        seen[r] += 1
        out[i] = p
        if p + 1 > height:
            height = p + 1
    return out, height
