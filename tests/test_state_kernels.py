"""Training-state numba kernels against numpy references on random inputs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import numba

from speed.train.state._kernels import unique_first_inverse
from speed.train.state.batch_plan import time_ranks
from speed.train.state.sampler import RecentNeighborSampler

INT64 = np.iinfo(np.int64)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(INT64.min, INT64.max), max_size=300), st.integers(0, 2**31 - 1), st.integers(1, 6))
def test_unique_by_hashing_is_numpys_unique(values, seed, repeat):
    """Values anywhere in int64 (its ends too), few or many repeats, any length: the same three
    arrays as np.unique(return_index=True, return_inverse=True)."""
    rng = np.random.default_rng(seed)
    keys = np.array(values, dtype=np.int64)
    if keys.size:
        keys = keys[rng.integers(0, keys.size, keys.size * repeat)]  # repeats, in any order
    got = unique_first_inverse(keys)
    want = np.unique(keys, return_index=True, return_inverse=True)
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and np.array_equal(g, w.reshape(-1))


def test_unique_by_hashing_on_a_steps_keys():
    """The shape of a step's memory keys: node ids times a count, many slots of a few hubs."""
    rng = np.random.default_rng(0)
    hubs = rng.integers(0, 10**6, 50) * 7 + 3
    keys = np.concatenate([rng.integers(0, 10**6, 5000) * 7, hubs[rng.integers(0, 50, 20000)]])
    got = unique_first_inverse(keys)
    want = np.unique(keys, return_index=True, return_inverse=True)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(allow_nan=False, width=64), max_size=200), st.integers(0, 2**31 - 1), st.integers(1, 4))
def test_time_ranks_by_hashing_are_numpys(values, seed, repeat):
    """Any float64 times (negative, -0.0 beside 0.0, subnormal, infinite, repeated): the ranks
    np.unique's inverse gives."""
    rng = np.random.default_rng(seed)
    t = np.array(values + [0.0, -0.0], dtype=np.float64)
    t = t[rng.integers(0, t.size, t.size * repeat)]
    got = time_ranks(t)
    assert got.dtype == np.int64 and np.array_equal(got, np.unique(t, return_inverse=True)[1])


def _rings_in_time_order(k, undirected, held, nodes, times, rings):
    """The sampler's meaning, one query at a time in time order (pure Python): before each query
    the held events strictly earlier than its time enter the rings (a ring keeps its node's latest
    ``k``); its answer is its ring's entries earlier than its time, newest first.  ``held``: a
    list of (src, dst, t, eid), consumed; ``rings``: node -> list of (nbr, t, eid), oldest first."""
    out = [None] * len(nodes)

    def flush(before):
        while held and held[0][2] < before:
            a, b, t, e = held.pop(0)
            rings.setdefault(a, []).append((b, t, e))
            if undirected and a != b:
                rings.setdefault(b, []).append((a, t, e))
            for n in (a, b):
                rings[n] = rings.get(n, [])[-k:]

    for i in sorted(range(len(nodes)), key=lambda i: times[i]):
        flush(times[i])
        out[i] = [x for x in rings.get(nodes[i], [])[::-1] if x[1] < times[i]]
    return out


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 12), st.integers(0, 80), st.integers(1, 4), st.booleans(), st.integers(1, 25),
       st.integers(0, 2**31 - 1), st.booleans())
