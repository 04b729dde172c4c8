#!/bin/sh
# Runs in main1 as user work (troupe/pytorch), in one of three launch modes (first argument):
#   static         a bare `torchrun` on every kernel: troupe's PET_NNODES, PET_NODE_RANK,
#                  PET_MASTER_ADDR and PET_MASTER_PORT give static rendezvous on main1:29500,
#                  node rank = BACKENDAI_CLUSTER_LOCAL_RANK
#   c10d           torchrun on every kernel with the c10d rendezvous on $MASTER_ADDR:29400
#                  (MASTER_PORT and the TF_CONFIG ports start at 29500); the run is named by the
#                  session id and torchrun assigns the ranks (in order of arrival). The store is
#                  hosted by a process of this script, not by main1's torchrun (is_host=false),
#                  and stopped only after every torchrun has returned: a store that lives in
#                  main1's torchrun goes away when that one exits, while the other torchruns may
#                  still be closing the rendezvous through it (RendezvousConnectionError)
#   per-container  no torchrun: one python per kernel taking WORLD_SIZE, RANK, MASTER_ADDR and
#                  MASTER_PORT from the environment (sessions created with --dist-env per-container)
# Copies train.py to every kernel over the session's SSH, starts one process per kernel over SSH
# (every value comes from the variables troupe injects, expanded on the remote kernel), then
# checks that all ranks hold the same weights.
#   troupe session exec NAME -- sh -c "$(cat examples/torch-ddp/launch.sh)" launch static
set -eu
mode=${1:-static}
case $mode in
  static)
    run='OMP_NUM_THREADS=1 exec torchrun /tmp/ddp-train.py' ;;
  c10d)
    run='OMP_NUM_THREADS=1 exec torchrun --nnodes="$BACKENDAI_CLUSTER_SIZE" --nproc-per-node=1 \
      --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:29400" --rdzv-conf=is_host=false \
      --rdzv-id="$BACKENDAI_SESSION_ID" /tmp/ddp-train.py' ;;
  per-container)
    if [ -z "${WORLD_SIZE:-}" ] || [ -z "${RANK:-}" ]; then
      echo "WORLD_SIZE/RANK are not set: create the session with --dist-env per-container" >&2
      exit 2
    fi
    run='OMP_NUM_THREADS=1 exec python /tmp/ddp-train.py' ;;
  *) echo "usage: launch.sh static|c10d|per-container" >&2; exit 2 ;;
esac
prog=/tmp/ddp-train.py
cat > "$prog" <<'PY'
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
PY
hosts=$(echo "$BACKENDAI_CLUSTER_HOSTS" | tr , ' ')
store=""
if [ "$mode" = c10d ]; then
  # The c10d rendezvous store (a TCPStore server), in a process of its own that outlives every
  # torchrun: stopped below once all have returned, or when this script goes away.
  OMP_NUM_THREADS=1 python -c '
import os, signal, sys, time
import torch.distributed as dist
store = dist.TCPStore(sys.argv[1], int(sys.argv[2]), is_master=True)
print("listening", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
parent = os.getppid()
while os.getppid() == parent:  # until stopped (SIGTERM), or until launch.sh is gone
    time.sleep(0.5)
' "$MASTER_ADDR" 29400 > /tmp/ddp-store.log 2>&1 &
  store=$!
  trap 'kill "$store" 2>/dev/null || true' EXIT
fi
for h in $hosts; do
  # never onto itself: the remote "cat >" would truncate the file being sent
  [ "$h" = "$BACKENDAI_CLUSTER_HOST" ] || ssh "$h" "cat > $prog" < "$prog"
done
if [ -n "$store" ]; then
  tries=0
  until grep -q '^listening$' /tmp/ddp-store.log; do
    tries=$((tries + 1))
    if ! kill -0 "$store" 2>/dev/null || [ "$tries" -gt 600 ]; then
      cat /tmp/ddp-store.log >&2
      echo "torch-ddp (c10d): the rendezvous store did not start on port 29400" >&2
      exit 1
    fi
    sleep 0.2
  done
fi
pids=""
for h in $hosts; do
  ssh "$h" "$run" > "/tmp/ddp-$h.out" &
  pids="$pids $!"
done
status=0
for p in $pids; do wait "$p" || status=1; done
if [ -n "$store" ]; then
  kill "$store" 2>/dev/null || true
  wait "$store" || true
fi
cat_outs() { for h in $hosts; do cat "/tmp/ddp-$h.out"; done; }
cat_outs
ranks=$(cat_outs | grep -c 'weights_sha256=' || true)
sums=$(cat_outs | sed -n 's/.*weights_sha256=//p' | sort -u)
if [ "$status" -eq 0 ] && [ "$ranks" -eq "$BACKENDAI_CLUSTER_SIZE" ] && [ "$(echo "$sums" | wc -l)" -eq 1 ]; then
  echo "torch-ddp ($mode): all $ranks ranks agree: weights_sha256=$sums"
else
  echo "torch-ddp ($mode): ranks disagree or failed (exit status $status, $ranks results):" $sums >&2
  exit 1
fi
