"""speed: streaming edge partitioning and parallel training for temporal graph neural networks.

Read a raw event log, partition it with SEP into balanced sub-graph shards, and read any
group of parts back as a node-induced sub-graph::

    import speed
    events = speed.read_events("events.csv")
    split = speed.chronological_split(events)
    result = speed.partition(split.train(events), num_parts=4, topk=0.05)
    result.save("shards/", events=events, split=split)
    group = speed.load_shards("shards/").merge([0, 2])
"""

from .data import (
    FORMATS,
    Events,
    Split,
    chronological_split,
    generate_events,
    read_events,
    write_generated,
)
from .errors import InputError, MissingDependencyError
from .interop import from_dgl, part_graph, save_dgl_parts, to_dgl
from .train import MODELS, TemporalGNN, TrainConfig, Trainer, build_model, train
from .partition import (
    METHODS,
    PartitionResult,
    Partitioner,
    Shards,
    load_shards,
    node_centrality,
    partition,
    partition_metrics,
)

__version__ = "0.1.0"

__all__ = [
    "Events",
    "FORMATS",
    "InputError",
    "METHODS",
    "MODELS",
    "MissingDependencyError",
    "PartitionResult",
    "Partitioner",
    "Shards",
    "Split",
    "TemporalGNN",
    "TrainConfig",
    "Trainer",
    "build_model",
    "chronological_split",
    "from_dgl",
    "generate_events",
    "load_shards",
    "node_centrality",
    "partition",
    "part_graph",
    "partition_metrics",
    "read_events",
    "save_dgl_parts",
    "to_dgl",
    "train",
    "write_generated",
    "__version__",
]
