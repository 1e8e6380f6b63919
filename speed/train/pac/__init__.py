"""PAC: parallel training over shards (the SPEED paper, §II-C, Alg. 2).

One process per GPU (or CPU share) trains the same model with DDP (the world's wrapper) on the
sub-graph of its group of parts.  The modules, one job each:

* :mod:`.groups` -- which parts a rank trains on each epoch, and its sub-graph in local ids;
* :mod:`.sync` -- the shared-node sync rules (``last``, ``mean``, ``none``); a new rule is a
  function in :data:`~.sync.COMBINE` and a name in ``config.SYNC_RULES``;
* :mod:`.averaging` -- local SGD (``average_every``): weights averaged every K steps;
* :mod:`.gather` -- a rank's node rows in global ids, as it sends them to their owners;
* :mod:`.sharded` -- the owners of each node's rows while evaluating, the trained state brought
  to them, and each step's embeddings shared out among the ranks;
* :mod:`.rank` -- one rank's training: the shared :class:`~speed.train.step.engine.Engine` and
  epoch loop, plus groups, sync and state exchange;
* :mod:`.evaluation` -- its evaluation: the full graph, exact, streamed by all ranks together
  with the state sharded by owner (or per-rank validation, ``validation="local"``, :mod:`.validate`);
* :mod:`.log` -- the whole log in time order, one copy on disk mapped by every rank;
* :mod:`.budget` -- ``speed plan``: what a run would put on each rank, without training;
* :mod:`.launch` -- spawning N ranks, or running as one rank under torchrun.
"""

from .groups import RankGraph, check_world, part_groups, rank_graph
from .launch import RankFailedError, run_parallel, under_torchrun
from .sync import combine_shared, sync_shared

__all__ = ["RankFailedError", "RankGraph", "check_world", "combine_shared", "part_groups", "rank_graph",
           "run_parallel", "sync_shared", "under_torchrun"]
