"""Single-node cluster sessions against the real Docker engine (issue 3's test list)."""

from __future__ import annotations

import json
import shlex
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.conftest import BASE_IMAGE, TORCH_IMAGE, Server, docker
from troupe.agent.files import FILES_DIR
from troupe.api.agent import LABEL_AGENT
from troupe.api.models import Mount, Resources, SessionCreate, SessionInfo
from troupe.client.sdk import Client, TroupeError
from troupe.cluster import build_cluster, derive_dist_env

pytestmark = pytest.mark.docker
SMALL = Resources(cpu=0.25, mem=256 * 1024**2)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def start(c: Client, name: str, size: int = 3, **kw: object) -> SessionInfo:
    req = SessionCreate(
        name=name,
        image=kw.pop("image", BASE_IMAGE),
        cluster_size=size,
        resources=kw.pop("resources", SMALL),
        **kw,
    )  # type: ignore[arg-type]
    c.create_session(req)
    info = c.wait_session(name, until="final" if req.type == "batch" else "running", timeout=180)
    if req.type != "batch":
        assert info.status == "RUNNING", info.status_info
    return info


def sh(c: Client, name: str, script: str, kernel: str = "main1") -> tuple[int, str]:
    return c.exec(name, ["sh", "-c", script], kernel=kernel)


def env_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def labelled(kind: str, session_id: str) -> list[str]:
    args = ["ps", "-aq"] if kind == "container" else ["network", "ls", "-q"]
    return docker(*args, "--filter", f"label=troupe.session={session_id}").stdout.split()


def test_three_kernels_env_ssh_and_entry_paths(server: Server) -> None:
    c = server.client()
    name = unique("env")
    info = start(c, name, environ={"MASTER_PORT": "12345", "MY_VAR": "a b"})
    try:
        expected = {
            k.hostname: k.env
            for k in build_cluster(
                info.id,
                [k.id for k in info.kernels],
                "single-node",
                {"MASTER_PORT": "12345", "MY_VAR": "a b"},
            )
        }
        hosts = ["main1", "sub1", "sub2"]
        for host in hosts:
            want = {**expected[host], **derive_dist_env(expected[host])}
            assert want["MASTER_PORT"] == "12345"
            assert want["MASTER_ADDR"] == "main1"
            # 1. exec into the kernel
            code, out = sh(c, name, "env", kernel=host)
            assert code == 0
            # 2. ssh from main1, non-interactive; 3. a login shell over ssh
            for path in (f"ssh {host} env", f"ssh {host} bash -lc env"):
                code, out2 = sh(c, name, path + " 2>/tmp/err; cat /tmp/err >&2")
                assert code == 0, out2
                for env in (env_of(out), env_of(out2)):
                    for key, value in want.items():
                        assert env.get(key) == value, (host, path, key)
            tf = json.loads(env_of(out)["TF_CONFIG"])
            assert tf == {
                "cluster": {"worker": ["main1:29500", "sub1:29501", "sub2:29502"]},
                "task": {"type": "worker", "index": hosts.index(host)},
            }
        # every kernel reaches every other by ssh, host keys pinned, nothing on stderr
        for src in hosts:
            for dst in hosts:
                code, out = sh(c, name, f"ssh {dst} hostname 2>/tmp/e; cat /tmp/e", kernel=src)
                assert (code, out) == (0, f"{dst}\n"), (src, dst, out)
        code, out = sh(c, name, "ssh -G sub1 | grep -i stricthostkeychecking")
        assert out.strip() == "stricthostkeychecking true"
        code, out = sh(c, name, "cat /home/config/hostfile; id -un; echo $HOME")
        assert out == "main1 slots=1\nsub1 slots=1\nsub2 slots=1\nwork\n/home/work\n"
        # one interface on the session network, addressed from its subnet
        detail = c.get_session(name)
        assert all(k.ip and k.container_id for k in detail.kernels)
        code, out = sh(c, name, "ls /sys/class/net | grep -v '^lo$' | wc -l")
        assert out.strip() == "1"
        # the kernels' files came as an archive bind-mounted from the agent's tmpfs, with their
        # readiness FIFOs; they stay while the kernel lives, so that the engine's own copy
        # (docker cp) still works
        archives = sorted(p.name for p in FILES_DIR.glob(f"troupe-{info.id[:12]}*"))
        assert archives == sorted(
            f"troupe-{info.id[:12]}-{h}.{ext}" for h in hosts for ext in ("tar", "events")
        )
        code, out = sh(c, name, "test -p /run/troupe/events && test -e /run/troupe/agent-signals")
        assert code == 0, out
        main1 = next(k.container_id for k in detail.kernels if k.hostname == "main1")
        # made by this server's own agent, which watches only the kernels it made
        inspect = "{{json .Config.Labels}}"
        labels = [
            json.loads(docker("inspect", "-f", inspect, k.container_id or "").stdout)
            for k in detail.kernels
        ]
        agents = {str(label.get(LABEL_AGENT)) for label in labels}
        assert len(agents) == 1 and len(next(iter(agents))) == 16, agents
        with tempfile.TemporaryDirectory() as tmp:
            docker("cp", f"{main1}:/etc/hostname", f"{tmp}/hostname")
            assert Path(tmp, "hostname").read_text() == "main1\n"
    finally:
        c.destroy_session(name)
    assert labelled("container", info.id) == [] and labelled("network", info.id) == []
    assert not list(FILES_DIR.glob(f"troupe-{info.id[:12]}*")), list(FILES_DIR.iterdir())


