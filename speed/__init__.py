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

import sys

from .data import (
    FORMATS,
    Events,
    Split,
    chronological_split,
    generate_events,
    read_events,
    read_tgb,
    write_generated,
)
from .errors import InputError, MissingDependencyError
from .interop import from_dgl, from_pyg, part_graph, save_dgl_parts, to_dgl, to_pyg
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
    "Predictor",
    "Shards",
    "Split",
    "TemporalGNN",
    "TrainConfig",
    "Trainer",
    "build_model",
    "chronological_split",
    "convert_run",
    "from_dgl",
    "from_pyg",
    "generate_events",
    "load_run",
    "load_shards",
    "node_centrality",
    "partition",
    "part_graph",
    "partition_metrics",
    "read_events",
    "read_tgb",
    "save_dgl_parts",
    "to_dgl",
    "to_pyg",
    "train",
    "update",
    "write_generated",
    "__version__",
]

# Training needs torch and scikit-learn, which take seconds to import; `speed partition` and
# code that only partitions should not pay for them, so these names load on first use.
_LAZY = ("MODELS", "Predictor", "TemporalGNN", "TrainConfig", "Trainer", "build_model", "convert_run", "load_run",
         "update")


def __getattr__(name):
    if name in _LAZY:
        from . import train as _train_package  # noqa: F401  (binds the function, see _SpeedModule)
        import importlib

        value = getattr(importlib.import_module("speed.train"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'speed' has no attribute {name!r}")


class _SpeedModule(type(sys.modules[__name__])):
    """``speed.train`` is the training function, although ``speed/train/`` is also a package.

    Importing a submodule sets the parent's attribute to the submodule; this property keeps
    ``speed.train`` the function (imported on first use) whatever was imported first.
    """

    @property
    def train(self):
        from .train.api import train

        return train

    @train.setter
    def train(self, value):  # the import system binding the subpackage: keep the function
        pass


sys.modules[__name__].__class__ = _SpeedModule
