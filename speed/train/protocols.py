"""Evaluation protocols: how a run is split, what evaluation sees and how it is scored.

Published link-prediction figures come from three protocols, and a figure is comparable only
with another from the same protocol.  Each row below follows its reference code (read with the
links in each field's comment; the conformance tests in ``tests/test_conformance.py`` check
them against plain-Python restatements):

* ``tgn`` -- TGN's ``utils/data_processing.py``, ``train_self_supervised.py`` and
  ``evaluation/evaluation.py`` (twitter-research/tgn);
* ``dyglib`` -- DyGLib's ``utils/DataLoader.py``, ``utils/utils.py:NegativeEdgeSampler`` and
  ``evaluate_models_utils.py`` (yule-BUAA/DyGLib);
* ``tgb`` -- TGB's ``linkproppred/negative_generator.py`` and ``linkproppred/evaluate.py``
  (shenyangHuang/TGB).

No torch here: the command line lists the protocols without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class Protocol:
    """One evaluation protocol.

    Attributes
    ----------
    name : str
    new_node_fraction : float
        Default hold-out: ``int(fraction * |nodes|)`` nodes drawn from those seen in val/test
        are removed from training (TGN's rule); 0 is transductive.
    new_node_pass : bool
        The inductive metric is a separate pass over the events that touch a node unseen in
        training, from the state at the period's start (TGN's and DyGLib's), rather than a
        subset of the period's scores.
    new_node_val_pool : {"log", "new"}
        Where that pass's random negative destinations come from in validation: the whole
        log's (TGN reuses its validation sampler there) or the new-node events' (DyGLib, and TGN
        for the test).
    aggregate : {"per_batch", "pooled"}
        The headline AP/AUC: the mean over evaluation batches (TGN, DyGLib) or one figure over
        the period.  Both are reported.
    strategies : tuple of str
        The evaluation negative strategies the protocol defines (``--eval-negatives``).
    ranking : {"random", "hist_rnd"}
        How ranking candidates are drawn for MRR: distinct random destinations, or TGB's
        ``hist_rnd`` (up to half from the source's training destinations).
    select_on : {"ap", "mrr"}
        The validation figure that picks the best epoch.
    select_negatives : str or None
        The negatives that figure is computed on, when not the evaluation's: DyGLib's training
        script (``train_link_prediction.py``) validates every epoch with random negatives and
        keeps the best; historical and inductive negatives only enter its separate evaluation
        script, on the saved best model.
    default_candidates : int
        Ranking candidates per event when ``mrr_negatives`` is 0 (0: no ranking).
    title : str
        How the protocol is named in messages.
    transductive : bool
        No node may be held out of training (TGB's).
    ranking_pool : {"destinations", "id_range"}
        Where random ranking candidates come from: the log's distinct destinations, or every
        id from the smallest destination to the largest (TGB's
        ``arange(first_dst_id, last_dst_id + 1)``).
    reference_figures : bool
        Also report the figures as the reference code computes them (TGN's and DyGLib's, on
        float32 probabilities).
    formats : tuple of str
        The input formats (a reader's ``format``) whose logs take this protocol by default.
    """

    name: str
    new_node_fraction: float
    new_node_pass: bool
    new_node_val_pool: str
    aggregate: str
    strategies: Tuple[str, ...]
    ranking: str
    select_on: str
    default_candidates: int
    title: str
    select_negatives: Optional[str] = None
    transductive: bool = False
    ranking_pool: str = "destinations"
    reference_figures: bool = False
    formats: Tuple[str, ...] = ()


PROTOCOLS: Dict[str, Protocol] = {p.name: p for p in (
    Protocol("tgn", new_node_fraction=0.1, new_node_pass=True, new_node_val_pool="log", aggregate="per_batch",
             strategies=("random",), ranking="random", select_on="ap", default_candidates=0, title="TGN",
             reference_figures=True),
    Protocol("dyglib", new_node_fraction=0.1, new_node_pass=True, new_node_val_pool="new", aggregate="per_batch",
             strategies=("random", "historical", "inductive"), ranking="random", select_on="ap",
             default_candidates=0, select_negatives="random", title="DyGLib", reference_figures=True),
    Protocol("tgb", new_node_fraction=0.0, new_node_pass=False, new_node_val_pool="new", aggregate="pooled",
             strategies=("random",), ranking="hist_rnd", select_on="mrr", default_candidates=100, title="TGB",
             transductive=True, ranking_pool="id_range", formats=("tgb",)),
)}
DEFAULT_PROTOCOL = "tgn"


def protocol_for_format(fmt: Optional[str]) -> str:
    """The protocol a log of input format ``fmt`` is evaluated with by default: the one whose
    row names the format (TGB's for a TGB dataset), else :data:`DEFAULT_PROTOCOL`."""
    return next((p.name for p in PROTOCOLS.values() if fmt is not None and fmt in p.formats), DEFAULT_PROTOCOL)
