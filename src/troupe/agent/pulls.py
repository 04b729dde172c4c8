"""Pulling an image into the agent's engine, with progress and failures in plain words.

The engine reports each layer's bytes (``progressDetail``); :class:`Tally` sums them over
the layers into :class:`PullProgress`. A failure is an :class:`AgentFailed` that names the
image, the registry and the agent and says which of the known cases it is (unknown image,
unauthorised, registry unreachable, disk full, another architecture); an image pulled for
another platform than the kernels' (``runtime.PLATFORM``, linux/amd64) is removed again, so
nothing half-usable stays.

A registry's CA (``registry add --ca-file``) is written where the engine looks for it,
``<certs dir>/HOST:PORT/ca.crt`` (``/etc/docker/certs.d`` by default): the engine reads that
directory at each pull, so no restart is needed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError

from troupe.agent.runtime import platform_error
from troupe.api.errors import AgentFailed
from troupe.api.registries import PullProgress, PullRequest, registry_of, split_image

CERTS_DIR = Path("/etc/docker/certs.d")
#: What the engine's messages say, in lowercase, -> the case a user is told.
_CASES = (
    (("no space left",), "disk full on the agent's engine"),
    (("no matching manifest",), "no variant of the image for this agent's architecture"),
    (
        ("unauthorized", "authentication required", "no basic auth", "denied"),
        "unauthorised: the registry refused the credentials (troupe registry add ...)",
    ),
    (
        ("manifest unknown", "not found", "does not exist", "name unknown"),
        "unknown image: the registry has no such image",
    ),
    (
        (
            "connection refused",
            "no such host",
            "i/o timeout",
            "x509",
            "tls:",
            "dial tcp",
            "server gave http response",
            "connection reset",
            "timeout",
        ),
        "registry unreachable",
    ),
)


class Tally:
    """Bytes done / total over the layers, from the engine's pull messages."""

    def __init__(self, agent: str, image: str) -> None:
        self.layers: dict[str, tuple[int, int]] = {}
        self.progress = PullProgress(agent=agent, image=image)

    def add(self, msg: dict[str, Any]) -> PullProgress:
        layer, status = str(msg.get("id", "")), str(msg.get("status", ""))
        detail = msg.get("progressDetail") or {}
        done, total = self.layers.get(layer, (0, 0))
        if status == "Downloading" and detail.get("total"):
            done, total = int(detail.get("current", 0)), int(detail["total"])
        elif status in ("Download complete", "Pull complete", "Already exists") and layer:
            done = total
        if layer:
            self.layers[layer] = (done, total)
        self.progress.done_bytes = sum(d for d, _ in self.layers.values())
        self.progress.total_bytes = sum(t for _, t in self.layers.values())
        return self.progress.model_copy()


def failure(agent: str, image: str, message: str) -> AgentFailed:
    """The engine's ``message`` as the case it is, naming image, registry and agent."""
    low = message.lower()
    case = next((said for keys, said in _CASES if any(k in low for k in keys)), "pull failed")
    if case.startswith("unknown image") and "@" in image:
        case = "unknown image: no manifest with that digest (the digest does not match)"
    registry = registry_of(image)
    return AgentFailed(
        f"pulling {image} from {registry} on agent {agent}: {case} ({message.strip()[:300]})",
        field="image",
    )


def install_ca(certs_dir: Path, host: str, pem: str) -> None:
    """Writes the registry's CA where the engine trusts it (unchanged: not rewritten)."""
    path = certs_dir / host / "ca.crt"
    with contextlib.suppress(OSError):
        if path.read_text() == pem:
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(pem)
    os.replace(tmp, path)


async def pull(
    docker: aiodocker.Docker, agent: str, req: PullRequest, certs_dir: Path = CERTS_DIR
) -> AsyncIterator[PullProgress]:
    """Pulls ``req.image``, yielding its progress; raises :func:`failure` if it fails."""
    image = req.image
    split_image(image)  # a malformed reference: Invalid naming image, before the engine
    if req.ca_pem:
        try:
            install_ca(certs_dir, registry_of(image), req.ca_pem)
        except OSError as e:
            raise failure(agent, image, f"cannot install the registry's CA: {e}") from e
    auth = req.auth.model_dump() if req.auth else None
    tally = Tally(agent, image)
    try:
        async for msg in docker.images.pull(image, auth=auth, stream=True):
            if msg.get("error"):
                raise failure(agent, image, str(msg["error"]))
            yield tally.add(msg)
    except DockerError as e:
        raise failure(agent, image, str(e.message)) from e
    try:
        info = await docker.images.inspect(image)
    except DockerError as e:
        raise failure(agent, image, str(e.message)) from e
    # The kernels' one platform (runtime.PLATFORM) decides, as it does at create: not the
    # engine's own architecture, which it would cost a system-info call per pull to ask.
    if why := platform_error(image, info):
        with contextlib.suppress(DockerError):
            await docker.images.delete(image)
        raise AgentFailed(
            f"pulling {image} from {registry_of(image)} on agent {agent}: {why} (removed again)",
            field="image",
        )
    yield tally.progress.model_copy(update={"done": True})
