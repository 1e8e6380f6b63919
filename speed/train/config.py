"""The one configuration of a training run: every default, choice and check lives here.

:class:`TrainConfig` is used unchanged by ``speed.train(...)``, by each PAC rank (spawned or
under torchrun) and by the ``speed train`` command, whose options are generated from the
fields below (their ``help``, ``choices`` and flag names are in each field's metadata).
``validate()`` runs once, at the public boundary (:func:`speed.train.api.train`); its errors
name the parameter (``batch_size``), and the CLI adds the flag (``--batch-size``).

To add a hyperparameter: add a field here with its help text, read it where it is used.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Dict, Optional

from ..data.split import DEFAULT_TEST, DEFAULT_VAL
from ..errors import InputError
from ..partition.shards import SUBGRAPHS

# The evaluation negative strategies (drawn in speed.train.negatives, which needs torch).
EVAL_STRATEGIES = ("random", "historical", "inductive")
from .recipes import AGGREGATORS, MESSAGES, MODELS, STATIC_KINDS  # noqa: E402  (the model table; no torch)
from .protocols import PROTOCOL_NAMES, PROTOCOLS  # noqa: E402  (the protocol table; no torch)

DEFAULT_PROTOCOL = "tgn"
# Baselines evaluated like the models but never trained (speed.train.edgebank).
BASELINES = ("edgebank", "edgebank-window")

SYNC_MODES = ("last", "mean", "none")
EVAL_MODES = ("assemble", "replay")
SUBGRAPH_MODES = SUBGRAPHS
GROUPINGS = ("balanced", "random")
OBSERVE_MODES = ("none", "shared")
VALIDATION_MODES = ("local", "full")


class ConfigError(InputError):
    """A bad hyperparameter; ``param`` names the :class:`TrainConfig` field."""

    def __init__(self, param: str, problem: str):
        self.param = param
        super().__init__(f"{param} {problem}")


def _opt(default, help: str, *, choices=None, flag: Optional[str] = None, group: str = "train", cli: bool = True,
         metavar: Optional[str] = None):
    """A config field with what the CLI needs to expose it."""
    meta = {"help": help, "choices": choices, "flag": flag, "group": group, "cli": cli, "metavar": metavar}
    return field(default=default, metadata=meta)


@dataclass
class TrainConfig:
    """Hyperparameters of a training run, single-process or parallel (stored unchanged in
    ``metrics.json`` and in checkpoints).

    ``nproc=None`` trains in this process; an integer N runs PAC with N ranks over a shards
    directory (``speed train --nproc N``).  Under torchrun the world size comes from the
    environment instead.
    """

    model: str = _opt("tgn", "model, or a memorisation baseline (EdgeBank, unlimited or time-window memory)",
                      choices=MODELS + BASELINES)
    epochs: int = _opt(10, "maximum epochs")
    batch_size: int = _opt(200, "events per batch")
    lr: float = _opt(1e-4, "Adam learning rate")
    memory_dim: int = _opt(100, "node memory width")
    time_dim: int = _opt(100, "time encoding width")
    embedding_dim: int = _opt(100, "embedding width")
    neighbors: int = _opt(10, "sampled recent neighbours")
    message: str = _opt("identity", "message function: the raw [s_self, s_other, time, features] (the papers'), "
                                    "or an MLP over it", choices=MESSAGES)
    aggregator: str = _opt("last", "how a node's pending events become one message: the latest one (the papers'), "
                                   "or their mean", choices=AGGREGATORS)
    static_memory: str = _opt("none", "DistTGL's static node memory, added to the dynamic memory before the "
                                      "embedding: none, an embedding table learned with the model, or one "
                                      "pre-trained on the training events and frozen", choices=STATIC_KINDS)
    static_lr: float = _opt(1e-3, "learning rate of a learned static table (its own sparse Adam; each row gets a "
                                  "step only when its node is in a batch, so it needs a larger rate than the "
                                  "weights; not scaled with the ranks, whose rows are not averaged)")
    device: str = _opt("auto", "auto, cpu, cuda or cuda:N")
    seed: int = _opt(0, "seed of weights, negatives and the split")
    patience: int = _opt(5, "epochs without validation AP gain before stopping")
    mrr_negatives: int = _opt(0, "also report test MRR and Hits@1/3/10 against K negative destinations per event "
                                 "(TGB's ranking: filtered, ties count half)", metavar="K")
    protocol: Optional[str] = _opt(None, "evaluation protocol: TGN's (10%% of nodes held out, per-batch AP, a "
                                         "new-node pass), DyGLib's (the same, with historical and inductive "
                                         "negatives), or TGB's (transductive, ranked against hist_rnd candidates, "
                                         "selected on val MRR); default tgn, or tgb for a TGB dataset",
                                   choices=PROTOCOL_NAMES)
    eval_negatives: str = _opt("random", "evaluation negatives (Poursafaei et al. 2022): random destinations, or "
                                         "historical / inductive edges (DyGLib's protocol; training negatives stay "
                                         "random)", choices=EVAL_STRATEGIES)
    pipeline: bool = _opt(False, "plan the next batch (sampling, negatives, pending events, features, copies to "
                                 "the device) in a background thread while this one computes (after MSPipe)")
    staleness: int = _opt(0, "with --pipeline, let a step read node memory up to K batches stale, so memory reads "
                             "are planned ahead too (MSPipe's bounded staleness; 0: exact)", metavar="K")
    deterministic: bool = _opt(False, "deterministic torch algorithms")
    num_threads: Optional[int] = _opt(None, "torch threads (default: torch's choice; PAC CPU ranks: cores / N)",
                                      flag="--threads", metavar="N")
    val: float = _opt(DEFAULT_VAL, "validation fraction of an event log", cli=False)
    test: float = _opt(DEFAULT_TEST, "test fraction of an event log", cli=False)
    new_node_fraction: Optional[float] = _opt(None, "hold out int(F x nodes) of the nodes seen in val/test for the "
                                                    "inductive metric (default: the protocol's, 0.1 for tgn and "
                                                    "dyglib, 0 for tgb); 0 trains transductively, on every training "
                                                    "event, as PyG's example and TGB do", metavar="F")
    split_times: Optional[tuple] = _opt(None, "split an event log at (val_time, test_time) instead of the "
                                              "fractions (the CLI's --split-times)", cli=False)
    node_classification: bool = _opt(True, "dynamic node classification where labels exist", cli=False)
    resume: bool = _opt(False, "continue the run in --out from its last epoch")
    progress: Optional[bool] = _opt(None, "progress bars", flag="--no-progress", cli=False)
    # ---- parallel training (PAC) over a shards directory
    nproc: Optional[int] = _opt(None, "processes to spawn, one per GPU or CPU share (parts must be a multiple of "
                                      "it)", group="pac", metavar="N")
    subgraph: str = _opt("assigned", "what a rank trains on: the events assigned to its parts (each training "
                                     "event once per epoch), or the node-induced sub-graph of its parts (events "
                                     "between shared nodes on every rank, as in the paper)",
                         choices=SUBGRAPH_MODES, group="pac")
    sync: str = _opt("last", "shared-node memory rule: latest state wins, mean, or none", choices=SYNC_MODES,
                     group="pac")
    observe: str = _opt("none", "with --subgraph assigned, also take in (as pending events and neighbours, without "
                                "training on them) the events between shared nodes that other ranks train, so a "
                                "shared node's memory sees all its events between shared nodes (not TIGE)",
                        choices=OBSERVE_MODES, group="pac")
    # Every 20 steps by default: with syncs only at the end of an epoch, weights trained on shards
    # with many shared nodes fell below chance on the full graph in 2 of 6 seeds (e-mail-like
    # log); every 20 steps none did, at about 1% of the epoch; every 5 or 10 steps was no better
    # (docs/parallel.md, 'Weights that do not transfer').
    sync_every: int = _opt(20, "also synchronise shared nodes every K steps (0: only at the end of an epoch)",
                           group="pac", metavar="K")
    # 1 by default: DDP's gradient averaging, as the paper's PAC.  K > 1 trades exactness for
    # fewer lock-step meetings of the ranks (speed.train.pac.averaging; docs/parallel.md).
    average_every: int = _opt(1, "average the ranks' weights every K steps instead of their gradients every step "
                                 "(local SGD: each rank steps on its own gradients in between; 1: gradient "
                                 "averaging, the paper's)", group="pac", metavar="K")
    validation: str = _opt("local", "per-epoch validation by every rank on the val events of its group at once "
                                    "(an approximation for early stopping; the reported val and test stay exact), "
                                    "or on the full graph by rank 0 alone", choices=VALIDATION_MODES, group="pac")
    val_every: int = _opt(1, "validate every E epochs (and after the last); early stopping counts validations",
                          metavar="E")
    shuffle: bool = _opt(True, "reshuffle the parts over the ranks every epoch", flag="--no-shuffle", group="pac")
    grouping: str = _opt("balanced", "how parts are grouped onto ranks: groups near equal in training events "
                                     "(drawn among the balanced groupings each epoch), or equal numbers of parts "
                                     "at random (the paper's Alg. 2)", choices=GROUPINGS, group="pac")
    eval: str = _opt("assemble", "evaluate on a memory gathered from the ranks, or replay all events",
                     choices=EVAL_MODES, group="pac")
    lr_scaling: bool = _opt(True, "multiply lr by the number of ranks", flag="--no-lr-scaling", group="pac")
    timeout: float = _opt(300.0, "seconds a collective may wait", group="pac")

    # ------------------------------------------------------------------ checks
    def validate(self) -> "TrainConfig":
        """Check every field; raises :class:`ConfigError` naming the first bad one."""
        if self.model not in MODELS + BASELINES:
            raise ConfigError("model", f"must be one of {', '.join(MODELS + BASELINES)}, got {self.model!r}")
        for name in ("epochs", "batch_size", "memory_dim", "time_dim", "embedding_dim", "neighbors", "patience",
                     "val_every", "average_every"):
            _positive_int(name, getattr(self, name))
        for name in ("num_threads", "nproc"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        if self.staleness and not self.pipeline:
            raise ConfigError("staleness", "needs the pipeline (pipeline=True, --pipeline)")
        for name in ("mrr_negatives", "sync_every", "staleness"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(name, f"must be an integer >= 0, got {v!r}")
        for name in ("lr", "static_lr"):
            if not (_number(getattr(self, name)) and getattr(self, name) > 0):
                raise ConfigError(name, f"must be a positive number, got {getattr(self, name)!r}")
        if not (_number(self.timeout) and self.timeout > 0):
            raise ConfigError("timeout", f"must be a positive number, got {self.timeout!r}")
        if self.split_times is not None:
            from ..data.split import check_times

            try:
                self.split_times = check_times(self.split_times)
            except InputError as exc:
                raise ConfigError("split_times", str(exc).replace("split times ", "")) from None
        for name in ("val", "test") + (("new_node_fraction",) if self.new_node_fraction is not None else ()):
            x = getattr(self, name)
            if not (_number(x) and 0 <= x < 1):
                raise ConfigError(name, f"must be a fraction in [0, 1), got {x!r}")
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise ConfigError("protocol", f"must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        spec = PROTOCOLS[self.protocol or DEFAULT_PROTOCOL]
        if self.eval_negatives in EVAL_STRATEGIES and self.eval_negatives not in spec.strategies:
            raise ConfigError("eval_negatives", f"{self.eval_negatives!r} is DyGLib's: the {spec.name} protocol has "
                                                f"{', '.join(spec.strategies)} negatives (use protocol dyglib)")
        if spec.name == "tgb" and self.new_node_fraction:
            raise ConfigError("new_node_fraction", "must be 0 under TGB's protocol, which is transductive")
        for name, options in (("sync", SYNC_MODES), ("eval", EVAL_MODES), ("subgraph", SUBGRAPH_MODES),
                              ("grouping", GROUPINGS), ("observe", OBSERVE_MODES), ("validation", VALIDATION_MODES), ("eval_negatives", EVAL_STRATEGIES),
                              ("message", MESSAGES), ("aggregator", AGGREGATORS),
                              ("static_memory", STATIC_KINDS)):
            if getattr(self, name) not in options:
                raise ConfigError(name, f"must be one of {', '.join(options)}, got {getattr(self, name)!r}")
        if self.observe != "none" and self.subgraph != "assigned":
            raise ConfigError("observe", f"needs subgraph 'assigned' (with {self.subgraph!r} a rank trains those "
                                         "events already)")
        if self.observe != "none" and self.model == "tige":
            raise ConfigError("observe", "is not for tige, whose messages carry each event's embeddings")
        if not isinstance(self.device, str) or (self.device not in ("auto", "cpu")
                                                and not self.device.startswith("cuda")):
            raise ConfigError("device", f"must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("device", f"{self.device!r} requested but CUDA is not available")
        return self

    def for_data(self, fmt: Optional[str]) -> "TrainConfig":
        """This config with the protocol decided for a log of input format ``fmt``: the one
        given, else TGB's for a TGB dataset and TGN's otherwise."""
        if self.protocol is not None:
            return self
        return replace(self, protocol="tgb" if fmt == "tgb" else DEFAULT_PROTOCOL).validate()

    @property
    def protocol_name(self) -> str:
        """The protocol this run uses (TGN's unless decided otherwise, see :meth:`for_data`)."""
        return self.protocol or DEFAULT_PROTOCOL

    @property
    def hold_out(self) -> float:
        """The new-node fraction this run uses: the one given, else the protocol's."""
        return PROTOCOLS[self.protocol_name].new_node_fraction if self.new_node_fraction is None \
            else self.new_node_fraction

    @property
    def parallel(self) -> bool:
        return self.nproc is not None

    def to_dict(self) -> Dict[str, Any]:
        """The fields as stored in ``metrics.json`` and checkpoints (``progress`` is a display choice)."""
        return {k: v for k, v in asdict(self).items() if k != "progress"}


def cli_flag(f) -> str:
    """The command-line flag of a config field."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def flag_of(param: str) -> Optional[str]:
    """The flag of parameter ``param``, or None if the CLI does not expose it."""
    for f in fields(TrainConfig):
        if f.name == param:
            return cli_flag(f)
    return None


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _positive_int(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(name, f"must be an integer >= 1, got {v!r}")
