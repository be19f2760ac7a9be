"""Start a dask-mpi cluster with h5mdx.mpi.launch and run one task on each worker.

Usage: ``mpirun -n 4 python dask_mpi_hello.py``. Rank 1 prints ``ranks [2, 3] sum 6``.
"""

from __future__ import annotations

from h5mdx.mpi.launch import dask_mpi_client, worker_ranks

if __name__ == "__main__":
    with dask_mpi_client() as client:
        if client is not None:
            ranks = sorted(worker_ranks(client).values())
            total = client.submit(sum, [1, 2, 3]).result()
            print(f"ranks {ranks} sum {total}", flush=True)
