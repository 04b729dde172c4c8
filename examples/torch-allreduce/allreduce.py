"""Each rank contributes rank+1; after a gloo all-reduce every rank must hold the sum.

Launched by torchrun (one per kernel, see launch.sh), which sets RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT for each process it starts.
"""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
verdict = "OK" if t.item() == expected else "WRONG"
host = os.environ.get("BACKENDAI_CLUSTER_HOST", "?")
print(
    f"{host}: rank {rank}/{world} all_reduce sum={t.item()} expected={expected} {verdict}",
    flush=True,
)
dist.destroy_process_group()
