"""troupe/pytorch's apps (docs/contract.md, "Apps") on the real engine: the image declares
JupyterLab and TensorBoard in its labels, and each label's command, run as `work` in /home/work
through the runner's exec.sh (as troupe starts apps in main1), serves its port as the app
proxy needs it: no auth, a Host header that is the app's own origin, Jupyter's kernel
WebSocket. One container for both apps, to keep it fast."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator

import pytest

from tests.conftest import TORCH_IMAGE, docker
from troupe.agent.kernel import RUNNER_MOUNT, runner_dir
from troupe.api.apps import parse_service_ports

pytestmark = pytest.mark.docker

#: From the command's start until the app answers; about 5 s each on an idle machine.
START_LIMIT_SECONDS = 90

#: Run in the container as work: waits for each app, then talks to it the way a browser
#: behind the app proxy does (the Host and Origin of the app's own origin). Prints JSON.
PROBE = r"""
import asyncio, http.cookiejar, json, sys, time, urllib.error, urllib.request, uuid
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

limit, apps = float(sys.argv[1]), json.loads(sys.argv[2])
jar = http.cookiejar.CookieJar()
opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
out = {}

def get(port, path, method="GET", body=None, headers={}):
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", body, method=method)
    r.add_header("Host", f"{port}-0123abcd.apps.localhost:8090")
    for k, v in headers.items():
        r.add_header(k, v)
    try:
        with opener.open(r, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()

t0 = time.monotonic()
for name, port in apps.items():
    while True:
        try:
            out[name] = {"status": get(port, "/")[0], "after": round(time.monotonic() - t0, 1)}
            break
        except OSError:
            if time.monotonic() - t0 > limit:
                out[name] = {"status": None}
                break
            time.sleep(0.2)

if out.get("jupyter", {}).get("status") == 200:
    j = out["jupyter"]
    host = "8888-0123abcd.apps.localhost:8090"
    j["api_status"] = get(8888, "/api/status")[0]
    xsrf = next((c.value for c in jar if c.name == "_xsrf"), "")
    hdr = {"Content-Type": "application/json", "Origin": f"http://{host}"}
    j["kernel_without_xsrf"] = get(8888, "/api/kernels", "POST", b"{}", hdr)[0]
    status, body = get(8888, "/api/kernels", "POST", b"{}", {**hdr, "X-XSRFToken": xsrf})
    j["kernel_post"] = status
    kid = json.loads(body)["id"]
    cookie = "; ".join(f"{c.name}={c.value}" for c in jar)

    async def ws(origin):
        req = HTTPRequest(f"ws://127.0.0.1:8888/api/kernels/{kid}/channels",
                          headers={"Host": host, "Origin": origin, "Cookie": cookie})
        try:
            conn = await websocket_connect(req)
        except Exception as e:
            return f"refused: {e}"
        code = ("import getpass, os; "
                "print(getpass.getuser(), os.getcwd(), os.environ['TROUPE_APP_TEST'])")
        conn.write_message(json.dumps({
            "header": {"msg_id": uuid.uuid4().hex, "username": "t", "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False}}))
        while (m := await asyncio.wait_for(conn.read_message(), 60)) is not None:
            msg = json.loads(m)
            if msg["msg_type"] == "stream":
                conn.close()
                return msg["content"]["text"]
        return "closed"

    j["kernel_ws"] = asyncio.run(ws(f"http://{host}"))
    j["kernel_ws_other_origin"] = asyncio.run(ws("http://other.apps.localhost:8090"))
if out.get("tensorboard", {}).get("status") == 200:
    out["tensorboard"]["logdir"] = json.loads(get(6006, "/data/logdir")[1])["logdir"]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def kernel(docker_engine: None) -> Iterator[str]:
    """A container of the image set up by troupe's entrypoint (user work, environment files),
    idling like a kernel; removed afterwards."""
    name = f"test-apps-{secrets.token_hex(4)}"
    docker(
        *("run", "-d", "--init", "--name", name, "--network", "none"),
        *("-v", f"{runner_dir()}:{RUNNER_MOUNT}:ro", "-e", "TROUPE_APP_TEST=from-the-session"),
        *("--entrypoint", "/bin/sh", TORCH_IMAGE, f"{RUNNER_MOUNT}/entrypoint.sh"),
        *("sleep", "infinity"),
    )
    try:
        deadline = time.monotonic() + 30
        while docker("exec", name, "test", "-f", "/run/troupe/environ.sh", check=False).returncode:
            assert time.monotonic() < deadline, docker("logs", name, check=False).stderr
            time.sleep(0.2)
        yield name
    finally:
        docker("rm", "-f", name, check=False)


def _labels() -> dict[str, str]:
    out = docker("image", "inspect", "--format", "{{json .Config.Labels}}", TORCH_IMAGE).stdout
    labels: dict[str, str] = json.loads(out)
    return labels


def test_pytorch_image_declares_jupyter_and_tensorboard(docker_engine: None) -> None:
    apps = parse_service_ports(_labels())
    assert [(a.name, a.protocol, a.port) for a in apps] == [
        ("jupyter", "http", 8888),
        ("tensorboard", "http", 6006),
    ]
    assert all(a.command for a in apps)


def test_each_apps_command_serves_its_port_behind_the_proxy(kernel: str) -> None:
    apps = parse_service_ports(_labels())
    for app in apps:
        assert app.command
        # As troupe starts an app: detached, as work in /home/work, through exec.sh (the
        # session's environment), its output in ~/.troupe/apps/NAME.log.
        docker(
            *("exec", "-d", "-u", "work", "-w", "/home/work", kernel),
            *("/bin/sh", f"{RUNNER_MOUNT}/exec.sh", "/bin/sh", "-c"),
            'mkdir -p .troupe/apps && exec /bin/sh -c "$1" > ".troupe/apps/$2.log" 2>&1',
            *("app", app.command, app.name),
        )
    ports = json.dumps({a.name: a.port for a in apps})
    r = docker(
        *("exec", "-u", "work", "-w", "/home/work", kernel),
        *("python", "-c", PROBE, str(START_LIMIT_SECONDS), ports),
        check=False,
    )
    logs = docker("exec", kernel, "sh", "-c", "tail -n 20 /home/work/.troupe/apps/*.log").stdout
    assert r.returncode == 0, r.stderr + logs
    got = json.loads(r.stdout)
    print(f"\n[apps] first answer after (s): { {k: v.get('after') for k, v in got.items()} }")
    jupyter, tensorboard = got["jupyter"], got["tensorboard"]
    assert jupyter["status"] == 200 and tensorboard["status"] == 200, f"{got}\n{logs}"
    # No token or password, and the app's own origin accepted as Host.
    assert jupyter["api_status"] == 200
    # Jupyter's own XSRF and Origin checks stay on (a page of another origin gets nowhere).
    assert jupyter["kernel_without_xsrf"] == 403
    assert jupyter["kernel_post"] == 201
    assert jupyter["kernel_ws"] == "work /home/work from-the-session\n"
    assert jupyter["kernel_ws_other_origin"].startswith("refused: HTTP 403")
    assert tensorboard["logdir"] == "/home/work/runs"