def test_session_keys_do_not_open_other_sessions(server: Server) -> None:
    c = server.client()
    a, b = unique("iso-a"), unique("iso-b")
    start(c, a, size=2)
    info_b = start(c, b, size=2)
    try:
        ip_b = next(k.ip for k in info_b.kernels if k.hostname == "sub1")
        code, out = sh(c, a, f"ping -c1 -W1 {ip_b}")
        assert code != 0, out
        code, out = sh(c, a, f"timeout 3 bash -c 'exec 3<>/dev/tcp/{ip_b}/2200'")
        assert code != 0, out
        # names resolve only inside the own session: main1 of a is not b's
        code, out = sh(c, a, "getent hosts main1 | cut -d' ' -f1")
        assert out.strip() != ip_b and out.strip()
    finally:
        c.destroy_session(a)
        c.destroy_session(b)


def test_folder_shared_between_kernels_and_outlives_session(server: Server) -> None:
    c = server.client()
    folder, name = unique("data"), unique("fold")
    c.create_folder(folder)
    start(c, name, size=2, mounts=[Mount(folder=folder)])
    try:
        code, out = sh(c, name, f"echo from-sub1 > /home/work/{folder}/f.txt", kernel="sub1")
        assert code == 0, out
        code, out = sh(
            c, name, f"cat /home/work/{folder}/f.txt; stat -c %u /home/work/{folder}/f.txt"
        )
        assert out == "from-sub1\n1000\n"
    finally:
        c.destroy_session(name)
    name2 = unique("fold2")
    start(c, name2, size=1, mounts=[Mount(folder=folder, readonly=True)])
    try:
        assert sh(c, name2, f"cat /home/work/{folder}/f.txt")[1] == "from-sub1\n"
        code, _ = sh(c, name2, f"touch /home/work/{folder}/g")
        assert code != 0  # read-only mount
        with pytest.raises(TroupeError) as e:
            c.delete_folder(folder)
        assert e.value.status == 409
    finally:
        c.destroy_session(name2)
    c.delete_folder(folder)


def test_other_user_sees_nothing(server: Server) -> None:
    c = server.client()
    name = unique("priv")
    start(c, name, size=1)
    bob_key = c.create_user(unique("bob")).api_key
    assert bob_key
    bob = server.client(bob_key)
    try:
        assert name not in [s.name for s in bob.list_sessions(all=True)]
        for call in (
            lambda: bob.get_session(name),
            lambda: bob.exec(name, ["true"]),
            lambda: list(bob.logs(name)),
            lambda: bob.destroy_session(name),
        ):
            with pytest.raises(TroupeError) as e:
                call()
            assert e.value.status == 404
        with pytest.raises(TroupeError) as e:
            bob.create_user("mallory")
        assert e.value.status == 403
        assert c.get_session(name).status == "RUNNING"
    finally:
        c.destroy_session(name)
    with pytest.raises(TroupeError) as e:
        server.client("trp_not-a-key").list_sessions()
    assert e.value.status == 401


def test_batch_exit_code_and_logs_after_destroy(server: Server) -> None:
    c = server.client()
    name = unique("batch")
    info = start(
        c,
        name,
        size=2,
        type="batch",
        startup_command="echo out-$BACKENDAI_CLUSTER_HOST; ssh sub1 hostname; exit 7",
    )
    assert info.status == "TERMINATED"
    assert info.exit_code == 7
    logs = list(c.logs(name))
    assert "[main1] out-main1" in logs and "[main1] sub1" in logs, logs
    assert list(c.logs(name, container="main1")) == ["out-main1", "sub1"]
    assert labelled("container", info.id) == []


def test_killed_kernel_fails_session_with_its_name(server: Server) -> None:
    c = server.client()
    name = unique("kill")
    info = start(c, name, size=3)
    sh(c, name, "echo about-to-die", kernel="sub2")
    sub2 = next(k for k in info.kernels if k.hostname == "sub2")
    assert sub2.container_id
    docker("exec", sub2.container_id, "sh", "-c", "echo last words")
    docker("kill", sub2.container_id)
    final = c.wait_session(name, until="final", timeout=60)
    assert final.status == "ERROR"
    assert final.status_info["kernel"] == "sub2"
    assert final.status_info["exit_code"] == 137
    assert labelled("container", info.id) == [] and labelled("network", info.id) == []
    assert isinstance(list(c.logs(name, container="sub2")), list)


