"""Kernel spec -> Docker container configuration, and the tar archive of its config files.

Pure functions, so the exact container contract (labels, limits, mounts, aliases) is easy to test.
"""

from __future__ import annotations

import io
import tarfile
import time
from importlib import resources
from pathlib import PurePosixPath
from typing import Any

from troupe.api.agent import (
    LABEL_HOSTNAME,
    LABEL_KERNEL,
    LABEL_OWNER,
    LABEL_SESSION,
    FileSpec,
    KernelSpec,
)

#: Where the runner scripts (entrypoint.sh, exec.sh, ready.sh) appear in every kernel.
RUNNER_MOUNT = "/opt/troupe"


def runner_dir() -> str:
    """The runner scripts shipped in this package, bind-mounted read-only at RUNNER_MOUNT."""
    return str(resources.files("troupe") / "runner")


def container_config(spec: KernelSpec, runner_dir: str, folders_root: str) -> dict[str, Any]:
    binds = [f"{runner_dir}:{RUNNER_MOUNT}:ro"]
    binds += [
        f"{folders_root}/{m.folder_id}:{m.target}:{'ro' if m.readonly else 'rw'}"
        for m in spec.mounts
    ]
    return {
        "Image": spec.image,
        "Hostname": spec.hostname,
        "Env": [f"{k}={v}" for k, v in spec.env.items()],
        # Through /bin/sh so the runner files need no exec bit and any image with sh works.
        "Entrypoint": ["/bin/sh", f"{RUNNER_MOUNT}/entrypoint.sh"],
        "Cmd": spec.command,
        "Labels": {
            LABEL_SESSION: spec.session_id,
            LABEL_KERNEL: spec.kernel_id,
            LABEL_OWNER: spec.owner,
            LABEL_HOSTNAME: spec.hostname,
        },
        "HostConfig": {
            "Init": True,
            "NanoCpus": int(spec.cpu * 1e9),
            "Memory": spec.mem,
            "MemorySwap": spec.mem,
            "Binds": binds,
            "NetworkMode": spec.network,
            "RestartPolicy": {"Name": "no"},
        },
        "NetworkingConfig": {
            "EndpointsConfig": {spec.network: {"Aliases": [spec.hostname]}},
        },
    }


def files_archive(files: list[FileSpec]) -> bytes:
    """A tar to extract at ``/``: the files with their owners and modes, parents 0755 root."""
    buf = io.BytesIO()
    now = time.time()
    seen: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in files:
            path = PurePosixPath(f.path)
            if not path.is_absolute() or ".." in path.parts:
                raise ValueError(f"file path must be absolute and normalised: {f.path}")
            for parent in reversed(path.parents[:-1]):
                name = str(parent).lstrip("/")
                if name in seen:
                    continue
                seen.add(name)
                d = tarfile.TarInfo(name)
                d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, now
                tar.addfile(d)
            data = f.content.encode()
            info = tarfile.TarInfo(str(path).lstrip("/"))
            info.size, info.mode, info.uid, info.gid, info.mtime = (
                len(data),
                f.mode,
                f.uid,
                f.gid,
                now,
            )
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
