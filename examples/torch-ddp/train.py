"""DDP (gloo, CPU): trains a tiny regression model for a few steps on synthetic data.

Every rank builds the model from the same seed and draws its own shard of data (seeded by
its rank); DDP averages the gradients, so after training every rank must hold exactly the
same weights. Each rank prints a checksum (sha256 of the weights' bytes) and their sum, which
the launch scripts compare.

Works under torchrun (static or c10d rendezvous) and as one plain process per kernel: it only
needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (env:// initialisation).
``python train.py --reference N`` trains the same model in one process, averaging the N
shards' gradients itself, to check the distributed result against.
"""

import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS, BATCH, FEATURES, LR = 20, 32, 8, 0.05


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    )


def batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's shard: y = x . w + noise, the same on every run."""
    gen = torch.Generator().manual_seed(1000 + rank)
    w = torch.linspace(-1.0, 1.0, FEATURES)
    out = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, FEATURES, generator=gen)
        out.append((x, (x @ w + 0.1 * torch.randn(BATCH, generator=gen)).unsqueeze(1)))
    return out


def digest(model: torch.nn.Module) -> tuple[str, float]:
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16], float(flat.sum())


def train_ddp() -> None:
    """Run between init_process_group and destroy_process_group (see the end of the file)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    losses = []
    for x, y in batches(rank):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        opt.step()
        losses.append(loss.item())
    sha, total = digest(model)
    host = os.environ.get("BACKENDAI_CLUSTER_HOST", "?")
    print(
        f"{host}: rank {rank}/{world} steps={STEPS} loss {losses[0]:.4f}->{losses[-1]:.4f} "
        f"weights_sum={total:.6f} weights_sha256={sha}",
        flush=True,
    )
    dist.barrier()  # every rank is done with the collectives before any tears down


def train_reference(world: int) -> None:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    shards = [batches(r) for r in range(world)]
    for step in range(STEPS):
        grads = []
        for r in range(world):
            model.zero_grad()
            x, y = shards[r][step]
            torch.nn.functional.mse_loss(model(x), y).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / world
        opt.step()
    sha, total = digest(model)
    print(f"reference: world {world} steps={STEPS} weights_sum={total:.6f} weights_sha256={sha}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1:2] == ["--reference"]:
        train_reference(int(sys.argv[2]))
    else:
        dist.init_process_group("gloo")  # env:// : MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        train_ddp()
        # Only now: the DDP model (its reducer holds the process group) is gone with
        # train_ddp's locals.
        dist.destroy_process_group()
        # Then leave without the interpreter's finalisation: now and then (twice in CI runs) a
        # rank still died there with SIGABRT ("terminate called without an active
        # exception", a C++ thread of torch's torn down while joinable) after printing its
        # result, and torchrun's exit barrier then waited 300 s for it. Everything this rank
        # had to do is done and its output flushed.
        sys.stdout.flush()
        os._exit(0)
