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
