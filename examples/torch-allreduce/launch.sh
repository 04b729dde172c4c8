#!/bin/sh
# Runs in main1 as user work: copies allreduce.py to every kernel over the session's SSH and
# starts a bare `torchrun` on each: troupe's PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR and
# PET_MASTER_PORT (torchrun's --nnodes, --node-rank, --master-addr, --master-port) form the job
# with static rendezvous on main1:29500, one process per kernel.
set -eu
cat > /tmp/allreduce.py <<'PY'
"""Each rank contributes rank+1; after a gloo all-reduce every rank must hold the sum.

Launched by torchrun, which sets RANK/WORLD_SIZE per process; torchrun itself takes the
rendezvous address from the MASTER_ADDR/MASTER_PORT that troupe injects into every kernel.
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
PY
pids=""
for h in $(echo "$BACKENDAI_CLUSTER_HOSTS" | tr , ' '); do
  # never onto itself: the remote "cat >" would truncate the file being sent
  [ "$h" = "$BACKENDAI_CLUSTER_HOST" ] || ssh "$h" 'cat > /tmp/allreduce.py' < /tmp/allreduce.py
  ssh "$h" 'OMP_NUM_THREADS=1 torchrun /tmp/allreduce.py' &
  pids="$pids $!"
done
status=0
for p in $pids; do wait "$p" || status=1; done
exit $status
