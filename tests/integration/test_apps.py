"""Apps in main1 on the real engine (docs/apps.md): any port of a ``troupe/base`` session, an
image's declared apps started on demand with the session's environment (``ssh sub1`` and
``BACKENDAI_CLUSTER_*`` work from the app), reused, started again after they died, a failing
one's log lines; JupyterLab of ``troupe/pytorch`` when the image declares it."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import BASE_IMAGE, DOCKER, TORCH_IMAGE, Server, docker
from troupe.agent.app import create_agent_app
from troupe.agent.docker_backend import DockerAgent
from troupe.api.agent import AGENT_PREFIX
from troupe.api.errors import AgentFailed, Conflict, Invalid, NotRunning
from troupe.api.models import Resources, SessionCreate
from troupe.client.sdk import Client
from troupe.manager.remote_agent import RemoteAgent

pytestmark = pytest.mark.docker
SMALL = Resources(cpu=0.25, mem=256 * 1024**2)
APPS = "/home/work/.troupe/apps"
WEB = (
    "env > /home/work/app-env.txt; pwd > /home/work/app-pwd.txt; id -un > /home/work/app-user.txt;"
    " ssh -o BatchMode=yes sub1 hostname > /home/work/app-ssh.txt 2>&1;"
    " exec python3 -u -m http.server --bind 127.0.0.1 8080"
)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def apps_image() -> Iterator[str]:
    """``troupe/base`` with two declared apps: ``web`` (serves 8080) and ``bad`` (fails)."""
    tag = f"troupe/apps-test:{uuid.uuid4().hex[:8]}"
    labels = {
        "ai.backend.service-ports": "web:http:8080,bad:http:8081",
        "troupe.app.web.command": WEB,
        "troupe.app.bad.command": "echo 'bad: no such module'; exit 3",
    }
    lines = [f"FROM {BASE_IMAGE}", *(f"LABEL {k}={json.dumps(v)}" for k, v in labels.items())]
    subprocess.run(
        [DOCKER, "build", "-q", "-t", tag, "-"],
        input="\n".join(lines) + "\n",
        text=True,
        capture_output=True,
        check=True,
    )
    try:
        yield tag
    finally:
        docker("rmi", "-f", tag, check=False)


def start(c: Client, name: str, image: str, size: int = 1) -> None:
    c.create_session(SessionCreate(name=name, image=image, cluster_size=size, resources=SMALL))
    info = c.wait_session(name, timeout=180)
    assert info.status == "RUNNING", info.status_info


def sh(c: Client, name: str, script: str) -> str:
    code, out = c.exec(name, ["sh", "-c", script])
    assert code == 0, out
    return out


def states(c: Client, name: str) -> dict[str, str]:
    return {a.name: a.state for a in c.list_apps(name)}


def test_any_port_of_a_base_session(server: Server) -> None:
    c = server.client()
    name = unique("port")
    start(c, name, BASE_IMAGE)
    try:
        assert c.list_apps(name) == []  # no labels: no built-in apps
        with pytest.raises(Conflict) as nothing:
            c.open_app(name, 9000)
        assert "nothing answers on port 9000" in nothing.value.message
        sh(c, name, "setsid python3 -m http.server 9000 </dev/null >/tmp/srv.log 2>&1 &")
        deadline = time.monotonic() + 30
        while True:
            try:
                a = c.open_app(name, "9000")
                break
            except Conflict:
                assert time.monotonic() < deadline, "http.server did not answer"
                time.sleep(0.3)
        assert (a.name, a.port, a.state) == ("9000", 9000, "running")
        assert a.url and "_troupe/enter" in a.url
        # the command line: no apps listed, the link printed
        r = server.cli("session", "apps", name)
        assert r.returncode == 0 and "declares no apps" in r.stderr, r.stderr
        r = server.cli("session", "open", name, "9000", "--no-browser")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("http://9000-") and "_troupe/enter" in r.stdout
        r = server.cli("session", "open", name, "70000")
        assert r.returncode == 1 and "1-65535" in r.stderr
        with pytest.raises(Invalid):
            c.open_app(name, 0)
    finally:
        c.destroy_session(name)
    with pytest.raises(NotRunning):
        c.open_app(name, 9000)


def test_declared_apps_start_on_demand_with_the_sessions_environment(
    server: Server, apps_image: str
) -> None:
    c = server.client()
    name = unique("apps")
    start(c, name, apps_image, size=2)
    try:
        assert states(c, name) == {"web": "stopped", "bad": "stopped"}
        a = c.open_app(name, "web")
        assert (a.name, a.port, a.state) == ("web", 8080, "running")
        env = dict(
            line.split("=", 1)
            for line in sh(c, name, "cat app-env.txt").splitlines()
            if "=" in line
        )
        assert env["BACKENDAI_CLUSTER_HOSTS"] == "main1,sub1"
        assert env["BACKENDAI_CLUSTER_HOST"] == "main1"
        assert sh(c, name, "cat app-ssh.txt").strip() == "sub1"
        assert sh(c, name, "cat app-user.txt app-pwd.txt").split() == ["work", "/home/work"]
        # the log is the user's to read
        assert "Serving HTTP" in sh(c, name, f"cat {APPS}/web.log")
        pid = sh(c, name, f"cat {APPS}/web.pid").strip()
        assert c.open_app(name, "web").state == "running"
        assert sh(c, name, f"cat {APPS}/web.pid").strip() == pid  # reused
        assert states(c, name)["web"] == "running"
        # it dies; the next open starts it again
        sh(c, name, f"kill -s KILL -- -{pid}")
        deadline = time.monotonic() + 20
        while states(c, name)["web"] != "failed":
            assert time.monotonic() < deadline, states(c, name)
            time.sleep(0.3)
        assert c.open_app(name, "8080").state == "running"
        assert sh(c, name, f"cat {APPS}/web.pid").strip() != pid
        # a failing app: its log's last lines, nothing left running
        with pytest.raises(Invalid) as bad:
            c.open_app(name, "bad")
        assert bad.value.status == 422
        assert "exited with code 3" in bad.value.message
        assert "bad: no such module" in bad.value.message
        listed = {a.name: a for a in c.list_apps(name)}
        assert listed["bad"].state == "failed"
        assert "bad: no such module" in listed["bad"].log_tail
    finally:
        c.destroy_session(name)


async def test_agents_answer_an_images_labels(
    tmp_path: Path, docker_engine: None, apps_image: str
) -> None:
    """The agent's own call, in process and over its HTTP API as the manager makes it."""
    a = DockerAgent("test-labels", data_root=tmp_path / "root")
    await a.start()
    remote = RemoteAgent("test-labels", "http://agent.test", "tok")
    remote._http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_agent_app(a, "tok")),
        base_url="http://agent.test" + AGENT_PREFIX,
        headers={"Authorization": "Bearer tok"},
    )
    try:
        for agent in (a, remote):
            labels = await agent.image_labels(apps_image)
            assert labels["ai.backend.service-ports"] == "web:http:8080,bad:http:8081"
            assert labels["troupe.app.web.command"] == WEB
            assert "ai.backend.service-ports" not in await agent.image_labels(BASE_IMAGE)
        with pytest.raises(AgentFailed):
            await remote.image_labels("troupe/no-such-image:1")
    finally:
        await remote.close()
        await a.close()


def test_jupyterlab_of_the_pytorch_image(server: Server) -> None:
    labels = docker("image", "inspect", "-f", "{{json .Config.Labels}}", TORCH_IMAGE).stdout
    if "jupyter:http:8888" not in labels:
        pytest.skip(f"{TORCH_IMAGE} declares no JupyterLab yet")
    c = server.client()
    name = unique("jupyter")
    c.create_session(
        SessionCreate(name=name, image=TORCH_IMAGE, resources=Resources(cpu=1, mem=1024**3))
    )
    assert c.wait_session(name, timeout=180).status == "RUNNING"
    try:
        a = c.open_app(name, "jupyter")
        assert (a.port, a.state) == (8888, "running")
        out = sh(
            c,
            name,
            'python3 -c "import urllib.request as u;'
            " print(u.urlopen('http://127.0.0.1:8888/api').read().decode())\"",
        )
        assert '"version"' in out
    finally:
        c.destroy_session(name)
