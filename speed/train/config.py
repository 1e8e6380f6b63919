"""The one configuration of a training run: every default, choice and check lives here.

:class:`TrainConfig` is used unchanged by ``speed.train(...)``, by each PAC rank (spawned or
under torchrun) and by the ``speed train`` command, whose options are generated from the
fields below (their ``help``, ``choices`` and flag names are in each field's metadata).
``validate()`` runs once, at the public boundary (:func:`speed.train.api.train`); its errors
name the parameter (``batch_size``), and the CLI adds the flag (``--batch-size``).

To add a hyperparameter: add a field here with its help text, read it where it is used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Dict, Optional

from ..data.split import DEFAULT_TEST, DEFAULT_VAL
from .._util import Registered
from ..errors import InputError
from .._params import BOOLEAN, COUNT, FRACTION, POSITIVE, POSITIVE_INT, Interval, plain, problem  # noqa: F401
from ..partition.shards import SUBGRAPHS

# The evaluation negative strategies (drawn in speed.train.eval.negatives, which needs torch).
EVAL_STRATEGIES = ("random", "historical", "inductive")
from .recipes import AGGREGATORS, MESSAGES, RECIPES, STATIC_KINDS  # noqa: E402  (the model table; no torch)
# the protocol table; no torch
from .protocols import DEFAULT_PROTOCOL, PROTOCOLS, protocol_for_format  # noqa: E402

# Baselines evaluated like the models but never trained (speed.train.eval.edgebank).
# (each name: EdgeBank's memory mode, speed.train.eval.edgebank.run_edgebank)
BASELINES: Dict[str, str] = {"edgebank": "unlimited", "edgebank-window": "window"}

# How shared nodes' memories are combined: each rule's name and what it does; its function is in
# speed.train.pac.sync.COMBINE.  "none" (SYNC_MODES) leaves them apart.
SYNC_RULES: Dict[str, str] = {"last": "the latest state wins (ties: the lowest rank)",
                              "mean": "the mean of the ranks' states, at the latest time"}


SYNC_MODES = Registered(lambda: SYNC_RULES, lambda: ("none",))
EVAL_MODES = ("assemble", "replay")
SUBGRAPH_MODES = SUBGRAPHS
GROUPINGS = ("balanced", "random")
OBSERVE_MODES = ("none", "shared")
# The fields that decide a plan of a parallel run (`speed plan`), besides the architecture.
PLAN_RUN_FIELDS = ("model", "nproc", "epochs", "seed", "subgraph", "grouping", "shuffle")
# The fields that shape a model (what speed.train.model.network.build_model takes from a config).
ARCHITECTURE_FIELDS = ("memory_dim", "time_dim", "embedding_dim", "neighbors", "message", "aggregator",
                       "static_memory")
PLAN_FIELDS = PLAN_RUN_FIELDS + ARCHITECTURE_FIELDS
VALIDATION_MODES = ("full", "local")
STATE_PLACEMENTS = ("auto", "device", "host")


class ConfigError(InputError):
    """A bad hyperparameter; ``param`` names the :class:`TrainConfig` field."""

    def __init__(self, param: str, problem: str):
        self.param = param
        super().__init__(f"{param} {problem}")


def check_device(device, auto: bool = True) -> None:
    """The device rule of every run, trained or loaded: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``
    where CUDA is available, and ``"auto"`` (a GPU when there is one) where ``auto``."""
    names = "'auto', 'cpu' or 'cuda[:N]'" if auto else "'cpu' or 'cuda[:N]'"
    if not isinstance(device, str) or not (device == "cpu" or device.startswith("cuda") or (auto and device == "auto")):
        raise ConfigError("device", f"must be {names}, got {device!r}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("device", f"{device!r} requested but CUDA is not available")




def _opt(default, help: str, *, choices=None, rule=None, flag: Optional[str] = None,
         group: str = "train", cli: bool = True, metavar: Optional[str] = None):
    """A config field with its constraint (``choices``, or a ``rule`` of :mod:`speed._params`;
    None passes where it is the default) and what the CLI needs to expose it."""
    meta = {"help": help, "choices": choices, "rule": rule, "flag": flag, "group": group, "cli": cli,
            "metavar": metavar}
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
                      choices=Registered(lambda: RECIPES, lambda: BASELINES))
    epochs: int = _opt(10, "maximum epochs", rule=POSITIVE_INT)
    batch_size: int = _opt(200, "events per batch", rule=POSITIVE_INT)
    lr: float = _opt(1e-4, "Adam learning rate", rule=POSITIVE)
    memory_dim: int = _opt(100, "node memory width", rule=POSITIVE_INT)
    time_dim: int = _opt(100, "time encoding width", rule=POSITIVE_INT)
    embedding_dim: int = _opt(100, "embedding width", rule=POSITIVE_INT)
    neighbors: int = _opt(10, "sampled recent neighbours", rule=POSITIVE_INT)
    message: str = _opt("identity", "message function: the raw [s_self, s_other, time, features] (the papers'), "
                                    "or an MLP over it", choices=MESSAGES)
    aggregator: str = _opt("last", "how a node's pending events become one message: the latest one (the papers'), "
                                   "or their mean", choices=AGGREGATORS)
    static_memory: str = _opt("none", "DistTGL's static node memory, added to the dynamic memory before the "
                                      "embedding: none, an embedding table learned with the model, or one "
                                      "pre-trained on the training events and frozen", choices=STATIC_KINDS)
    static_lr: float = _opt(1e-3, "learning rate of a learned static table (its own sparse Adam; each row gets a "
                                  "step only when its node is in a batch, so it needs a larger rate than the "
                                  "weights; not scaled with the ranks, whose rows are not averaged)", rule=POSITIVE)
    device: str = _opt("auto", "auto, cpu, cuda or cuda:N")
    state_device: str = _opt("auto", "where node memories live while the weights compute on --device: auto (on the "
                                     "device when they take at most half of its free memory, else host memory), "
                                     "device, or host (each step then moves only its batch's rows)",
                             choices=STATE_PLACEMENTS)
    seed: int = _opt(0, "seed of weights, negatives and the split", rule=COUNT)
    max_steps: Optional[int] = _opt(None, "stop each epoch after N training steps (per rank under PAC), to measure "
                                          "steady-state speed on a large log without a whole epoch; such an epoch "
                                          "is reported as cut, and is neither validated nor saved as the best",
                                    metavar="N", rule=POSITIVE_INT)
    eval_max_steps: Optional[int] = _opt(None, "a measuring aid: score only the first N batches of each "
                                               "evaluation pass (val, test, their new-node passes), the state "
                                               "back-ups, neighbour graph and write of best.json staying those of a "
                                               "full evaluation; with --max-steps a cut epoch is then validated, "
                                               "tested and saved, so a short run of a large log goes through every "
                                               "phase of a whole one (to read its memory peaks against `speed "
                                               "plan`). Its figures cover those batches only, and the run says so",
                                         metavar="N", rule=POSITIVE_INT)
    patience: int = _opt(5, "epochs without validation AP gain before stopping", rule=POSITIVE_INT)
    mrr_negatives: int = _opt(0, "also report test MRR and Hits@1/3/10 against K negative destinations per event "
                                 "(TGB's ranking: filtered, ties count half)", metavar="K", rule=COUNT)
    protocol: Optional[str] = _opt(None, "evaluation protocol: TGN's (10%% of nodes held out, per-batch AP, a "
                                         "new-node pass), DyGLib's (the same, with historical and inductive "
                                         "negatives), or TGB's (transductive, ranked against hist_rnd candidates, "
                                         "selected on val MRR); default tgn, or tgb for a TGB dataset",
                                   choices=Registered(lambda: PROTOCOLS))
    eval_negatives: str = _opt("random", "evaluation negatives (Poursafaei et al. 2022): random destinations, or "
                                         "historical / inductive edges (DyGLib's protocol; training negatives stay "
                                         "random)", choices=Registered(lambda: EVAL_STRATEGIES))
    pipeline: Optional[bool] = _opt(None, "plan the next batch (sampling, negatives, pending events, features, "
                                          "copies to the device) in a background thread while this one computes "
                                          "(after MSPipe); default: on with a GPU; on a CPU off in training, where the "
                                          "step's threads take every core, and measured in evaluation, whose "
                                          "first long pass tries both and keeps the faster",
                                    rule=BOOLEAN)
    plan_threads: Optional[int] = _opt(None, "with the pipeline, threads that build the plans: with 2 or 3, each "
                                             "plan is built in stages (neighbours; memory keys and pending events; "
                                             "assembly and padding), each stage in a thread of its own and on a batch "
                                             "of its own, so three plans are under way at once; default: 3 with "
                                             "--cuda-graph on a GPU and 4 or more threads, else 1", metavar="N", rule=POSITIVE_INT)
    staleness: int = _opt(0, "with --pipeline, let a step read node memory up to K batches stale, so memory reads "
                             "are planned ahead too (MSPipe's bounded staleness; 0: exact)", metavar="K", rule=COUNT)
    deterministic: bool = _opt(False, "deterministic torch algorithms", rule=BOOLEAN)
    cuda_graph: bool = _opt(False, "pad each training step's plan to a fixed shape and replay the step (forward, "
                                   "loss, state writes, backward, Adam) from a CUDA graph recorded once per shape: "
                                   "one launch a step instead of hundreds (one process, or PAC's ranks with their "
                                   "gradients averaged between two graphs; TGN and JODIE with the last "
                                   "aggregator, no static memory; without a GPU the same fixed-shape step runs "
                                   "eagerly)", rule=BOOLEAN)
    num_threads: Optional[int] = _opt(None, "torch and numba threads (default: this process's share of the cores idle at "
                                      "start; PAC CPU ranks: of cores / N)",
                                      flag="--threads", metavar="N", rule=POSITIVE_INT)
    val: float = _opt(DEFAULT_VAL, "validation fraction of an event log", cli=False, rule=FRACTION)
    test: float = _opt(DEFAULT_TEST, "test fraction of an event log", cli=False, rule=FRACTION)
    new_node_fraction: Optional[float] = _opt(None, "hold out int(F x nodes) of the nodes seen in val/test for the "
                                                    "inductive metric (default: the protocol's, 0.1 for tgn and "
                                                    "dyglib, 0 for tgb); 0 trains transductively, on every training "
                                                    "event, as PyG's example and TGB do", metavar="F", rule=FRACTION)
    split_times: Optional[tuple] = _opt(None, "split an event log at (val_time, test_time) instead of the "
                                              "fractions (the CLI's --split-times)", cli=False)
    node_classification: bool = _opt(True, "dynamic node classification where labels exist", cli=False,
                                      rule=BOOLEAN)
    resume: bool = _opt(False, "continue the run in --out from its last epoch", rule=BOOLEAN)
    progress: Optional[bool] = _opt(None, "progress bars", flag="--no-progress", cli=False, rule=BOOLEAN)
    # ---- parallel training (PAC) over a shards directory
    nproc: Optional[int] = _opt(None, "processes to spawn, one per GPU or CPU share (parts must be a multiple of "
                                      "it)", group="pac", metavar="N", rule=POSITIVE_INT)
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
                           group="pac", metavar="K", rule=COUNT)
    # 1 by default: DDP's gradient averaging, as the paper's PAC.  K > 1 trades exactness for
    # fewer lock-step meetings of the ranks (speed.train.pac.averaging; docs/parallel.md).
    average_every: int = _opt(1, "average the ranks' weights every K steps instead of their gradients every step "
                                 "(local SGD: each rank steps on its own gradients in between; 1: gradient "
                                 "averaging, the paper's)", group="pac", metavar="K", rule=POSITIVE_INT)
    validation: str = _opt("full", "per-epoch validation on the full graph, exact, spread over the ranks; or by "
                                   "every rank on the val events of its own group (an approximation for early "
                                   "stopping; the reported val and test stay exact)", choices=VALIDATION_MODES,
                           group="pac")
    val_every: int = _opt(1, "validate every E epochs (and after the last); early stopping counts validations",
                          metavar="E", rule=POSITIVE_INT)
    shuffle: bool = _opt(True, "reshuffle the parts over the ranks every epoch", flag="--no-shuffle", group="pac",
                         rule=BOOLEAN)
    grouping: str = _opt("balanced", "how parts are grouped onto ranks: groups near equal in training events "
                                     "(drawn among the balanced groupings each epoch), or equal numbers of parts "
                                     "at random (the paper's Alg. 2)", choices=GROUPINGS, group="pac")
    eval: str = _opt("assemble", "evaluate on the memory the ranks trained (brought to its owners), or replay all "
                                 "events", choices=EVAL_MODES, group="pac")
    lr_scaling: bool = _opt(True, "multiply lr by the number of ranks", flag="--no-lr-scaling", group="pac",
                             rule=BOOLEAN)
    timeout: float = _opt(300.0, "seconds a collective of training or evaluation may wait (the waits on rank 0's "
                                 "decisions and its writing of best.json may take up to a day)", group="pac",
                          rule=POSITIVE)

    # ------------------------------------------------------------------ checks
    def validate(self) -> "TrainConfig":
        """Check every field; raises :class:`ConfigError` naming the first bad one.

        Each field's own rule or choices come from its metadata (``rule``, ``choices``; checked
        by :func:`speed._params.problem`, and a numpy scalar kept as the Python value it stands
        for); what depends on several fields is checked below."""
        for f in fields(self):
            v, meta = getattr(self, f.name), f.metadata
            if v is None and f.default is None:
                continue
            for rule in (meta.get("choices"), meta.get("rule")):
                why = problem(rule, v)
                if why:
                    raise ConfigError(f.name, why)
            setattr(self, f.name, plain(v))
        if self.staleness and self.pipeline is not True:
            raise ConfigError("staleness", "needs the pipeline (pipeline=True, --pipeline)")
        if self.cuda_graph and (self.deterministic or self.staleness or self.average_every > 1):
            why = "--deterministic, whose path is the eager step" if self.deterministic else \
                "--staleness (rows read ahead)" if self.staleness else \
                "--average-every K > 1 (local SGD averages in the DDP wrapper, which a captured step goes without)"
            raise ConfigError("cuda_graph", f"is not for {why}")
        if self.split_times is not None:
            from ..data.split import check_times

            try:
                self.split_times = check_times(self.split_times)
            except InputError as exc:
                raise ConfigError("split_times", str(exc).replace("split times ", "")) from None
        spec = PROTOCOLS[self.protocol or DEFAULT_PROTOCOL]
        if self.eval_negatives in EVAL_STRATEGIES and self.eval_negatives not in spec.strategies:
            raise ConfigError("eval_negatives", f"{self.eval_negatives!r} is DyGLib's: the {spec.name} protocol has "
                                                f"{', '.join(spec.strategies)} negatives (use protocol dyglib)")
        if spec.transductive and self.new_node_fraction:
            raise ConfigError("new_node_fraction", f"must be 0 under {spec.title}'s protocol, which is transductive")
        if self.observe != "none" and self.subgraph != "assigned":
            raise ConfigError("observe", f"needs subgraph 'assigned' (with {self.subgraph!r} a rank trains those "
                                         "events already)")
        refusal = RECIPES[self.model].refuses_unscored_events() if self.model in RECIPES else ""
        if self.observe != "none" and refusal:
            raise ConfigError("observe", f"is not for {self.model}, {refusal}")
        check_device(self.device)
        return self

    def for_data(self, fmt: Optional[str]) -> "TrainConfig":
        """This config with the protocol decided for a log of input format ``fmt``: the one
        given, else TGB's for a TGB dataset and TGN's otherwise."""
        if self.protocol is not None:
            return self
        return replace(self, protocol=protocol_for_format(fmt)).validate()

    @property
    def protocol_name(self) -> str:
        """The protocol this run uses (TGN's unless decided otherwise, see :meth:`for_data`)."""
        return self.protocol or DEFAULT_PROTOCOL

    @property
    def hold_out(self) -> float:
        """The new-node fraction this run uses: the one given, else the protocol's."""
        return PROTOCOLS[self.protocol_name].new_node_fraction if self.new_node_fraction is None \
            else self.new_node_fraction

    def pipeline_on(self, device) -> bool:
        """Whether steps are planned in a background thread on ``device`` (``pipeline`` None:
        with a GPU)."""
        if self.pipeline is not None:
            return bool(self.pipeline)
        return getattr(device, "type", str(device)) == "cuda"

    def paces_evaluation(self, device) -> bool:
        """Whether the evaluation passes one process computes whole measure planning ahead
        against planning in the step and keep the faster (:mod:`speed.train.eval.pacing`): on a
        CPU when ``pipeline`` is unset, except under ``--deterministic`` (its path stays fixed)
        and ``--cuda-graph``.  Training's steps stay in the step on a CPU: beside the backward,
        a planning thread measured little faster (TGN at width 4, 2 threads: 62-66k against
        58-61k events/s) and slower with torch's threads left as they were."""
        if self.pipeline is not None or self.deterministic or self.cuda_graph:
            return False
        return getattr(device, "type", str(device)) == "cpu"

    def pipeline_threads(self, device, captured: bool = False) -> int:
        """Threads that plan ahead on ``device``: 0 without the pipeline (:meth:`pipeline_on`),
        else ``plan_threads``; by default 3 (a plan's stages each in its own) for steps replayed
        from a CUDA graph (``captured``) on a GPU with 4 or more threads in this process, else 1.

        Why only there: a replayed step leaves the interpreter to the planning threads, and on an
        H100 three threads planned batch-1000 steps 1.76x as fast (TGN, 300k events: 299.9k
        against 170.5k events/s).  An eager step dispatches its operators under the interpreter
        lock the planning threads want too: there three threads made batch-1000 training 0.82x
        as fast and a val pass 0.51-0.79x (single runs; docs/training.md, 'A plan in stages').
        With ``--cuda-graph`` evaluation replays its steps too, and takes the same count."""
        if not self.pipeline_on(device):
            return 0
        if self.plan_threads is not None:
            return int(self.plan_threads)
        import torch

        gpu = getattr(device, "type", str(device)) == "cuda"
        return 3 if captured and gpu and torch.get_num_threads() >= 4 else 1

    @property
    def parallel(self) -> bool:
        return self.nproc is not None

    def architecture(self) -> Dict[str, Any]:
        """The fields :func:`~speed.train.model.network.build_model` takes (:data:`ARCHITECTURE_FIELDS`)."""
        return {k: getattr(self, k) for k in ARCHITECTURE_FIELDS}

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


# each field of UpdateConfig and what it may be (lr and progress may also be None: the default)
UPDATE_RULES = {"passes": POSITIVE_INT, "replay": Interval(float, 0, 10, high_open=False), "train": BOOLEAN,
                "mrr": BOOLEAN, "mrr_negatives": POSITIVE_INT, "lr": POSITIVE, "windows": POSITIVE_INT,
                "seed": COUNT, "progress": BOOLEAN}


@dataclass
class UpdateConfig:
    """How :func:`speed.train.online.update.update` takes in new events (the one place of these
    defaults; the CLI reads them).

    Attributes
    ----------
    passes : int
        Passes of training over the increment (>= 1).
    replay : float
        Earlier interactions added to each step's loss, as a fraction of the batch (0: none).
    train : bool
        Train on the new events (False: memory only, the weights fixed).
    mrr : bool
        Also rank each event against ``mrr_negatives`` random destinations (MRR, Hits@10).
    mrr_negatives : int
    lr : float, optional
        Learning rate of the updates (default: 10 x the run's, ``speed.train.online.update.LR_SCALE``).
    windows : int
        Slices of the increment scored apart in ``metrics.json`` (the plot's points).
    seed : int
        Seeds the negatives and the replay draws.
    device : str
    progress : bool, optional
    """

    passes: int = 1
    replay: float = 0.0
    train: bool = True
    mrr: bool = False
    mrr_negatives: int = 100
    lr: Optional[float] = None
    windows: int = 10
    seed: int = 0
    device: str = "cpu"
    progress: Optional[bool] = None

    def validate(self) -> "UpdateConfig":
        """Check every field (:data:`UPDATE_RULES`, :mod:`speed._params`); raises
        :class:`~speed.errors.InputError` naming the first bad one."""
        for name, rule in UPDATE_RULES.items():
            v = getattr(self, name)
            if v is None and name in ("lr", "progress"):
                continue
            why = problem(rule, v)
            if why:
                raise InputError(f"{name} {why}")
            setattr(self, name, plain(v))
        if not self.train and (self.passes != 1 or self.replay):
            raise InputError("passes and replay train the weights: they do not go with train=False (memory only)")
        return self
