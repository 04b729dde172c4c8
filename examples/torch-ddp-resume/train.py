"""DDP (gloo, CPU) that survives restarts: checkpoints to a data folder every few steps and,
when the session restarted (``TROUPE_RESTART_COUNT`` > 0), resumes from its last checkpoint.

Every rank draws its batch of each step from a generator seeded by (rank, step), so a resumed
run sees the very batches an uninterrupted one would; the checkpoint holds the weights and the
optimiser's state exactly. So a run killed halfway and resumed ends with the same weights and
the same final loss as one never interrupted. Rank 0 writes the checkpoint (atomically: a
temporary file, then a rename) and a one-line ``progress`` file next to it.

    python train.py CHECKPOINT_DIR          # under --dist-env per-container (RANK, WORLD_SIZE,
                                            # MASTER_ADDR, MASTER_PORT from the session)
    python train.py --reference WORLD       # the same training in one process, to compare
"""

import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS, EVERY, BATCH, FEATURES, LR = 40, 5, 32, 8, 0.05
#: seconds per step, so that a test can interrupt the run halfway (TROUPE_EXAMPLE_STEP_SLEEP)
PAUSE = float(os.environ.get("TROUPE_EXAMPLE_STEP_SLEEP", "0.3"))


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    )


def batch(rank: int, step: int, seed: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of (rank, step): y = x . w + noise, the same on every run and attempt."""
    gen = torch.Generator().manual_seed(seed * (rank + 1) + step)
    w = torch.linspace(-1.0, 1.0, FEATURES)
    x = torch.randn(BATCH, FEATURES, generator=gen)
    return x, (x @ w + 0.1 * torch.randn(BATCH, generator=gen)).unsqueeze(1)


def final_loss(model: torch.nn.Module) -> float:
    """The trained model's loss on a fixed evaluation batch."""
    x, y = batch(0, 0, seed=7)
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(x), y))


def digest(model: torch.nn.Module) -> str:
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]


def train_ddp(folder: str) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TROUPE_RESTART_COUNT", "0"))
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    path = os.path.join(folder, "checkpoint.pt")
    start = 0
    if attempt > 0 and os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    host = os.environ.get("BACKENDAI_CLUSTER_HOST", "?")
    print(f"{host}: attempt {attempt} starts at step {start}", flush=True)
    ddp = DistributedDataParallel(model)
    for step in range(start, STEPS):
        x, y = batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()  # gradients averaged here
        opt.step()
        time.sleep(PAUSE)
        if rank == 0 and (step + 1) % EVERY == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
            with open(os.path.join(folder, "progress"), "w") as f:
                f.write(f"{step + 1}\n")
    print(
        f"{host}: rank {rank}/{world} attempt {attempt} steps={STEPS} "
        f"final_loss={final_loss(model):.6f} weights_sha256={digest(model)}",
        flush=True,
    )
    dist.barrier()


def train_reference(world: int) -> None:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        grads = []
        for r in range(world):
            model.zero_grad()
            x, y = batch(r, step)
            torch.nn.functional.mse_loss(model(x), y).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / world
        opt.step()
    print(f"reference: world {world} steps={STEPS} final_loss={final_loss(model):.6f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1:2] == ["--reference"]:
        train_reference(int(sys.argv[2]))
    else:
        dist.init_process_group("gloo")  # env:// : MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        train_ddp(sys.argv[1])
        dist.destroy_process_group()
        sys.stdout.flush()
        os._exit(0)  # (see examples/torch-ddp/train.py: no interpreter finalisation)
