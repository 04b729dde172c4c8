"""The agent's pull over a stand-in engine (progress, failures, another architecture removed
again) and its wire between manager and agent (NDJSON progress, an error line raised as the
agent's domain error)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiodocker.exceptions import DockerError

from troupe.agent.app import create_agent_app
from troupe.agent.pulls import pull
from troupe.api.errors import AgentFailed, Invalid
from troupe.api.registries import PullProgress, PullRequest, RegistryAuth
from troupe.manager.remote_agent import RemoteAgent

IMAGE = "reg.test:5000/team/x:1"


class FakeImages:
    def __init__(self, messages: list[dict[str, Any]], arch: str = "amd64") -> None:
        self.messages, self.arch = messages, arch
        self.deleted: list[str] = []
        self.auth: Any = None

    async def _stream(self) -> AsyncIterator[dict[str, Any]]:
        for m in self.messages:
            if m.get("raise"):
                raise DockerError(500, {"message": m["raise"]})
            yield m

    def pull(self, image: str, *, auth: Any = None, stream: bool = True) -> Any:
        self.auth = auth
        return self._stream()

    async def inspect(self, image: str) -> dict[str, Any]:
        return {"Architecture": self.arch}

    async def delete(self, image: str) -> None:
        self.deleted.append(image)


class FakeDocker:
    """No ``system``: the pull never asks the engine's system info (the kernels' platform is
    one, ``runtime.PLATFORM``)."""

    def __init__(self, images: FakeImages) -> None:
        self.images = images


LAYERS = [
    {"status": "Pulling fs layer", "id": "a"},
    {"status": "Downloading", "id": "a", "progressDetail": {"current": 50, "total": 100}},
    {"status": "Pull complete", "id": "a"},
]


async def _all(docker: Any, req: PullRequest, certs: Path) -> list[PullProgress]:
    return [p async for p in pull(docker, "agent1", req, certs)]


async def test_progress_credentials_and_ca(tmp_path: Path) -> None:
    images = FakeImages(LAYERS)
    req = PullRequest(image=IMAGE, auth=RegistryAuth(username="u", password="p"), ca_pem="CA")
    out = await _all(FakeDocker(images), req, tmp_path)
    assert [(p.done_bytes, p.total_bytes) for p in out] == [
        (0, 0),
        (50, 100),
        (100, 100),
        (100, 100),
    ]
    assert out[-1].done and not any(p.done for p in out[:-1])
    assert images.auth == {"username": "u", "password": "p"}
    assert (tmp_path / "reg.test:5000" / "ca.crt").read_text() == "CA"


async def test_image_of_another_architecture_is_removed_again(tmp_path: Path) -> None:
    images = FakeImages(LAYERS, arch="arm64")
    with pytest.raises(AgentFailed) as e:
        await _all(FakeDocker(images), PullRequest(image=IMAGE), tmp_path)
    assert "is built for linux/arm64; troupe runs linux/amd64" in e.value.message
    assert e.value.message.endswith("(removed again)")
    assert IMAGE in e.value.message and "agent agent1" in e.value.message
    assert images.deleted == [IMAGE]


@pytest.mark.parametrize(
    ("messages", "case"),
    [
        ([{"error": "unauthorized: authentication required"}], "unauthorised"),
        ([*LAYERS[:2], {"raise": "write x: no space left on device"}], "disk full"),
        ([{"raise": "manifest for x not found: manifest unknown"}], "unknown image"),
    ],
)
async def test_engine_failures(messages: list[dict[str, Any]], case: str, tmp_path: Path) -> None:
    with pytest.raises(AgentFailed) as e:
        await _all(FakeDocker(FakeImages(messages)), PullRequest(image=IMAGE), tmp_path)
    assert case in e.value.message and "from reg.test:5000 on agent agent1" in e.value.message


async def test_malformed_reference_never_reaches_the_engine(tmp_path: Path) -> None:
    images = FakeImages(LAYERS)
    with pytest.raises(Invalid):
        await _all(FakeDocker(images), PullRequest(image="reg.test/x@sha256:12"), tmp_path)
    assert images.auth is None


class Backend:
    """Just what the agent app's pull route uses."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    async def pull_image(self, req: PullRequest) -> AsyncIterator[PullProgress]:
        yield PullProgress(agent="h1", image=req.image, done_bytes=1, total_bytes=2)
        if self.fail:
            raise AgentFailed(f"pulling {req.image} on agent h1: unauthorised", field="image")
        yield PullProgress(agent="h1", image=req.image, done_bytes=2, total_bytes=2, done=True)


@pytest.mark.parametrize("fail", [False, True])
async def test_wire_between_manager_and_agent(fail: bool) -> None:
    app = create_agent_app(Backend(fail), "tok")  # type: ignore[arg-type]
    remote = RemoteAgent("h1", "http://h1.test:6011", "tok")
    remote._http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://h1.test:6011/agent/v1",
        headers={"Authorization": "Bearer tok"},
    )
    req = PullRequest(image=IMAGE, auth=RegistryAuth(username="u", password="p"))
    seen: list[PullProgress] = []
    try:
        if fail:
            with pytest.raises(AgentFailed) as e:
                async for p in remote.pull_image(req):
                    seen.append(p)
            assert e.value.message == f"pulling {IMAGE} on agent h1: unauthorised"
            assert e.value.field == "image"
        else:
            seen = [p async for p in remote.pull_image(req)]
            assert seen[-1].done
        assert seen[0].done_bytes == 1
    finally:
        await remote.close()
