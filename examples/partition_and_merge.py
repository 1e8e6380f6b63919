"""Partition an event log with SEP and read groups of parts back.

    python examples/partition_and_merge.py [EVENTS.csv] [OUT_DIR]

Defaults to the shipped sample and a temporary directory.
"""

import sys
import tempfile
from pathlib import Path

import numpy as np

import speed


def main(path: str, out: str) -> None:
    events = speed.read_events(path)
    print(events)

    # 70/15/15 by time; the partitioner only ever sees the training period
    split = speed.chronological_split(events, seed=0)
    train = split.train(events)

    result = speed.partition(train, num_parts=4, topk=0.05)
    print(f"edge cut {result.edge_cut:.2%}, replication factor {result.replication_factor:.3f}, "
          f"{len(result.shared)} shared nodes")

    # shards keep val/test events too, so evaluation can run on the full graph later
    result.save(out, events=events, split=split, overwrite=True)
    shards = speed.load_shards(out)

    # the node-induced sub-graph of parts 0 and 2 (plus shared nodes): the events cut
    # between those two parts come back when they are merged
    group = shards.merge([0, 2], period="train")
    alone = len(shards.part(0, "train")) + len(shards.part(2, "train"))
    print(f"parts 0+2: {len(group)} training events "
          f"({len(group) - alone + result.stats['shared_shared_events']} recovered by merging)")
    assert np.all(np.diff(group.t) >= 0)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    path = sys.argv[1] if len(sys.argv) > 1 else str(here.parent / "data" / "sample.csv")
    out = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="speed-shards-")
    main(path, out)