def test_failed_creation_leaves_nothing(server: Server) -> None:
    """An image whose /opt is a file cannot start (the runner cannot be mounted there): the
    session fails, nothing is left. (An image without /bin/sh starts: the runtime's shell.)"""
    image = "troupe-test/opt-is-a-file:1"
    import subprocess

    subprocess.run(
        f"cd $(mktemp -d) && : > opt && tar cf - opt | /usr/bin/docker import - {image}",
        shell=True,
        check=True,
        capture_output=True,
    )
    try:
        c = server.client()
        name = unique("broken")
        c.create_session(SessionCreate(name=name, image=image, cluster_size=3, resources=SMALL))
        info = c.wait_session(name, until="final", timeout=60)
        assert info.status == "ERROR"
        assert info.status_info["kernel"] in ("main1", "sub1", "sub2")
        reason = info.status_info["reason"]
        assert "creating kernels" in reason or "being prepared" in reason, info.status_info
        assert "opt" in info.status_info.get("message", ""), info.status_info
        assert labelled("container", info.id) == [] and labelled("network", info.id) == []
        # the resources are free again
        agent = c.list_agents()[0]
        assert agent.cpu_free == agent.cpu
    finally:  # the test's own image goes with it
        docker("image", "rm", "-f", image, check=False)


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"cluster_size": 0}, 422, "cluster_size"),
        ({"cluster_size": 65}, 422, "cluster_size"),
        ({"image": "no/such:image"}, 422, "image"),
        ({"mounts": [{"folder": "nosuchfolder"}]}, 422, "mounts"),
        ({"environ": {"1BAD": "x"}}, 422, "environ"),
        ({"environ": {"BACKENDAI_CLUSTER_SIZE": "9"}}, 422, "environ"),
        ({"resources": {"cpu": 64}}, 422, "resources"),
        ({"resources": {"mem": "1t"}}, 422, "resources"),
        ({"resources": {"mem": "lots"}}, 422, "resources.mem"),
        ({"cluster_mode": "galaxy"}, 422, "cluster_mode"),
        ({"type": "batch"}, 422, "startup_command"),
        ({"name": "bad name!"}, 422, "name"),
    ],
)
def test_bad_input_is_rejected_and_creates_nothing(
    server: Server, body: dict[str, object], status: int, field: str
) -> None:
    import httpx

    before = docker("ps", "-aq", "--filter", "label=troupe.session").stdout
    c = server.client()
    n_sessions = len(c.list_sessions(all=True))
    payload = {
        "name": unique("bad"),
        "image": BASE_IMAGE,
        "cluster_size": 2,
        "resources": {"cpu": 0.25, "mem": "256m"},
        **body,
    }
    r = httpx.post(
        f"{server.url}/v1/sessions", json=payload, headers={"Authorization": f"Bearer {server.key}"}
    )
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == field, err
    assert field.split(".")[0] in err["message"] and "Traceback" not in r.text
    assert len(c.list_sessions(all=True)) == n_sessions
    assert docker("ps", "-aq", "--filter", "label=troupe.session").stdout == before


def test_duplicate_name_conflicts(server: Server) -> None:
    c = server.client()
    name = unique("dup")
    start(c, name, size=1)
    try:
        with pytest.raises(TroupeError) as e:
            c.create_session(SessionCreate(name=name, image=BASE_IMAGE, resources=SMALL))
        assert (e.value.status, e.value.field) == (409, "name")
    finally:
        c.destroy_session(name)
    # the name is free again once the session is over
    start(c, name, size=1)
    c.destroy_session(name)


def test_torchrun_allreduce_across_three_kernels(server: Server) -> None:
    """The README's main job: gloo all-reduce with torchrun, using only injected variables."""
    from pathlib import Path

    c = server.client()
    name = unique("torch")
    start(c, name, size=3, image=TORCH_IMAGE, resources=Resources(cpu=0.5, mem=1024**3))
    try:
        launch = (Path(__file__).parents[2] / "examples/torch-allreduce/launch.sh").read_text()
        code, out = c.exec(name, ["sh", "-c", launch])
        assert code == 0, out
        assert out.count("all_reduce sum=6.0 expected=6.0 OK") == 3, out
    finally:
        c.destroy_session(name)


def test_shell_quoting_in_exec(server: Server) -> None:
    c = server.client()
    name = unique("quote")
    start(c, name, size=1)
    try:
        arg = 'it\'s "quoted" $HOME'
        code, out = c.exec(name, ["printf", "%s", arg])
        assert (code, out) == (0, arg)
        code, out = c.exec(name, ["sh", "-c", f"printf %s {shlex.quote(arg)}"])
        assert out == arg
    finally:
        c.destroy_session(name)
