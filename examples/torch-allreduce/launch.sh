#!/bin/sh
# Runs in main1 as user work: copies allreduce.py to every kernel over the session's SSH and
# starts torchrun on each, one process per kernel, with the c10d rendezvous on
# $MASTER_ADDR:29400 named by the session id: every value is one troupe injects
# (BACKENDAI_CLUSTER_SIZE, MASTER_ADDR, BACKENDAI_SESSION_ID); torchrun assigns the ranks.
# The rendezvous store is a process of this script (every torchrun gets is_host=false), stopped
# only after every torchrun has returned. A bare `torchrun` (static rendezvous from troupe's
# PET_* variables) would work too, but its store lives in main1's torchrun, which exits as soon
# as the exit barrier lets it go while the others may still be waiting on that barrier through
# the store: they log a DistNetworkError traceback although the run succeeded.
# Each kernel's output goes to a file of its own, printed in the kernels' order at the end, so
# the ranks' lines never mix.
set -eu
cat > /tmp/allreduce.py <<'PY'
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
PY
hosts=$(echo "$BACKENDAI_CLUSTER_HOSTS" | tr , ' ')
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
' "$MASTER_ADDR" 29400 > /tmp/allreduce-store.log 2>&1 &
store=$!
trap 'kill "$store" 2>/dev/null || true' EXIT
for h in $hosts; do
  # never onto itself: the remote "cat >" would truncate the file being sent
  [ "$h" = "$BACKENDAI_CLUSTER_HOST" ] || ssh "$h" 'cat > /tmp/allreduce.py' < /tmp/allreduce.py
done
tries=0
until grep -q '^listening$' /tmp/allreduce-store.log; do
  tries=$((tries + 1))
  if ! kill -0 "$store" 2>/dev/null || [ "$tries" -gt 600 ]; then
    cat /tmp/allreduce-store.log >&2
    echo "torch-allreduce: the rendezvous store did not start on port 29400" >&2
    exit 1
  fi
  sleep 0.2
done
pids=""
for h in $hosts; do
  # (troupe's PET_NODE_RANK is the static rendezvous's: torchrun would warn that c10d ignores it)
  ssh "$h" 'unset PET_NODE_RANK; OMP_NUM_THREADS=1 exec torchrun --nnodes="$BACKENDAI_CLUSTER_SIZE" \
    --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:29400" \
    --rdzv-conf=is_host=false --rdzv-id="$BACKENDAI_SESSION_ID" /tmp/allreduce.py' \
    > "/tmp/allreduce-$h.out" &
  pids="$pids $!"
done
status=0
for p in $pids; do wait "$p" || status=1; done
kill "$store" 2>/dev/null || true
wait "$store" || true
for h in $hosts; do cat "/tmp/allreduce-$h.out"; done
exit $status
