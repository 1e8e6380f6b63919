"""The period metrics in a chunk's memory give the figures of the whole-period computation, bit
for bit: per-batch AP/AUC scored CHUNK_BATCHES batches at a time, and the pooled figures of
pooled_ap_auc against grouped_ap_auc with one batch (random scores with many ties)."""

import numpy as np
import pytest

from speed.train.eval import metrics


@pytest.mark.parametrize("seed", range(12))
def test_chunked_and_pooled_metrics_equal_the_whole_computation(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 4000))
    m = n if seed % 3 else int(rng.integers(1, 4000))
    q = [2, 10, 1e9][seed % 3]  # coarse scores tie often
    pos = np.round(rng.normal(0.5, 1, n) * q) / q
    neg = np.round(rng.normal(0, 1, m) * q) / q
    batch = [1, 7, 200][seed % 3]
    whole_ap, whole_auc = metrics.grouped_ap_auc(pos, neg)
    assert repr(metrics.pooled_ap_auc(pos, neg)) == repr((float(whole_ap[0]), float(whole_auc[0])))
    full = metrics.grouped_ap_auc(pos[:n // batch * batch], neg[:n // batch * batch], batch)
    monkeypatch.setattr(metrics, "CHUNK_BATCHES", [1, 3, 5][seed % 3])
    chunked = metrics._per_batch_ap_auc(pos[:n // batch * batch], neg[:n // batch * batch], batch)
    assert np.array_equal(full[0], chunked[0], equal_nan=True) and np.array_equal(full[1], chunked[1], equal_nan=True)


def test_pooled_metrics_of_one_side_only_are_nan():
    assert all(np.isnan(x) for x in metrics.pooled_ap_auc(np.array([1.0, 2.0]), np.array([])))
    assert metrics.pooled_ap_auc(np.array([2.0]), np.array([1.0])) == (1.0, 1.0)
