"""Real TensorFlow reads the contract's ``TF_CONFIG`` (docs/contract.md, 'Roles'): in each
kernel of a ``main`` + ``ps:1`` + ``worker:2`` session, ``TFConfigClusterResolver`` resolves the
cluster (main1 the chief, ps1, worker1, worker2) and the kernel's own task.

The image, ``troupe-test/tf``, is troupe/base plus ``tensorflow-cpu`` in /opt/venv, built here
offline as scripts/build-images.sh builds troupe/pytorch: the wheels are downloaded on the host
from pip's configured index (about 320 MB) and installed with ``--no-index`` from a bind mount
(in no layer). The first build takes minutes (about 6 on the loaded 2-core test machine), a
rebuild seconds (BuildKit's cache); the image is removed at the end, even on failure, like
every image a test makes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import BASE_IMAGE, DOCKER, Server, docker
from troupe.api.models import Resources, RoleSpec, SessionCreate

pytestmark = pytest.mark.docker

IMAGE = "troupe-test/tf:1"
TENSORFLOW = "tensorflow-cpu==2.21.0"
HOSTS = ["main1", "ps1", "worker1", "worker2"]
DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN --mount=type=bind,source=wheels,target=/tmp/wheels \\
    python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels {TENSORFLOW}
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
"""
#: What each kernel prints: the resolver's cluster, its task and the master of the chief.
RESOLVE = """\
import json, os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
print(json.dumps({"cluster": r.cluster_spec().as_dict(), "type": r.task_type,
                  "id": r.task_id, "master": r.master("chief", 0, rpc_layer="grpc")}))
"""


@pytest.fixture(scope="module")
def tf_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ctx = tmp_path_factory.mktemp("tf-image")
    (ctx / "wheels").mkdir()
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    pyver = docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python3",
        BASE_IMAGE,
        "-c",
        "import platform; print(platform.python_version())",
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
         "--only-binary=:all:", "--python-version", pyver, "-d", str(ctx / "wheels"),
         TENSORFLOW],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    try:
        r = subprocess.run(
            [DOCKER, "build", "-q", "-t", IMAGE, str(ctx)],
            env={**os.environ, "DOCKER_BUILDKIT": "1"},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        yield IMAGE
    finally:
        docker("rmi", "-f", IMAGE, check=False)


def test_tf_config_cluster_resolver(server: Server, tf_image: str) -> None:
    c = server.client()
    name = f"tf-{uuid.uuid4().hex[:6]}"
    req = SessionCreate(
        name=name,
        image=tf_image,
        resources=Resources(cpu=0.25, mem=1024**3),
        roles=[RoleSpec(name="ps"), RoleSpec(name="worker", replicas=2)],
    )
    c.create_session(req)
    try:
        info = c.wait_session(name, until="running", timeout=240)
        assert info.status == "RUNNING", info.status_info
        assert [k.hostname for k in info.kernels] == HOSTS
        cluster = {
            "chief": ["main1:29500"],
            "ps": ["ps1:29501"],
            "worker": ["worker1:29502", "worker2:29503"],
        }
        tasks = {"main1": ("chief", 0), "ps1": ("ps", 0), "worker1": ("worker", 0)}
        tasks["worker2"] = ("worker", 1)
        # each kernel's own exec, and worker2 once more over SSH from main1 as a launcher
        # would start each task; all at once (each imports TensorFlow: seconds of CPU)
        ssh = ["sh", "-c", f"ssh worker2 /opt/venv/bin/python3 - <<'EOF'\n{RESOLVE}EOF"]
        runs = [(host, ["python3", "-c", RESOLVE]) for host in HOSTS] + [("main1", ssh)]
        with ThreadPoolExecutor(len(runs)) as pool:
            outs = list(pool.map(lambda r: c.exec(name, r[1], kernel=r[0]), runs))
        for host, (code, out) in zip(HOSTS, outs, strict=False):
            assert code == 0, (host, out)
            got = json.loads(out.strip().splitlines()[-1])
            assert got["cluster"] == cluster, host
            assert (got["type"], got["id"]) == tasks[host], host
            assert got["master"] == "grpc://main1:29500", host
        code, out = outs[-1]
        assert code == 0, out
        got = json.loads(out.strip().splitlines()[-1])
        assert (got["type"], got["id"]) == ("worker", 1)
    finally:
        c.destroy_session(name)