def test_parallel_ring_sampling_is_the_time_ordered_one(n, e, k, undirected, batch, seed, earlier):
    """Queries answered in parallel (none waiting for another's insertions) get what answering
    them one by one in time order gives, whatever the thread count: equal times, self-loops,
    directed rings, repeated nodes, and queries earlier than what a ring already holds (DyRep's
    message-time queries, ``earlier``)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    t = np.sort(rng.integers(0, e // 3 + 2, e)).astype(np.float64)
    sampler = RecentNeighborSampler(n, k, undirected=undirected)
    held, rings = [], {}
    threads = numba.get_num_threads()
    try:
        for step, s in enumerate(range(0, e, batch)):
            sl = slice(s, s + batch)
            sampler.push(src[sl], dst[sl], t[sl], np.arange(s, min(e, s + batch)))
            held += list(zip(src[sl].tolist(), dst[sl].tolist(), t[sl].tolist(), range(s, min(e, s + batch))))
            q_nodes = np.concatenate([src[sl], dst[sl], rng.integers(0, n, 3)])
            q_t = np.concatenate([t[sl], t[sl], rng.choice(t[sl], 3)])
            if earlier and s:
                q_t[-3:] = rng.uniform(t[0] - 1, t[s - 1] + 1, 3)
            numba.set_num_threads(1 + step % threads)
            got = sampler.sample_arrays(q_nodes, q_t)
            want = _rings_in_time_order(k, undirected, held, q_nodes.tolist(), q_t.tolist(), rings)
            for b, w in enumerate(want):
                m = got[3][b]
                assert m.tolist() == [True] * len(w) + [False] * (k - len(w))
                assert [(int(x), float(y), int(z)) for x, y, z in zip(got[0][b][m], got[1][b][m], got[2][b][m])] == \
                    [(int(x), float(y), int(z)) for x, y, z in w]
                assert not got[0][b][~m].any() and not got[1][b][~m].any() and (got[2][b][~m] == -1).all()
            assert sampler.held == len(held)
    finally:
        numba.set_num_threads(threads)


def _keys_by_numpy(store, uq_node, uq_t, nb_node, nb_mask, k, ob_node, ob_t, dedup, mean):
    """What ``build_plan`` computed in numpy before :func:`plan_keys` (about 40 calls): the
    reference the kernel must equal array for array."""
    m, kk = nb_node.shape
    slot = np.flatnonzero(nb_mask.reshape(-1))
    read_node = np.concatenate([uq_node, nb_node.reshape(-1)[slot], ob_node])
    read_t = np.concatenate([uq_t, np.repeat(uq_t, kk)[slot] if kk and slot.size else np.empty(0),
                             np.full(ob_node.size, ob_t)])
    read_c = store.counts_before(read_node, read_t)
    if dedup:
        key_id = read_node * np.int64(read_c.max() + 1 if read_c.size else 1) + read_c
        _, key_first, read_key = np.unique(key_id, return_index=True, return_inverse=True)
        key_node, key_c = read_node[key_first], read_c[key_first]
    else:
        read_key = np.arange(read_node.size, dtype=np.int64)
        key_node, key_c = read_node, read_c
    read_key = read_key.reshape(-1).astype(np.int64)
    uq_key = read_key[:m]
    nb_keys, nb_pos = np.unique(read_key[m:m + slot.size], return_inverse=True)
    if nb_keys.size == 0 and m:
        nb_keys = np.zeros(1, dtype=np.int64)
    nb_key = np.zeros(m * k, dtype=np.int64)
    nb_key[slot] = nb_pos.reshape(-1)
    ob_key = read_key[m + slot.size:]
    has = np.flatnonzero(key_c > 0)
    key_nodes_u, key_nodes_inv = np.unique(key_node[has], return_inverse=True)
    key_nodes_inv = key_nodes_inv.reshape(-1)
    p_row, p_other, p_t, p_eid = store.gather(key_nodes_u)
    seg_start = np.searchsorted(p_row, np.arange(key_nodes_u.size))
    if mean:
        lens = key_c[has]
        agg_local = np.repeat(np.arange(has.size, dtype=np.int64), lens)
        within = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        entry = np.repeat(seg_start[key_nodes_inv], lens) + within
        used, agg_entry = np.unique(entry, return_inverse=True)
    else:
        agg_local = np.arange(has.size, dtype=np.int64)
        used = seg_start[key_nodes_inv] + key_c[has] - 1
        agg_entry = agg_local
    return (uq_key, nb_keys, nb_key, ob_key, key_node, has, agg_local, agg_entry.reshape(-1),
            key_nodes_u[p_row[used]], p_other[used], p_t[used], p_eid[used])


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 30), st.integers(0, 120), st.integers(0, 4), st.integers(0, 40), st.integers(0, 12),
       st.booleans(), st.booleans(), st.integers(0, 2**31 - 1))
def test_plan_keys_kernel_is_the_numpy_plan(n, e, k, queries, observed, dedup, mean, seed):
    """Random pending stores (several writes, so segments sit anywhere in the arrays, equal times
    and repeated nodes), random queries and neighbour slots (some empty, some rows without any),
    no queries at all, no neighbours (k = 0): the kernel's twelve arrays are numpy's."""
    from speed.train.state.store import MessageStore

    rng = np.random.default_rng(seed)
    store = MessageStore(n)
    t0 = 0.0
    for _ in range(3):  # batches of events becoming pending (times from few distinct values)
        b = int(rng.integers(0, e // 3 + 1))
        src, dst = rng.integers(0, n, b), rng.integers(0, n, b)
        t = np.sort(t0 + rng.integers(0, 4, b).astype(np.float64))
        t0 = float(t[-1]) if b else t0
        store.merge(np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([t, t]),
                    np.tile(rng.integers(0, 10**6, b), 2), before=float(rng.integers(0, 4)) + t0 - 3)
    uq_node = rng.integers(0, n, queries)
    uq_t = rng.integers(0, int(t0) + 3, queries).astype(np.float64)
    nb_node = rng.integers(0, n, (queries, k))
    nb_mask = rng.random((queries, k)) < 0.6
    ob_node = np.unique(rng.integers(0, n, observed))
    ob_t = float(rng.integers(0, int(t0) + 3))
    if k and rng.random() < 0.2:  # a plan without neighbours: no column, k slots all empty
        nb_node, nb_mask = nb_node[:, :0], nb_mask[:, :0]
    got = store.plan_keys(uq_node, uq_t, nb_node, nb_mask, k, ob_node, ob_t, dedup, mean)
    want = _keys_by_numpy(store, uq_node, uq_t, nb_node, nb_mask, k, ob_node, ob_t, dedup, mean)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and np.array_equal(g, w), i


def test_plan_keys_from_numbas_cache_in_a_fresh_process():
    """A cached kernel that called a parallel one crashed a new process (a PAC worker) in which no
    parallel kernel had started numba's threads: the plan's keys are computed in a fresh
    interpreter twice, the second time from the cache the first one wrote."""
    import subprocess
    import sys

    code = ("import numpy as np\n"
            "from speed.train.state.store import MessageStore\n"
            "s = MessageStore(10)\n"
            "s.merge(np.array([1, 2]), np.array([2, 1]), np.array([1.0, 1.0]), np.array([7, 7]), before=0.0)\n"
            "r = s.plan_keys(np.array([1, 2, 3]), np.array([5.0, 5.0, 0.5]), np.array([[2], [1], [0]]),\n"
            "                np.array([[True], [False], [False]]), 1, np.zeros(0, np.int64), np.inf, True, False)\n"
            "print(r[-4].tolist(), r[-1].tolist())\n")
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip() == "[1, 2] [7, 7]"


def _pending_by_python(pending, node, other, t, eid, before):
    """The store's merge in plain Python: each node keeps its pending events at ``before`` or
    later and takes its new ones, sorted by time then event id, old ones first on a tie."""
    fresh = {}
    for i, u in enumerate(node.tolist()):
        fresh.setdefault(u, []).append((float(t[i]), int(eid[i]), int(other[i])))
    for u, new in fresh.items():
        kept = [e for e in pending.get(u, []) if e[0] >= before]
        pending[u] = [e for _, e in sorted(enumerate(kept + new), key=lambda ie: (ie[1][0], ie[1][1], ie[0]))]


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 25), st.integers(1, 12), st.integers(0, 60), st.integers(0, 2**31 - 1))
def test_the_merge_kernel_is_the_plain_python_merge(n, rounds, width, seed):
    """Random batches joining a pending store (few distinct times, self-loops, an event id seen
    twice by one node, thresholds below, among and above the times held, empty batches): every
    node's pending events, in order, are the plain-Python merge's."""
    from speed.train.state.store import MessageStore

    rng = np.random.default_rng(seed)
    store, want = MessageStore(n), {}
    t0 = 0.0
    for _ in range(rounds):
        b = int(rng.integers(0, width + 1))
        src, dst = rng.integers(0, n, b), rng.integers(0, n, b)
        t = np.sort(t0 + rng.integers(0, 3, b).astype(np.float64))
        e = rng.integers(0, 50, b)  # (ids repeat: ties on time and id)
        node, other = np.concatenate([src, dst]), np.concatenate([dst, src])
        tt, ee = np.concatenate([t, t]), np.concatenate([e, e])
        before = float(t0 + rng.integers(-2, 4))
        store.merge(node, other, tt, ee, before=before)
        _pending_by_python(want, node, other, tt, ee, before)
        t0 = float(t[-1]) if b else t0
        for u in range(n):
            row, o, ts, es = store.gather(np.array([u]))
            assert list(zip(ts.tolist(), es.tolist(), o.tolist())) == want.get(u, []), u
    assert store.alive == sum(len(v) for v in want.values())


def test_the_merge_kernel_through_compactions():
    """Enough writes that the store compacts its arrays several times (each at four times the
    live events, at least 32,768 entries): the pending events stay the plain-Python merge's."""
    from speed.train.state.store import MessageStore

    rng = np.random.default_rng(5)
    n = 300
    store, want = MessageStore(n), {}
    for r in range(120):
        b = 400
        src, dst = rng.integers(0, n, b), rng.integers(0, n, b)
        t = np.sort(r * 10 + rng.integers(0, 10, b).astype(np.float64))
        e = np.arange(r * b, (r + 1) * b)
        node, other, tt, ee = np.concatenate([src, dst]), np.concatenate([dst, src]), np.r_[t, t], np.r_[e, e]
        store.merge(node, other, tt, ee, before=r * 10 - 5.0)
        _pending_by_python(want, node, other, tt, ee, r * 10 - 5.0)
    row, o, ts, es = store.gather(np.arange(n))
    got = {}
    for u, a, b_, c in zip(row.tolist(), ts.tolist(), es.tolist(), o.tolist()):
        got.setdefault(u, []).append((a, b_, c))
    assert got == {u: v for u, v in want.items() if v}
