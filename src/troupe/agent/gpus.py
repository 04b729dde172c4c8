"""This host's GPUs: what ``nvidia-smi`` reports, which of them to offer (``--gpus``), and
whether the Docker engine can hand them to containers at all.

Discovery runs once, when the agent starts: the parser and the choice are pure functions; the
runner has a time-out; the engine check starts (and removes) one throw-away container with the
same device request a kernel gets, because Docker 20.10 refuses an unknown device driver only
when a container starts (``could not select device driver "nvidia"``), not when it is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError
from pydantic import ValidationError

from troupe.agent.kernel import device_requests
from troupe.api.models import GpuInfo

log = logging.getLogger(__name__)

#: What nvidia-smi is asked: one CSV line per GPU, memory in MiB.
QUERY = ["--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]
SMI_TIMEOUT = 15.0
PROBE_TIMEOUT = 60.0
#: Label of the engine check's throw-away container (never a kernel: no troupe.session).
LABEL_PROBE = "troupe.gpu-probe"
#: Images preferred for the engine check (any local image with /bin/sh would do).
PROBE_IMAGE_PREFIXES = ("troupe/base:", "troupe/")
MiB = 1024**2
#: Longest reason reported (the API keeps 1000 characters).
REASON_CHARS = 900


def parse(text: str) -> list[GpuInfo]:
    """GPUs from ``nvidia-smi --query-gpu=index,uuid,name,memory.total
    --format=csv,noheader,nounits`` output, by index; :class:`ValueError` if it is not that."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            raise ValueError(f"unexpected line {line.strip()!r}")
        index, gpu_id, memory = parts[0], parts[1], parts[-1]
        try:
            out.append(
                GpuInfo(
                    index=int(index),
                    uuid=gpu_id,
                    model=", ".join(parts[2:-1]),
                    memory=int(memory) * MiB if memory.isdigit() else 0,
                )
            )
        except (ValueError, ValidationError) as e:
            raise ValueError(f"unexpected line {line.strip()!r}") from e
    if len({g.index for g in out}) != len(out) or len({g.uuid for g in out}) != len(out):
        raise ValueError("the same GPU twice")
    return sorted(out, key=lambda g: g.index)


@dataclass(frozen=True)
class Choice:
    """``--gpus``: ``auto`` (every GPU found), ``none``, or indices such as ``0,2``."""

    mode: str = "auto"
    indices: tuple[int, ...] = ()

    @classmethod
    def parse(cls, value: str) -> Choice:
        v = value.strip().lower()
        if v in ("auto", "all", ""):
            return cls("auto")
        if v == "none":
            return cls("none")
        try:
            indices = tuple(int(x) for x in v.split(","))
        except ValueError:
            raise ValueError(
                f"--gpus must be auto, none or indices like 0,2 (not {value!r})"
            ) from None
        if any(i < 0 for i in indices) or len(set(indices)) != len(indices):
            raise ValueError(f"--gpus: indices must be distinct and not negative ({value!r})")
        return cls("list", indices)

    def __str__(self) -> str:
        return ",".join(map(str, self.indices)) if self.mode == "list" else self.mode


def select(found: Sequence[GpuInfo], choice: Choice) -> tuple[list[GpuInfo], str]:
    """The GPUs to offer and, when none, why not."""
    if choice.mode == "none":
        return [], "not offered (--gpus none)"
    if choice.mode == "auto":
        return list(found), "" if found else "nvidia-smi reports no GPUs"
    by_index = {g.index: g for g in found}
    missing = [i for i in choice.indices if i not in by_index]
    if missing:
        have = ",".join(str(g.index) for g in found) or "none"
        return [], f"--gpus {choice}: no GPU {missing[0]} on this host (nvidia-smi: {have})"
    return [by_index[i] for i in sorted(choice.indices)], ""


async def query(
    nvidia_smi: str | None = None, timeout: float = SMI_TIMEOUT
) -> tuple[list[GpuInfo], str]:
    """Every GPU ``nvidia_smi`` (default: the first ``nvidia-smi`` on PATH) reports, or none
    and why."""
    text, reason = await run_smi(QUERY, nvidia_smi, timeout)
    if reason:
        return [], reason
    try:
        return parse(text), ""
    except ValueError as e:
        path = nvidia_smi or shutil.which("nvidia-smi")
        return [], f"{path}: output not understood: {e}"[:REASON_CHARS]


