"""Training: temporal GNN models, the engine, the evaluator, single-process and PAC runs.

Where things go:

* a model -- a composition in :func:`speed.train.models.build_model` (new parts in
  :mod:`speed.train.modules`) and its name in ``models.MODELS``;
* a hyperparameter -- a field of :class:`speed.train.config.TrainConfig` (the CLI follows);
* a negative-sampling strategy -- a :class:`speed.train.negatives.NegativeSampler`;
* a sync rule -- :mod:`speed.train.pac.sync`.
"""

from .api import train
from .config import TrainConfig
from .engine import Batches, CyclingBatches, EarlyStopping, Engine, EpochLog
from .evaluator import Evaluator
from .memory import NodeMemory
from .models import MODELS, NodeState, TemporalGNN, build_model
from .sampler import RecentNeighborSampler
from .trainer import Trainer

__all__ = ["Batches", "CyclingBatches", "EarlyStopping", "Engine", "EpochLog", "Evaluator", "MODELS", "NodeMemory",
           "NodeState", "RecentNeighborSampler", "TemporalGNN", "TrainConfig", "Trainer", "build_model", "train"]
