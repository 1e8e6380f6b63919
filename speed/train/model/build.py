"""A run's model from its config and its log: the configured architecture with the log's facts
(edge features, JODIE's time unit, a static memory's rows), and where its node state lives."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..._util import release_arrays
from ...data._kernels import node_time_spans
from ...data.events import Events
from ..config import TrainConfig
from .network import StatefulModel, build_model


def state_placement(setting: str, device: torch.device, state_bytes: int, free_bytes: Optional[int] = None) -> str:
    """Where a model's node memories live: ``"device"`` or ``"host"``.

    ``auto`` keeps them on an accelerator while they take at most half of its free memory, and in
    host memory otherwise (TGL's and SPEED's ``--backup_memory_to_cpu``): each step then moves only
    its batch's rows, and the other half stays for activations and the weights.  On a CPU the two
    are the same place.

    Parameters
    ----------
    setting : {"auto", "device", "host"}
    device : torch.device
        Where the weights compute.
    state_bytes : int
        The memories' bytes (:meth:`NodeStates.nbytes` for the rows the run holds).
    free_bytes : int, optional
        The device's free memory (default: ``torch.cuda.mem_get_info``).
    """
    if setting != "auto":
        return setting
    if device.type != "cuda":
        return "device"
    if free_bytes is None:
        free_bytes = torch.cuda.mem_get_info(device)[0]
    return "device" if state_bytes <= free_bytes // 2 else "host"


def place_state(model: StatefulModel, setting: str, device: torch.device, num_nodes: int) -> str:
    """Put ``model``'s memories where :func:`state_placement` says, for ``num_nodes`` rows;
    returns the choice."""
    where = state_placement(setting, device, model.state.nbytes(num_nodes))
    model.keep_state_on("cpu" if where == "host" else device)
    return where


def time_scale(events: Events) -> float:
    """Mean gap between a node's consecutive events (JODIE's Δt normaliser).

    A node's gaps add up to its last time less its first, so one pass keeping each node's
    first and last time and its count of endpoints gives the mean: O(nodes) memory, a window
    of the log at a time.  (Sorting every endpoint by node and time held the log several times
    over: 11.7 GB on a 10^8-event log, the largest thing a PAC run ever held.)"""
    n = int(events.num_nodes)
    first, last = np.full(n, np.inf), np.full(n, -np.inf)
    count = np.zeros(n, dtype=np.int64)
    for lo in range(0, len(events), SPAN_WINDOW):
        hi = min(lo + SPAN_WINDOW, len(events))
        cols = (events.src[lo:hi], events.dst[lo:hi], events.t[lo:hi])
        node_time_spans(*cols, first, last, count)
        release_arrays(cols)  # a mapped log's pages read so far (a held one is left alone)
    seen = count > 0
    gaps = int((count[seen] - 1).sum())
    scale = float((last[seen] - first[seen]).sum()) / gaps if gaps else 1.0
    return scale if scale > 0 else 1.0


# events time_scale reads at a time
SPAN_WINDOW = 1 << 22


def model_for(config: TrainConfig, num_nodes: int, events: Events, train: Events) -> StatefulModel:
    """The configured model for ``num_nodes`` node-state rows, with the log's edge features
    (a static memory has a row for every node of ``events``)."""
    return configured_model(config, num_nodes, events.msg_dim, events.num_nodes, time_scale(train), events.msg)


def configured_model(config: TrainConfig, num_nodes: int, msg_dim: int, static_nodes: int, scale: float,
                     features) -> StatefulModel:
    """:func:`build_model` with the config's architecture and the log's facts; ``features``: the
    edge features by event id (an array, a :class:`MappedFeatures` read in place, or None)."""
    model = build_model(config.model, num_nodes, msg_dim=msg_dim, static_nodes=static_nodes, time_scale=scale,
                        **config.architecture())
    model.state.set_edge_features(features)
    return model
