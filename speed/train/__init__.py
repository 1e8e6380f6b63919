"""Training: temporal GNN models, the engine, the evaluator, single-process and PAC runs.

Rooms, lowest first (a module imports its own room and the rooms before it):

* the registries and the config (``recipes``, ``protocols``, ``config``, ``config_file``: no torch);
* ``state/`` -- node state, apart from the weights;
* ``model/`` -- the weights (modules, networks, a static memory) and building a run's model;
* ``step/`` -- one training step and one epoch: loader, engine, training negatives, optimiser,
  a process's device and seeds;
* ``run/`` -- a run's files: the folder's owner, checkpoints, the report, the Predictor, applying
  a run to files;
* ``eval/`` -- full-graph evaluation: protocols' negatives, metrics, EdgeBank;
* ``loop/`` -- the one trainer (its epoch loop), given its world, its training and its
  evaluation; a single process's training and evaluation;
* ``pac/`` -- parallel training: groups, sync, gather, a rank's training and its sharded
  evaluation, the launcher;
* ``online/`` -- updating a run with new events, in one process or in parallel;
* ``api`` -- ``speed.train`` and ``speed.update``.

Where things go: docs/architecture.md's "Where to add" table (each row shown by a test).
"""

import importlib

# Submodules load on first use: most of them need torch, which takes seconds to import, and
# the CLI reads only the config to build its options.
_WHERE = {"train": "api", "TrainConfig": "config", "Batches": "step.engine", "CyclingBatches": "step.engine",
          "EarlyStopping": "step.engine", "Engine": "step.engine", "EpochLog": "step.engine",
          "Evaluator": "eval.evaluator", "NodeMemory": "state.memory", "MODELS": "recipes", "NodeStates": "state.nodes",
          "StateRows": "state.nodes", "StatefulModel": "model.network", "TemporalGNN": "model.network",
          "build_model": "model.network", "RecentNeighborSampler": "state.sampler", "Trainer": "loop.trainer",
          "Predictor": "run.predictor", "load_run": "run.predictor", "update": "api", "UpdateConfig": "config",
          "OnlineUpdater": "online.update", "convert_run": "run.checkpoint"}


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Batches", "CyclingBatches", "EarlyStopping", "Engine", "EpochLog", "Evaluator", "MODELS", "NodeMemory",
           "NodeStates", "Predictor", "RecentNeighborSampler", "StateRows", "StatefulModel", "TemporalGNN",
           "TrainConfig", "Trainer", "OnlineUpdater", "UpdateConfig", "build_model", "convert_run", "load_run", "train",
           "update"]
