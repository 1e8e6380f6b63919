"""The files a run leaves for people: ``metrics.json`` and ``curves.png``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

from ..._util import atomic_file, jsonable


def write_metrics(path: Path, metrics: Dict) -> None:
    """``metrics.json``, atomically (the run folder says where: :class:`~.folder.RunFolder`)."""
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(jsonable(metrics), indent=2) + "\n")


def data_block(events, split) -> Dict:
    """``metrics.json``'s ``data``: the log a run read (its size, periods, source, columns and
    time span), whatever the run (a trained model, EdgeBank)."""
    meta = events.meta
    block = {"num_events": len(events), "num_nodes": events.num_nodes,
             "num_train_events": int(split.train_mask.sum()), "num_val_events": split.num_val,
             "num_test_events": split.num_test, "msg_dim": events.msg_dim, "source": meta.source,
             "num_train_period_events": int(split.num_train)}
    block.update({k: getattr(meta, k) for k in ("columns", "time_text", "out_of_order_rows")
                  if getattr(meta, k) is not None})
    if len(events):
        block.update(t_min=float(events.t_float()[0]), t_max=float(events.t_float()[-1]))
    return block


def plot_curves(metrics: Dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ep = [e["epoch"] for e in metrics["epochs"]]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    ax[0].plot(ep, [e["loss"] for e in metrics["epochs"]], "o-")
    ax[0].set_xlabel("epoch")
    ax[0].set_ylabel("training loss (BCE)")
    validated = [e for e in metrics["epochs"] if e.get("val")]  # with val_every > 1 some epochs have none
    vep = [e["epoch"] for e in validated]
    sel = validated[0]["val"].get("selection", {}).get("negatives") if validated else None
    ax[1].plot(vep, [e["val"].get("selection", e["val"])["transductive"]["ap"] for e in validated], "o-",
               label="all events" + (f" ({sel} negatives: selects)" if sel else ""))
    if any("inductive" in e["val"] for e in validated):  # a protocol with held-out nodes
        ax[1].plot([e["epoch"] for e in validated if "inductive" in e["val"]],
                   [e["val"]["inductive"]["ap"] for e in validated if "inductive" in e["val"]], "s--",
                   label="new nodes" + (f" ({metrics['config'].get('eval_negatives')} negatives)" if sel else ""))
    ax[1].set_xlabel("epoch")
    ax[1].set_ylabel(f"validation AP ({metrics.get('protocol', 'tgn')} protocol)")
    best = metrics.get("best_epoch")
    if best is not None:
        for a in ax:  # the epoch whose weights best.json holds
            a.axvline(best, color="tab:red", alpha=0.5, linestyle=":", label=f"best epoch ({best})")
    ax[1].legend()
    from matplotlib.ticker import MaxNLocator

    for a in ax:
        a.grid(alpha=0.3)
        a.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
    title = f"{metrics['model']} on {Path(str(metrics['data'].get('source'))).name}"
    test = metrics.get("test", {}).get("transductive")
    if test:
        title += f"; test AP {test['ap']:.4f}, AUC {test['auc']:.4f} at epoch {best}"
        if metrics.get("test", {}).get("inductive", {}).get("count"):
            title += f" (new nodes: AP {metrics['test']['inductive']['ap']:.4f})"
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
