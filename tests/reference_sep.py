"""A slow, plain-Python statement of SEP (DESIGN §4, paper Alg. 1).

Written for clarity, not speed: partition sets are Python sets and every score is
computed from the formula.  The numba kernels must agree with it exactly.
"""

import math


def reference_centrality(src, dst, t, num_nodes, beta):
    t = [float(x) for x in t]
    t_min, t_max = t[0], t[-1]
    span = t_max - t_min
    if span <= 0.0:
        span = 1.0
    cent = [0.0] * num_nodes
    for i, j, tt in zip(src, dst, t):
        w = math.exp(beta * (tt - t_max) / span)
        cent[i] += w
        cent[j] += w
    return cent


def reference_sep(src, dst, t, num_nodes, num_parts, topk=0.0, beta=0.1, lam=1.0, eps=1.0, event_parts=None,
                  balance=None, info=None):
    """Returns (node_parts, loads, dropped, hubs) with node_parts -1 for shared nodes; each
    event's part (-1 if dropped) is appended to ``event_parts`` when given.

    ``balance`` b (None: off): a part is full when one more event would take it past
    ``(1 + b) * max(placed + 1, E / 10) / P`` and it is not the lightest; full parts are not
    candidates, and the placed non-hubs pinning an event to a full part become hubs with A =
    their part (``info["dynamic_hubs"]`` counts them)."""
    event_parts = [] if event_parts is None else event_parts
    src = [int(x) for x in src]
    dst = [int(x) for x in dst]
    cent = reference_centrality(src, dst, t, num_nodes, beta)
    present = sorted(set(src) | set(dst))
    num_hubs = int(math.floor(topk * len(present) + 1e-9))
    hubs = set(sorted(present, key=lambda i: (-cent[i], i))[:num_hubs])
    static_hubs = sorted(hubs)
    b = math.inf if balance is None else balance

    parts_of = [set() for _ in range(num_nodes)]  # A(i)
    load = [0] * num_parts
    dropped = 0
    for i, j in zip(src, dst):
        pin_i = next(iter(parts_of[i])) if i not in hubs and parts_of[i] else None
        pin_j = next(iter(parts_of[j])) if j not in hubs and parts_of[j] else None
        if pin_i is not None and pin_j is not None and pin_i != pin_j:
            dropped += 1  # Case 3: two non-hubs already living in different parts
            event_parts.append(-1)
            continue
        cap = (1 + b) * max(sum(load) + 1, 0.1 * len(src)) / num_parts
        full = [load[q] + 1 > cap and load[q] > min(load) for q in range(num_parts)]
        pin = pin_i if pin_i is not None else pin_j
        if pin is not None and full[pin]:
            for x, px in ((i, pin_i), (j, pin_j)):
                if px is not None:
                    hubs.add(x)  # a dynamic hub
            pin = None
        if pin is not None:
            p = pin
        else:
            denom = cent[i] + cent[j]
            theta_i = cent[i] / denom if denom > 0 else 0.5
            theta_j = cent[j] / denom if denom > 0 else 0.5
            max_load, min_load = max(load), min(load)
            best, p = -math.inf, 0
            for q in range(num_parts):
                if full[q]:
                    continue
                h_i = 1.0 + (1.0 - theta_i) if q in parts_of[i] else 0.0
                h_j = 1.0 + (1.0 - theta_j) if q in parts_of[j] else 0.0
                score = h_i + h_j + lam * (max_load - load[q]) / (eps + max_load - min_load)
                if score > best:
                    best, p = score, q
        load[p] += 1
        event_parts.append(p)
        parts_of[i].add(p)
        parts_of[j].add(p)
    if info is not None:
        info["dynamic_hubs"] = len(hubs) - len(static_hubs)

    node_parts = []
    for i in range(num_nodes):
        a = parts_of[i]
        node_parts.append(-1 if len(a) > 1 else (next(iter(a)) if a else -2))
    counts = [0] * num_parts
    for x in node_parts:
        if x >= 0:
            counts[x] += 1
    for i, x in enumerate(node_parts):  # nodes absent from the stream: fewest-nodes part
        if x == -2:
            q = min(range(num_parts), key=lambda k: (counts[k], k))
            node_parts[i] = q
            counts[q] += 1
    return node_parts, load, dropped, static_hubs


