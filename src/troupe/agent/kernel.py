"""Kernel spec -> Docker container configuration, and the tar archive of its config files.

Pure functions, so the exact container contract (labels, limits, mounts, aliases) is easy to test.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from troupe.agent import runtime as kruntime
from troupe.api import defaults
from troupe.api.agent import (
    LABEL_AGENT,
    LABEL_GPUS,
    LABEL_HOSTNAME,
    LABEL_KERNEL,
    LABEL_OWNER,
    LABEL_SESSION,
    FileSpec,
    KernelSpec,
    MountSpec,
)
from troupe.api.errors import Invalid

#: Where the runner scripts (entrypoint.sh, exec.sh, ready.sh) appear in every kernel.
RUNNER_MOUNT = "/opt/troupe"
#: Where a kernel finds its files archive (:func:`files_archive`), bind-mounted read-only from
#: the agent's host; the entrypoint unpacks it first thing (see :func:`container_config`).
FILES_MOUNT = "/opt/troupe-files.tar"
EVENTS_MOUNT = "/run/troupe/events"
#: Where a supervised kernel's supervisor reports its command's failure to the agent, its
#: container left running (:mod:`troupe.agent.reports`).
REPORTS_MOUNT = "/run/troupe/exits"
#: A data folder's id, as the manager makes them (``uuid4()``): nothing else is mounted.
FOLDER_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: Where a folder may appear: an absolute, normalised path the bind syntax cannot misread.
MOUNT_TARGET = re.compile(r"/[A-Za-z0-9._/@+-]*")


@dataclass(frozen=True)
class KernelFiles:
    """Host paths of a kernel's files archive, its readiness FIFO and (a supervised kernel's)
    its report FIFO (:mod:`troupe.agent.files`)."""

    tar: Path
    events: Path | None
    reports: Path | None = None


@dataclass(frozen=True)
class KernelLimits:
    """What a kernel's container may take of its host besides CPU and memory: processes,
    open files, the engine's log files; and ``no-new-privileges`` (setuid binaries in a
    kernel cannot raise privileges)."""

    pids: int = defaults.PIDS_LIMIT
    nofile: int = defaults.NOFILE
    log_max_size: str = defaults.ENGINE_LOG_MAX_SIZE
    log_max_files: int = defaults.ENGINE_LOG_MAX_FILES

    def host_config(self) -> dict[str, Any]:
        return {
            "PidsLimit": self.pids,
            "Ulimits": [{"Name": "nofile", "Soft": self.nofile, "Hard": self.nofile}],
            "SecurityOpt": ["no-new-privileges:true"],
            "LogConfig": {
                "Type": "json-file",
                "Config": {"max-size": self.log_max_size, "max-file": str(self.log_max_files)},
            },
        }


def runner_dir() -> str:
    """The runner scripts shipped in this package, bind-mounted read-only at RUNNER_MOUNT."""
    return str(resources.files("troupe") / "runner")


def check_mount(m: MountSpec) -> None:
    """A mount the manager sent, checked again here: the folder id is a UUID and the target an
    absolute path without ``..`` (:class:`Invalid` otherwise, before anything is created)."""
    if not FOLDER_ID.fullmatch(m.folder_id):
        raise Invalid(f"folder id {m.folder_id!r} is not a folder id", field="mounts")
    target = PurePosixPath(m.target)
    if not MOUNT_TARGET.fullmatch(m.target) or ".." in target.parts or target == PurePosixPath("/"):
        raise Invalid(f"mount target {m.target!r} is not allowed", field="mounts")


def folder_path(folders_root: Path, m: MountSpec) -> Path:
    """The host directory of a checked mount; :class:`Invalid` when it resolves (through a
    link, say) anywhere but directly under ``folders_root``."""
    check_mount(m)
    root = folders_root.resolve()
    path = (folders_root / m.folder_id).resolve()
    if path.parent != root:
        raise Invalid(f"folder {m.folder_id!r} lies outside the data root", field="mounts")
    return path


def new_folder(path: Path) -> None:
    """A data folder made here: mode 0700 whatever the umask (a kernel's entrypoint gives it to
    the kernel's user work, uid 1000, who keeps using it); one that exists is left as it is."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(parents=True, mode=0o700)
        path.chmod(0o700)


def device_requests(gpu_ids: list[str]) -> list[dict[str, Any]]:
    """The engine's device request for whole NVIDIA GPUs by UUID (``docker run --gpus
    '"device=UUID,..."'``): the container sees these and no others."""
    if not gpu_ids:
        return []
    return [{"Driver": "nvidia", "DeviceIDs": gpu_ids, "Capabilities": [["gpu"]]}]


def instance_of(name: str, data_root: Path) -> str:
    """An agent's instance, the value of :data:`LABEL_AGENT` on the kernels it makes: its name
    and data folder's place (the same after a restart of it, another for another agent on the
    same engine: another manager's local agent has another data folder)."""
    where = os.path.realpath(data_root)  # (the same folder by any path to it)
    return hashlib.sha256(f"{name}\0{where}".encode()).hexdigest()[:16]


def made_by(labels: Mapping[str, Any], instance: str) -> bool:
    """Whether the agent ``instance`` made the container of these labels (one without the
    label, made before it, is any agent's)."""
    return bool(labels.get(LABEL_AGENT, instance) == instance)


def container_config(
    spec: KernelSpec,
    runner_dir: str,
    folders_root: str,
    limits: KernelLimits | None = None,
    files: KernelFiles | None = None,
    runtime: str | None = None,
    agent: str = "",
) -> dict[str, Any]:
    """``files.tar``: the host path of the kernel's files archive, mounted at FILES_MOUNT. The
    engine's own archive upload costs more (at 8 kernels on 2 cores, a third of a second of the
    start): it mounts the container's file system and runs a helper process to unpack.
    ``files.events``: the host path of the kernel's readiness FIFO, mounted at EVENTS_MOUNT
    (read-only: the mount; a FIFO's data is written all the same); ``files.reports``: its
    report FIFO, at REPORTS_MOUNT, the same way. ``runtime``: the host path
    of the kernel runtime (:mod:`troupe.agent.runtime`), mounted read-only; with it the
    entrypoint starts under the runtime's shell (any image, even one without ``/bin/sh``) and
    as root (an image's ``USER`` is not the kernel's user: the entrypoint drops to ``work``).
    ``agent``: the making agent's instance (:data:`LABEL_AGENT`)."""
    binds = [f"{runner_dir}:{RUNNER_MOUNT}:ro", *kruntime.bind(runtime)]
    if files is not None:
        binds.append(f"{files.tar}:{FILES_MOUNT}:ro")
        if files.events is not None:
            binds.append(f"{files.events}:{EVENTS_MOUNT}:ro")
        if files.reports is not None:
            binds.append(f"{files.reports}:{REPORTS_MOUNT}:ro")
    binds += [
        f"{folders_root}/{m.folder_id}:{m.target}:{'ro' if m.readonly else 'rw'}"
        for m in spec.mounts
    ]
    return {
        "Image": spec.image,
        "Hostname": spec.hostname,
        "Env": [f"{k}={v}" for k, v in spec.env.items()],
        # Through a shell so the runner files need no exec bit.
        "Entrypoint": [kruntime.shell(runtime), f"{RUNNER_MOUNT}/entrypoint.sh"],
        "Cmd": spec.command,
        **({"User": "0:0"} if runtime else {}),
        "Labels": {
            LABEL_SESSION: spec.session_id,
            LABEL_KERNEL: spec.kernel_id,
            LABEL_OWNER: spec.owner,
            LABEL_HOSTNAME: spec.hostname,
            **({LABEL_GPUS: ",".join(spec.gpus)} if spec.gpus else {}),
            **({LABEL_AGENT: agent} if agent else {}),
        },
        "HostConfig": {
            "Init": True,
            "NanoCpus": int(spec.cpu * 1e9),
            "Memory": spec.mem,
            "MemorySwap": spec.mem,
            "Binds": binds,
            "NetworkMode": spec.network,
            "RestartPolicy": {"Name": "no"},
            **(limits or KernelLimits()).host_config(),
            **({"DeviceRequests": device_requests(spec.gpus)} if spec.gpus else {}),
        },
        "NetworkingConfig": {
            "EndpointsConfig": {spec.network: endpoint(spec.hostname, spec.ip)},
        },
    }


def endpoint(hostname: str, ip: str | None) -> dict[str, Any]:
    """A kernel on its network: its hostname as alias, and its address when it must keep
    one (a restart in place)."""
    config: dict[str, Any] = {"Aliases": [hostname]}
    if ip:
        config["IPAMConfig"] = {"IPv4Address": ip}
    return config


def files_archive(files: list[FileSpec]) -> bytes:
    """A tar to extract at ``/``: the directories and files with their owners and modes (the
    engine keeps both); parents not listed are 0755 root. Times are whole seconds: a fraction
    makes every entry carry a pax header too (twice the size, twice the time to make)."""
    buf = io.BytesIO()
    now = int(time.time())
    seen: set[str] = set()

    def entry(path: PurePosixPath, f: FileSpec | None) -> tarfile.TarInfo:
        info = tarfile.TarInfo(str(path).lstrip("/"))
        info.mtime = now
        if f is None or f.directory:
            info.type = tarfile.DIRTYPE
        info.mode, info.uid, info.gid = (0o755, 0, 0) if f is None else (f.mode, f.uid, f.gid)
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        # directories first, outer before inner, so a listed one is never made as a parent
        for f in sorted(files, key=lambda f: (not f.directory, len(PurePosixPath(f.path).parts))):
            path = PurePosixPath(f.path)
            if not path.is_absolute() or ".." in path.parts:
                raise ValueError(f"file path must be absolute and normalised: {f.path}")
            for parent in reversed(path.parents[:-1]):
                if str(parent) not in seen:
                    seen.add(str(parent))
                    tar.addfile(entry(parent, None))
            if f.directory:
                if str(path) not in seen:
                    seen.add(str(path))
                    tar.addfile(entry(path, f))
                continue
            info = entry(path, f)
            if f.fifo:
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
                continue
            data = f.content.encode()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
