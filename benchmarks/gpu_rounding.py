"""Where a CPU and a GPU part ways on the same weights: module by module.

A TGN is trained one epoch on the GPU (the first 4,000 events of ``data/sample.csv``), loaded on
each device with :func:`speed.load_run`, and asked for the same 50 embeddings; a forward hook on
every submodule records its output, and the outputs are compared in call order.  Also: the
time encoder and a 100x100 linear layer on synthetic inputs, and PyTorch's TF32 switches.  This
is what ``benchmarks/gpu_check.py``'s tolerances rest on (its docstring).

Usage (needs a CUDA device)::

    python benchmarks/gpu_rounding.py --out benchmarks/results/gpu_rounding.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_rounding.json"))
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_rounding: nothing measured: no CUDA device (torch.cuda.is_available() is False)")
        return 0
    import speed
    from speed.train import TrainConfig, Trainer
    from speed.train.model.modules import TimeEncoder

    m = torch.backends.cuda.matmul
    out = {"device": torch.cuda.get_device_name(),
           "flags": {"allow_tf32": m.allow_tf32, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
                     "matmul_precision": torch.get_float32_matmul_precision(),
                     "fp32_precision": str(getattr(m, "fp32_precision", None))}}
    torch.manual_seed(0)
    te = TimeEncoder(100)  # zero bias, as initialised: w * dt alone, one rounding on both devices
    out["time_encoder"] = {}
    for hi in (1.0, 1e2, 1e4, 1e5, 2e5, 2e6):
        dt = torch.linspace(0, hi, 20000)
        cpu = te(dt)
        gpu = te.cuda()(dt.cuda()).cpu()
        te.cpu()
        out["time_encoder"][f"{hi:g}"] = {"cos_max_diff": (cpu - gpu).abs().max().item()}
    lin = torch.nn.Linear(100, 100)
    x = torch.randn(5000, 100)
    out["linear_100_max_diff"] = (lin(x) - lin.cuda()(x.cuda()).cpu()).abs().max().item()

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "small.csv"
        log.write_text("\n".join((ROOT / "data" / "sample.csv").read_text().splitlines()[:4001]) + "\n")
        events = speed.read_events(log, progress=False)
        split = speed.chronological_split(events, seed=0)
        cfg = TrainConfig(model="tgn", epochs=1, device="cuda", seed=0, progress=False, num_threads=4).validate()
        Trainer.local(events, split, cfg, out=Path(tmp) / "run").fit()
        calls = {}
        for dev in ("cpu", "cuda"):
            pred = speed.load_run(Path(tmp) / "run", device=dev)
            seen = []
            hooks = [mod.register_forward_hook(
                lambda _m, _i, o, n=name: seen.append((n, o.detach().cpu() if torch.is_tensor(o) else None)))
                for name, mod in pred.net.named_modules() if name]
            pred.embed(np.arange(50))
            for h in hooks:
                h.remove()
            calls[dev] = seen
    out["modules_in_order"] = [
        {"module": n, "max_abs_diff": (c.float() - g.float()).abs().max().item(), "max_abs": c.float().abs().max().item()}
        for (n, c), (_, g) in zip(calls["cpu"], calls["cuda"]) if c is not None and g is not None and c.shape == g.shape]
    text = json.dumps(out, indent=1)
    print(text)
    Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
