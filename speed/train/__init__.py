"""Training: temporal GNN modules and models, the neighbour sampler, the trainer."""

from .memory import NodeMemory
from .models import MODELS, TemporalGNN, build_model
from .sampler import RecentNeighborSampler
from .trainer import TrainConfig, Trainer, train

__all__ = ["MODELS", "NodeMemory", "RecentNeighborSampler", "TemporalGNN", "TrainConfig", "Trainer",
           "build_model", "train"]
