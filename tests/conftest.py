import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# The tests' one small model: training options that keep a run to seconds (a test adds what it
# pins, e.g. {**TINY, "epochs": 1, "seed": 0}).
TINY = dict(memory_dim=8, time_dim=8, embedding_dim=8, neighbors=3, batch_size=100, progress=False, num_threads=1)


def pytest_sessionfinish(session, exitstatus):
    """Stop any child process a test left behind: multiprocessing joins its non-daemon children
    at interpreter exit, so one hung child would keep the run from ending after its last test."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.terminate()
        child.join(timeout=5)
        if child.is_alive():
            child.kill()


@pytest.fixture
def shared_data():
    if not (SHARED_DATA / "wikipedia.csv").exists():
        pytest.skip(f"real data not found at {SHARED_DATA}")
    return SHARED_DATA


def generated_shards(folder: Path, nodes: int, events: int, seed: int, parts: int, *options: str) -> Path:
    """A generated log of ``events`` events over ``nodes`` nodes, partitioned into ``parts`` parts
    by ``speed partition`` (with ``options``) into ``folder/s``; returns the shards' path."""
    import speed
    from speed.cli import main

    log = speed.write_generated(folder / "log.csv", nodes, events, seed=seed)
    assert main(["partition", str(log), "-o", str(folder / "s"), "--parts", str(parts), *options,
                 "--no-progress"]) == 0
    return folder / "s"


def random_stream(rng, num_nodes, num_events, bipartite=False):
    """Random (src, dst, t) with sorted integer times and a skewed node distribution."""
    w = 1.0 / np.arange(1, num_nodes + 1)
    w /= w.sum()
    src = rng.choice(num_nodes, size=num_events, p=w)
    dst = rng.choice(num_nodes, size=num_events, p=w[::-1] if bipartite else w)
    t = np.sort(rng.integers(0, 10 * num_events + 1, size=num_events))
    return src.astype(np.int64), dst.astype(np.int64), t