async def run_smi(
    args: Sequence[str], nvidia_smi: str | None = None, timeout: float = SMI_TIMEOUT
) -> tuple[str, str]:
    """(output, "") of ``nvidia_smi`` (default: the first ``nvidia-smi`` on PATH) asked
    ``args``, or ("", why not): it is missing, fails or does not answer within ``timeout``."""
    path = nvidia_smi or shutil.which("nvidia-smi")
    if not path:
        return "", "nvidia-smi not found on PATH"
    try:
        proc = await asyncio.create_subprocess_exec(
            path,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as e:
        return "", f"{path}: {e.strerror or e}"
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return "", f"{path} did not answer within {timeout:g} s"
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        first = text.strip().splitlines()[0] if text.strip() else ""
        return "", f"{path} failed (exit {proc.returncode}): {first}"[:REASON_CHARS]
    return text, ""


async def probe_image(docker: aiodocker.Docker) -> str | None:
    """A local image for the engine check: troupe's own first, else the smallest one."""
    tagged: list[tuple[str, int]] = [
        (str(tag), int(img.get("Size", 0)))
        for img in await docker.images.list()
        for tag in img.get("RepoTags") or []
        if tag != "<none>:<none>"
    ]
    for prefix in PROBE_IMAGE_PREFIXES:
        mine = sorted(t for t, _ in tagged if t.startswith(prefix))
        if mine:
            return mine[0]
    return min(tagged, key=lambda t: t[1])[0] if tagged else None


def probe_config(image: str, gpu_ids: Sequence[str]) -> dict[str, Any]:
    return {
        "Image": image,
        "Entrypoint": ["/bin/sh", "-c", "exit 0"],
        "Cmd": [],
        "Labels": {LABEL_PROBE: "1"},
        "HostConfig": {"NetworkMode": "none", "DeviceRequests": device_requests(list(gpu_ids))},
    }


async def engine_reason(
    docker: aiodocker.Docker, gpu_ids: Sequence[str], timeout: float = PROBE_TIMEOUT
) -> str:
    """Empty if the engine runs a container given ``gpu_ids`` (driver ``nvidia``), else why not."""
    try:
        image = await probe_image(docker)
    except DockerError as e:
        return f"could not list images for the engine's GPU check: {e.message}"
    if image is None:
        return "no local image to check the engine's GPU support with"
    name = f"troupe-gpu-probe-{uuid.uuid4().hex[:12]}"
    try:
        async with asyncio.timeout(timeout):
            container = await docker.containers.create(probe_config(image, gpu_ids), name=name)
            await container.start()
            status = await container.wait()
        code = status.get("StatusCode", -1)
        if code != 0:
            return f"a test container given the GPUs exited with {code} (image {image})"
        return ""
    except TimeoutError:
        return f"the engine's GPU check took longer than {timeout:g} s"
    except DockerError as e:
        return why_refused(e.message)
    finally:  # by name: also when a time-out came between create and its answer
        with contextlib.suppress(DockerError):
            await docker.containers.container(name).delete(force=True)


def why_refused(message: str) -> str:
    """The engine's refusal of a GPU request, with what to do about it."""
    hint = ""
    if "could not select device driver" in message:
        hint = (
            " (install NVIDIA's container toolkit so that nvidia-container-runtime-hook is on"
            " the Docker daemon's PATH, then restart the daemon)"
        )
    return f"the Docker engine cannot hand GPUs to containers: {message.strip()}{hint}"[
        :REASON_CHARS
    ]


async def discover(
    docker: aiodocker.Docker, choice: Choice, nvidia_smi: str | None = None
) -> tuple[list[GpuInfo], str]:
    """The GPUs this agent offers and, when none, why: nvidia-smi, ``--gpus``, the engine."""
    if choice.mode == "none":
        return select([], choice)
    found, reason = await query(nvidia_smi)
    if reason:
        return [], reason
    offered, reason = select(found, choice)
    if not offered:
        return [], reason
    try:
        reason = await engine_reason(docker, [g.uuid for g in offered])
    except Exception as e:  # the agent serves without GPUs rather than not at all
        reason = f"the engine's GPU check failed: {e}"[:REASON_CHARS]
    if reason:
        return [], reason
    return offered, ""
