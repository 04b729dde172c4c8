"""The images an engine holds, as :class:`ImageInfo`: tags, sizes and whether each has sshd.

Whether an image has sshd (``has_sshd``) is read from its labels, never by looking inside it
(that would need a container per image): an image that says ``troupe.sshd=true`` or ``false``
is taken at its word; troupe's own images (label ``troupe.image``, ``scripts/build-images.sh``)
all have it, since ``troupe/base`` installs ``openssh-server`` and the others are built on it;
of any other image it is not known (``None``). A kernel of an image without sshd still runs
(docs/contract.md, "Images").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError

from troupe.agent import pulls
from troupe.agent.engine import step
from troupe.api.models import ImageInfo
from troupe.api.registries import PullProgress, PullRequest

#: Says whether an image has ``/usr/sbin/sshd`` (``true`` / ``false``), for images not troupe's.
LABEL_SSHD = "troupe.sshd"
#: Which of troupe's recipes an image was built from (``images/*/Dockerfile``).
LABEL_IMAGE = "troupe.image"
_SAYS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def has_sshd(labels: Mapping[str, str] | None) -> bool | None:
    """What an image's labels say about sshd in it; None when they say nothing."""
    labels = labels or {}
    said = _SAYS.get(str(labels.get(LABEL_SSHD, "")).strip().lower())
    if said is not None:
        return said
    return True if labels.get(LABEL_IMAGE) else None


def image_infos(images: list[dict[str, Any]]) -> list[ImageInfo]:
    """One entry per tag of the engine's image list, sorted by name."""
    out = [
        ImageInfo(
            name=tag,
            id=img["Id"],
            size=img.get("Size", 0),
            created=datetime.fromtimestamp(int(img.get("Created", 0)), UTC).isoformat(),
            has_sshd=has_sshd(img.get("Labels")),
        )
        for img in images
        for tag in img.get("RepoTags") or []
        if tag != "<none>:<none>"
    ]
    return sorted(out, key=lambda i: i.name)


async def list_images(docker: aiodocker.Docker) -> list[ImageInfo]:
    with step("listing images"):
        return image_infos(await docker.images.list())


async def has_image(docker: aiodocker.Docker, name: str) -> bool:
    try:
        await docker.images.inspect(name)
    except DockerError:
        return False
    return True


async def image_labels(docker: aiodocker.Docker, name: str) -> dict[str, str]:
    """The labels of image ``name``: the apps it declares (:mod:`troupe.api.apps`)."""
    with step(f"inspecting image {name}"):
        info = await docker.images.inspect(name)
    labels = (info.get("Config") or {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


class ImageOps:
    """The image part of an agent (:class:`~troupe.agent.docker_backend.DockerAgent`)."""

    name: str
    #: Where the engine looks for registries' CAs (``<dir>/HOST:PORT/ca.crt``).
    certs_dir: Path = pulls.CERTS_DIR

    @property
    def docker(self) -> aiodocker.Docker:
        raise NotImplementedError

    async def images(self) -> list[ImageInfo]:
        return await list_images(self.docker)

    async def has_image(self, name: str) -> bool:
        return await has_image(self.docker, name)

    async def image_labels(self, name: str) -> dict[str, str]:
        return await image_labels(self.docker, name)

    def pull_image(self, req: PullRequest) -> AsyncIterator[PullProgress]:
        """Pulls an image into the engine, yielding its progress (the last one ``done``)."""
        return pulls.pull(self.docker, self.name, req, self.certs_dir)
