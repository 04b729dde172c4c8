#!/bin/sh
# Runs in main1 as user work (troupe/mpi image): copies allreduce.py to every kernel over the
# session's SSH, then starts one MPI rank per kernel with a bare mpirun, which reaches the other
# kernels through the same SSH (port 2200 comes from ~/.ssh/config). Every value comes from
# what troupe provides: mpirun's default hostfile is /home/config/hostfile (one slot per kernel,
# through OMPI_MCA_orte_default_hostfile) and BACKENDAI_CLUSTER_SIZE counts the kernels.
set -eu
prog=/tmp/mpi-allreduce.py
cat > "$prog" <<'PY'
"""Each MPI rank contributes rank+1; after an all-reduce every rank must hold the sum.

Started by mpirun (one rank per host of /home/config/hostfile); mpi4py's binary wheel runs
against the Open MPI of troupe/mpi.
"""

import os

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
send = np.array([rank + 1], dtype=np.int64)
total = np.zeros(1, dtype=np.int64)
comm.Allreduce(send, total, op=MPI.SUM)  # buffer interface (numpy)
obj_total = comm.allreduce(rank + 1, op=MPI.SUM)  # pickled Python objects
expected = size * (size + 1) // 2
verdict = "OK" if int(total[0]) == obj_total == expected else "WRONG"
host = os.environ.get("BACKENDAI_CLUSTER_HOST", MPI.Get_processor_name())
print(
    f"{host}: rank {rank}/{size} allreduce sum={int(total[0])} expected={expected} {verdict}",
    flush=True,
)
PY
for h in $(echo "$BACKENDAI_CLUSTER_HOSTS" | tr , ' '); do
  [ "$h" = "$BACKENDAI_CLUSTER_HOST" ] || ssh "$h" "cat > $prog" < "$prog"
done
out=/tmp/mpi-allreduce.out
# --mca btl tcp,self: the kernels talk over the session network only (no shared-memory or
# InfiniBand probing between containers).
mpirun -np "$BACKENDAI_CLUSTER_SIZE" --mca btl tcp,self python "$prog" | tee "$out"
ok=$(grep -c ' OK$' "$out" || true)
if [ "$ok" -eq "$BACKENDAI_CLUSTER_SIZE" ]; then
  echo "mpi allreduce: all $ok ranks OK"
else
  echo "mpi allreduce: only $ok of $BACKENDAI_CLUSTER_SIZE ranks OK" >&2
  exit 1
fi
