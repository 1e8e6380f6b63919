"""Partitioning: SEP (numba kernels in ``_kernels``), metrics and the shard format."""

from .centrality import node_centrality, select_hubs
from .metrics import partition_metrics
from .api import METHODS, PartitionResult, Partitioner, partition
from .shards import Shards, load_shards, write_shards

__all__ = ["METHODS", "PartitionResult", "Partitioner", "Shards", "load_shards", "node_centrality",
           "partition", "partition_metrics", "select_hubs", "write_shards"]