def _finish(parts_of, num_parts):
    node_parts = [-1 if len(a) > 1 else (next(iter(a)) if a else -2) for a in parts_of]
    counts = [0] * num_parts
    for x in node_parts:
        if x >= 0:
            counts[x] += 1
    for i, x in enumerate(node_parts):
        if x == -2:
            q = min(range(num_parts), key=lambda k: (counts[k], k))
            node_parts[i] = q
            counts[q] += 1
    return node_parts


def reference_hdrf(src, dst, num_nodes, num_parts, lam=1.0, eps=1.0, event_parts=None):
    """HDRF with partial degrees, plain Python.  Returns (node_parts, loads); each event's
    part is appended to ``event_parts`` when given."""
    event_parts = [] if event_parts is None else event_parts
    parts_of = [set() for _ in range(num_nodes)]
    degree = [0] * num_nodes
    load = [0] * num_parts
    for i, j in zip(map(int, src), map(int, dst)):
        degree[i] += 1
        degree[j] += 1
        theta_i = degree[i] / (degree[i] + degree[j])
        theta_j = degree[j] / (degree[i] + degree[j])
        max_load, min_load = max(load), min(load)
        best, p = -math.inf, 0
        for q in range(num_parts):
            g_i = 1.0 + (1.0 - theta_i) if q in parts_of[i] else 0.0
            g_j = 1.0 + (1.0 - theta_j) if q in parts_of[j] else 0.0
            score = g_i + g_j + lam * (max_load - load[q]) / (eps + max_load - min_load)
            if score > best:
                best, p = score, q
        load[p] += 1
        event_parts.append(p)
        parts_of[i].add(p)
        parts_of[j].add(p)
    return _finish(parts_of, num_parts), load


def reference_greedy(src, dst, num_nodes, num_parts, event_parts=None):
    """PowerGraph greedy, plain Python.  Returns (node_parts, loads); each event's part is
    appended to ``event_parts`` when given."""
    event_parts = [] if event_parts is None else event_parts
    src, dst = list(map(int, src)), list(map(int, dst))
    remaining = [0] * num_nodes
    for i, j in zip(src, dst):
        remaining[i] += 1
        remaining[j] += 1
    parts_of = [set() for _ in range(num_nodes)]
    load = [0] * num_parts
    for i, j in zip(src, dst):
        a, b = parts_of[i], parts_of[j]
        if a & b:
            cand = a & b
        elif a and b:
            cand = a if remaining[i] > remaining[j] else b if remaining[j] > remaining[i] else a | b
        else:
            cand = a or b or set(range(num_parts))
        p = min(cand, key=lambda q: (load[q], q))
        load[p] += 1
        event_parts.append(p)
        remaining[i] -= 1
        remaining[j] -= 1
        a.add(p)
        b.add(p)
    return _finish(parts_of, num_parts), load


def reference_spread(src, dst, node_parts, event_parts, num_parts):
    """The shared-shared spread, plain Python: returns the new event parts.

    Loads without shared-shared events are filled to a common level (the lowest parts first;
    a remainder one each to the parts that end lowest, lowest id on ties); each part keeps the
    s-th of its own shared-shared events when floor((s + 1) keep / own) steps up, and every
    other one goes to the part with the largest remaining need."""
    out = list(event_parts)
    ss_events = [e for e in range(len(src)) if node_parts[src[e]] == -1 and node_parts[dst[e]] == -1]
    base = [0] * num_parts
    for e, k in enumerate(out):
        if k >= 0 and e not in set(ss_events):
            base[k] += 1
    own = [sum(1 for e in ss_events if out[e] == p) for p in range(num_parts)]
    total = len(ss_events)
    if not total:
        return out
    quota = [0] * num_parts
    for _ in range(total):  # one at a time onto the lowest part: the same integers as water filling
        p = min(range(num_parts), key=lambda q: (base[q] + quota[q], q))
        quota[p] += 1
    keep = [min(own[p], quota[p]) for p in range(num_parts)]
    need = [quota[p] - keep[p] for p in range(num_parts)]
    seen = [0] * num_parts
    for e in ss_events:
        k = out[e]
        if k >= 0:
            s = seen[k]
            seen[k] += 1
            if (s + 1) * keep[k] // own[k] > s * keep[k] // own[k]:
                continue
        best = max(range(num_parts), key=lambda q: (need[q], -q))
        need[best] -= 1
        out[e] = best
    return out
