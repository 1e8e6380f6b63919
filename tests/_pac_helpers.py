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
        from speed.train.models import NodeState
        from speed.train.pac import sync_shared

        model = build_model("tgn", 1, memory_dim=2, time_dim=2, embedding_dim=2, neighbors=2)
        model.resize(4)  # local nodes 0-2 shared, 3 the rank's own
        lu = [[5.0, 1.0, 3.0, 7.0], [2.0, 4.0, 3.0, 9.0]][rank]
        empty = torch.empty(0, dtype=torch.long)
        model.load_node_state(torch.arange(4), NodeState(
            {"memory": (torch.full((4, 2), float(rank + 1)), torch.tensor(lu, dtype=torch.float64))},
            (empty, empty, torch.empty(0, dtype=torch.float64), empty)))
        sync_shared(model, 3, mode, world)
        state, last = model.node_state(torch.arange(4)).memories["memory"]
        queue.put((rank, state[:, 0].tolist(), last.tolist()))
    finally:
        dist.destroy_process_group()


def static_merge_worker(rank, world, store_file, queue):
    """Two ranks change overlapping rows of a static table; merge_static combines them.
    (A file rendezvous: no port that another process on the machine could take first.)"""
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world)
    try:
        from speed.train.static import StaticMemory, merge_static

        static = StaticMemory(4, 2, 3)
        opt = torch.optim.SparseAdam([static.table], lr=1.0)
        start = static.table.detach().clone()  # zeros on both ranks
        rows = [[0, 1], [1, 2]][rank]  # row 1 is changed by both ranks (a shared node)
        # one optimiser step on the rank's rows gives them moments ...
        static.table.grad = torch.sparse_coo_tensor(torch.tensor([rows]), torch.ones(2, 2) * (rank + 1), (4, 2))
        opt.step()
        # ... and the rows are then set to known values
        new = start.clone()
        new[rows] = float(rank + 1) * torch.tensor([[1.0, 2.0]])
        static.load_table(new)
        merge_static(static, start, world, optimizer=opt)
        m = opt.state[static.table]["exp_avg"][:, 0].tolist()
        queue.put((rank, (static.table.detach().tolist(), m)))
    finally:
        dist.destroy_process_group()
