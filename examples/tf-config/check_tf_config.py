"""Checks this kernel's TF_CONFIG the way TensorFlow's TFConfigClusterResolver reads it.

Pure Python (no TensorFlow). TFConfigClusterResolver takes ``cluster`` as the ClusterSpec
(job name -> list of "host:port", or a dict of task index -> address), ``task.type`` and
``task.index`` as this process's task, and ``cluster[type][index]`` as its own address (what
``master()`` returns and what a tf.distribute server binds to). A missing job or task index
is an error there, so it is here too. Beyond that, troupe's contract (docs/contract.md): every
kernel is a ``worker``, listed in BACKENDAI_CLUSTER_HOSTS order, on port base + rank, where
base is BACKENDAI_DIST_MASTER_PORT (default 29500), and the task index is this kernel's
BACKENDAI_CLUSTER_LOCAL_RANK. Prints one line ending in OK (with the cluster spec as canonical
JSON, for comparing kernels) or the problems found, and exits non-zero on any problem.
"""

import json
import os
import socket
import sys


def task_addresses(job: object) -> dict[int, str]:
    """A job's tasks as ClusterSpec accepts them: a list, or a dict keyed by task index."""
    if isinstance(job, list):
        return dict(enumerate(job))
    if isinstance(job, dict):
        return {int(k): v for k, v in job.items()}
    raise TypeError(f"a job must be a list or a dict of addresses, not {type(job).__name__}")


def split_address(address: object) -> tuple[str, int]:
    if not isinstance(address, str) or address.count(":") != 1:
        raise ValueError(f"address {address!r} is not host:port")
    host, port_text = address.split(":")
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"address {address!r}: port must be 1-65535")
    return host, int(port_text)


def check(env: dict[str, str]) -> tuple[list[str], dict, str]:
    problems: list[str] = []
    config = json.loads(env["TF_CONFIG"])
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        return ["TF_CONFIG has no cluster"], {}, ""
    if not isinstance(task, dict):
        return ["TF_CONFIG has no task"], cluster, ""
    # ClusterSpec: job names are strings, every address a host:port with a valid port,
    # no address used twice (two servers cannot bind the same one).
    seen: dict[str, str] = {}
    jobs: dict[str, dict[int, str]] = {}
    for name, job in cluster.items():
        if not isinstance(name, str):
            problems.append(f"job name {name!r} is not a string")
            continue
        try:
            jobs[name] = task_addresses(job)
        except (TypeError, ValueError) as e:
            problems.append(f"job {name}: {e}")
            continue
        for index, address in jobs[name].items():
            try:
                split_address(address)
            except ValueError as e:
                problems.append(f"{name}[{index}]: {e}")
            if address in seen:
                problems.append(f"{name}[{index}]: address {address} also used by {seen[address]}")
            seen[address] = f"{name}[{index}]"
    # TFConfigClusterResolver: the task's type and index must name a task of the cluster.
    task_type, task_index = task.get("type"), task.get("index")
    if task_type not in jobs:
        problems.append(f"task type {task_type!r} is not a job of the cluster {sorted(jobs)}")
        return problems, cluster, ""
    if not isinstance(task_index, int) or task_index not in jobs[task_type]:
        problems.append(f"task index {task_index!r} is not a task of job {task_type}")
        return problems, cluster, ""
    own = jobs[task_type][task_index]
    # troupe's contract for this kernel
    hosts = env["BACKENDAI_CLUSTER_HOSTS"].split(",")
    rank = int(env["BACKENDAI_CLUSTER_LOCAL_RANK"])
    base = int(env.get("BACKENDAI_DIST_MASTER_PORT") or 29500)
    if list(jobs) != ["worker"] or task_type != "worker":
        problems.append(f"expected only workers, got jobs {list(jobs)} and task {task_type}")
    want = [f"{h}:{base + i}" for i, h in enumerate(hosts)]
    workers = jobs.get("worker", {})
    if [workers.get(i) for i in range(max(len(workers), len(want)))] != want:
        problems.append(f"workers {cluster.get('worker')} != {want}")
    if len(hosts) != int(env["BACKENDAI_CLUSTER_SIZE"]):
        problems.append(f"BACKENDAI_CLUSTER_HOSTS has {len(hosts)} hosts, not the cluster size")
    if task_index != rank:
        problems.append(f"task index {task_index} != BACKENDAI_CLUSTER_LOCAL_RANK {rank}")
    if own != f"{env['BACKENDAI_CLUSTER_HOST']}:{base + rank}":
        problems.append(f"own address {own} is not {env['BACKENDAI_CLUSTER_HOST']}:{base + rank}")
    # every worker's host resolves inside the session network
    for address in want:
        host = address.split(":")[0]
        try:
            socket.getaddrinfo(host, None)
        except OSError as e:
            problems.append(f"{host} does not resolve: {e}")
    return problems, cluster, own


def main() -> int:
    host = os.environ.get("BACKENDAI_CLUSTER_HOST", "?")
    if "TF_CONFIG" not in os.environ:
        print(f"{host}: TF_CONFIG is not set (troupe sets it for cluster sessions of size > 1)")
        return 1
    problems, cluster, own = check(dict(os.environ))
    spec = json.dumps(cluster, sort_keys=True, separators=(",", ":"))
    if problems:
        print(f"{host}: TF_CONFIG WRONG: " + "; ".join(problems) + f" cluster={spec}")
        return 1
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    print(f"{host}: TF_CONFIG task={task['type']}:{task['index']} address={own} OK cluster={spec}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
