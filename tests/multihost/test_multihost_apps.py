"""An app in main1 on another host of the test bed (the manager runs no local agent, so every
kernel is on a host of its own): opening JupyterLab goes the same way as on one machine,
browser -> manager (app proxy) -> the agent of main1's host -> ``docker exec`` of the relay
in main1, with no port published on any host; HTTP and a kernel's WebSocket both pass."""

from __future__ import annotations

import json
import re
import socket
import uuid
from datetime import UTC, datetime

import httpx
import pytest
from websockets.sync.client import connect

from tests.conftest import TORCH_IMAGE
from tests.multihost.bed import ONE_PER_HOST, Cluster, node_docker, start
from troupe.api.models import SessionCreate

pytestmark = pytest.mark.docker
CELL = (
    "import os, socket, subprocess\n"
    "print(socket.gethostname(), os.environ['BACKENDAI_CLUSTER_HOSTS'])\n"
    "print(subprocess.run(['ssh', 'sub1', 'hostname'], capture_output=True, text=True).stdout)"
)


def execute(ws_url: str, server: str, host: str, cookie: str, code: str) -> str:
    """Runs ``code`` over a Jupyter kernel's WebSocket reached through the proxy (a socket to
    the manager, the app's host name in ``Host`` and ``Origin``); what it printed."""
    port = int(server.rsplit(":", 1)[1])
    sock = socket.create_connection((server.split("://", 1)[1].rsplit(":", 1)[0], port), 30)
    msg_id = uuid.uuid4().hex
    request = {
        "header": {
            "msg_id": msg_id,
            "msg_type": "execute_request",
            "username": "",
            "session": uuid.uuid4().hex,
            "version": "5.3",
            "date": datetime.now(UTC).isoformat(),
        },
        "parent_header": {},
        "metadata": {},
        "channel": "shell",
        "buffers": [],
        "content": {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
    }
    out: list[str] = []
    with connect(
        ws_url, sock=sock, origin=f"http://{host}", additional_headers={"Cookie": cookie},
        open_timeout=60,
    ) as ws:  # fmt: skip
        ws.send(json.dumps(request))
        while True:
            m = json.loads(ws.recv(timeout=120))
            if (m.get("parent_header") or {}).get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "stream":
                out.append(m["content"]["text"])
            elif m["msg_type"] == "error":
                out.append(m["content"]["evalue"])
            elif m["msg_type"] == "execute_reply":
                return "".join(out)


def test_jupyter_in_main1_on_another_host_opens_through_the_proxy(cluster: Cluster) -> None:
    c = cluster.server.client()
    req = SessionCreate(
        name="apps-mh",
        image=TORCH_IMAGE,
        cluster_size=2,
        cluster_mode="multi-node",
        resources=ONE_PER_HOST,
    )
    start(c, req)
    try:
        info = c.get_session("apps-mh")
        hosts = {k.hostname: k.agent for k in info.kernels}
        assert len(set(hosts.values())) == 2, hosts
        sid = info.id
        app = c.open_app("apps-mh", "jupyter")  # started on demand on main1's host
        assert app.state == "running", app
        m = re.fullmatch(r"http://([^/]+)(/_troupe/enter\?t=.+)", app.url or "")
        assert m and m.group(1).startswith(f"8888-{sid}.apps.localhost"), app.url
        host, enter = m.groups()
        base = cluster.server.url
        with httpx.Client(base_url=base, headers={"Host": host}, timeout=60) as web:
            r = web.get(enter)
            assert r.status_code == 303, r.text
            r = web.get("/lab")  # (the client keeps the app's cookie and Jupyter's _xsrf)
            assert r.status_code == 200 and "JupyterLab" in r.text, r.text[:500]
            xsrf = web.cookies.get("_xsrf") or ""
            r = web.post("/api/kernels", json={}, headers={"X-XSRFToken": xsrf})
            assert r.status_code == 201, r.text
            kernel = r.json()["id"]
            cookie = "; ".join(f"{k}={v}" for k, v in web.cookies.items())
        url = f"ws://{host}/api/kernels/{kernel}/channels"
        printed = execute(url, base, host, cookie, CELL)
        assert printed.split() == ["main1", "main1,sub1", "sub1"], printed
        # the request went through the agent: no port of main1 is published on its host
        node = int((hosts["main1"] or "tt0")[2:])
        ports = node_docker(node, "ps", "--filter", "label=troupe.session", "--format",
                            "{{.Ports}}")  # fmt: skip
        assert ports.returncode == 0 and ports.stdout.strip("\n ") == "", ports
    finally:
        c.destroy_session("apps-mh")
    with httpx.Client(base_url=cluster.server.url, headers={"Host": host}, timeout=30) as web:
        r = web.get("/api/status", headers={"Cookie": cookie})
        assert r.status_code == 409 and "not RUNNING" in r.text, r.text  # access ended
