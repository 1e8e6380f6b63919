"""Functions run inside spawned test processes (they must be importable by the children)."""

import os

import torch
import torch.distributed as dist


def sync_worker(rank, world, port, mode, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from speed.train.models import build_model
        from speed.train.pac import sync_shared

        model = build_model("tgn", 1, memory_dim=2, time_dim=2, embedding_dim=2, neighbors=2)
        model.resize(4)  # local nodes 0-2 shared, 3 the rank's own
        with torch.no_grad():
            model.memory.memory = torch.full((4, 2), float(rank + 1))
            lu = [[5.0, 1.0, 3.0, 7.0], [2.0, 4.0, 3.0, 9.0]][rank]
            model.memory.last_update = torch.tensor(lu, dtype=torch.float64)
        sync_shared(model, 3, mode, world)
        queue.put((rank, model.memory.memory[:, 0].tolist(), model.memory.last_update.tolist()))
    finally:
        dist.destroy_process_group()
