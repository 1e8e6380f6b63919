"""The models, as recipes: which modules of :mod:`speed.train.model.modules` each one is built from.

This table is the one place a model is named.  It needs no torch, so the command line lists
the models without importing it; :func:`speed.train.model.network.build_model` turns a recipe into a
:class:`~speed.train.model.network.TemporalGNN`.

To add a model made of existing modules: one row here.  A new kind of module goes in
:mod:`speed.train.model.modules`, with its name in the choices below and its construction in
``build_model``.  A new kind of per-node state: a component in
:mod:`speed.train.state.components`, named in the row's ``state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple


@dataclass(frozen=True)
class Recipe:
    """How a memory-based temporal GNN is composed.

    Attributes
    ----------
    updater : {"gru", "rnn"}
        The memory updater ``s' = UPD(msg, s)``.
    embedding : {"attention", "time_projection", "identity"}
        ``z_i(t)`` from the memory: temporal graph attention over recent neighbours, JODIE's
        time projection ``(1 + w·Δt) ∘ s``, or the memory itself.
    message_other : {"memory", "attention"}
        What a message carries for the event's other endpoint: its memory, or its graph
        attention embedding (DyRep).
    state : tuple of str
        Extra kinds of per-node state beside the dynamic memory, by the names of
        :data:`speed.train.state.components.COMPONENTS`: ``"dual_memory"`` builds messages from
        a second memory of each node's last embedding ``h(t-)`` (TIGER's dual memory, TIGE).
    """

    updater: str
    embedding: str
    message_other: str = "memory"
    state: Tuple[str, ...] = ()

    def refuses_unscored_events(self) -> str:
        """Why this model cannot take events without scoring them ("" when it can)."""
        return next((STATE_KINDS[s].refusal for s in self.state
                     if s in STATE_KINDS and not STATE_KINDS[s].takes_unscored_events), "")


@dataclass(frozen=True)
class StateKind:
    """What the configuration must know of a kind of extra node state before any is built (no
    torch here): the component itself is :data:`speed.train.state.components.COMPONENTS`'s row.

    Attributes
    ----------
    takes_unscored_events : bool
        Events may be taken in without being scored (PAC's ``--observe shared``).
    refusal : str
        Why not, when not: the end of "observe is not for MODEL, ...".
    """

    takes_unscored_events: bool = True
    refusal: str = ""


STATE_KINDS: Dict[str, StateKind] = {
    # an event's message needs its endpoints' embeddings, computed only for scored events
    "dual_memory": StateKind(takes_unscored_events=False, refusal="whose messages carry each event's embeddings"),
}


RECIPES: Dict[str, Recipe] = {
    "jodie": Recipe(updater="rnn", embedding="time_projection"),
    "dyrep": Recipe(updater="rnn", embedding="identity", message_other="attention"),
    "tgn": Recipe(updater="gru", embedding="attention"),
    "tige": Recipe(updater="gru", embedding="attention", state=("dual_memory",)),
}
MODELS = tuple(RECIPES)
# The message functions and aggregators every model can be built with.
MESSAGES = ("identity", "mlp")
AGGREGATORS = ("last", "mean")
# DistTGL's static node memory beside the dynamic one (speed.train.model.static).
STATIC_KINDS = ("none", "learned", "pretrained")
