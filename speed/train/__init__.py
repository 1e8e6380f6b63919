"""Training: temporal GNN models, the engine, the evaluator, single-process and PAC runs.

Where things go:

* a model -- a row of :data:`speed.train.recipes.RECIPES` (new kinds of module in
  :mod:`speed.train.modules`, built in :func:`speed.train.models.build_model`);
* a hyperparameter -- a field of :class:`speed.train.config.TrainConfig` (the CLI follows);
* a negative-sampling strategy -- a :class:`speed.train.eval.negatives.NegativeSampler`;
* a sync rule -- :mod:`speed.train.pac.sync`.
"""

import importlib

# Submodules load on first use: most of them need torch, which takes seconds to import, and
# the CLI reads only the config to build its options.
_WHERE = {"train": "api", "TrainConfig": "config", "Batches": "engine", "CyclingBatches": "engine",
          "EarlyStopping": "engine", "Engine": "engine", "EpochLog": "engine", "Evaluator": "eval.evaluator",
          "NodeMemory": "state.memory", "MODELS": "recipes", "NodeStates": "state.nodes", "StateRows": "state.nodes",
          "StatefulModel": "models", "TemporalGNN": "models", "build_model": "models",
          "RecentNeighborSampler": "state.sampler", "Trainer": "trainer", "Predictor": "predictor",
          "load_run": "predictor", "update": "api", "UpdateConfig": "config", "OnlineUpdater": "online"}


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Batches", "CyclingBatches", "EarlyStopping", "Engine", "EpochLog", "Evaluator", "MODELS", "NodeMemory",
           "NodeStates", "Predictor", "RecentNeighborSampler", "StateRows", "StatefulModel", "TemporalGNN",
           "TrainConfig", "Trainer", "OnlineUpdater", "UpdateConfig", "build_model", "load_run", "train", "update"]
