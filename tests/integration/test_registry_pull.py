"""Pulls from a real registry (Debian's docker-registry, TLS + htpasswd, on loopback): a
session of an image that lives only there starts after a pull whose progress was reported;
two sessions of it pull once; a wrong password fails clearly and leaves nothing.

The engine trusts the test CA through ``/etc/docker/certs.d/HOST:PORT/ca.crt``, which
``troupe registry add --ca-file`` installs through the agent (and the test removes).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Server, docker
from tests.registry_fixture import CERTS_D, PASSWORD, USER, LocalRegistry, start_registry

pytestmark = pytest.mark.docker
#: The layer the test image adds to troupe/base, and how fast the registry sends (its
#: throttle): a pull of it takes about 4 s on any machine, a progress report every 0.5 s
#: (on a fast machine, an unthrottled pull was over before the first report with bytes).
LAYER = 64 * 1024**2
RATE = 16 * 1024**2


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, server: Server) -> Iterator[LocalRegistry]:
    reg = start_registry(tmp_path_factory.mktemp("registry"), rate=RATE)
    try:
        yield reg
    finally:
        server.cli("registry", "remove", reg.host)
        reg.close()


def _add(server: Server, reg: LocalRegistry, tmp: Path, password: str) -> None:
    pw = tmp / "password"
    pw.write_text(password + "\n")
    pw.chmod(0o600)
    server.cli("registry", "remove", reg.host)
    r = server.cli(
        *("registry", "add", reg.host, "--username", USER),
        *("--password-file", str(pw), "--ca-file", str(reg.ca)),
    )
    assert r.returncode == 0, r.stderr


def _pull_count(server: Server, image: str) -> int:
    return server.log_path.read_text().count(f"pulling {image} on agent local")


class Watch:
    """Reads the session now and then while it starts: the pull progress it showed."""

    def __init__(self, server: Server, name: str) -> None:
        self.seen: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._server, self._name = server, name
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self._server.client() as c:
            while not self._stop.is_set():
                try:
                    s = c.get_session(self._name)
                except Exception:
                    time.sleep(0.05)
                    continue
                self.seen.extend(s.status_info.get("pulling") or [])
                time.sleep(0.05)

    def stop(self) -> list[dict[str, int]]:
        self._stop.set()
        self._thread.join(10)
        return self.seen


def test_session_of_a_registry_image_starts_after_a_pull(
    server: Server, registry: LocalRegistry, tmp_path: Path
) -> None:
    image = registry.push("pulled", LAYER)
    assert docker("image", "inspect", image, check=False).returncode != 0
    # not configured: refused at create time, naming the image
    r = server.cli("session", "create", "reg0", "-i", image)
    assert r.returncode != 0 and "not configured" in r.stderr, r.stderr
    # the password file must be private
    pw = tmp_path / "loose"
    pw.write_text(PASSWORD)
    pw.chmod(0o644)
    r = server.cli("registry", "add", registry.host, "--username", USER, "--password-file", str(pw))
    assert r.returncode != 0 and "chmod 600" in r.stderr, r.stderr
    _add(server, registry, tmp_path, PASSWORD)
    listed = server.cli("registry", "list", "--json").stdout
    assert PASSWORD not in listed and json.loads(listed)[0]["has_password"] is True
    assert PASSWORD not in server.log_path.read_text()

    try:
        _starts_after_a_pull(server, registry, image)  # (it ends by destroying the session)
    except BaseException:  # (the server is the whole run's: a session left would hold room)
        server.cli("session", "destroy", "reg1")
        raise


def _starts_after_a_pull(server: Server, registry: LocalRegistry, image: str) -> None:
    watch = Watch(server, "reg1")
    r = server.cli(
        "session",
        "create",
        "reg1",
        "-i",
        image,
        "--cluster-size",
        "3",
        "--cpu",
        "0.25",
        "--mem",
        "256m",
        "--wait",
    )
    seen = watch.stop()
    assert r.returncode == 0, r.stderr
    s = json.loads(server.cli("session", "info", "reg1", "--json").stdout)
    assert s["status"] == "RUNNING"
    assert "pulled" in s["phases"]
    assert any(p["total_bytes"] >= LAYER for p in seen), seen
    assert any(p["done_bytes"] > 0 for p in seen), seen
    assert _pull_count(server, image) == 1
    # the agent installed the CA where the engine trusts it
    assert (CERTS_D / registry.host / "ca.crt").read_text() == registry.ca.read_text()
    r = server.cli("session", "exec", "reg1", "--", "sh", "-c", "ssh sub2 stat -c %s /opt/blob")
    assert r.stdout.strip() == str(LAYER), r.stderr
    listed_images = json.loads(server.cli("image", "list", "--json").stdout)
    assert [i["agents"] for i in listed_images if i["name"] == image] == [["local"]]
    assert server.cli("session", "destroy", "reg1").returncode == 0


def test_two_sessions_of_a_missing_image_pull_it_once(
    server: Server, registry: LocalRegistry, tmp_path: Path
) -> None:
    image = registry.push("twice", 8 * 1024**2)
    _add(server, registry, tmp_path, PASSWORD)
    with server.client() as c:
        from troupe.api.models import SessionCreate

        for name in ("twice1", "twice2"):
            c.create_session(
                SessionCreate.model_validate(
                    {
                        "name": name,
                        "image": image,
                        "cluster_size": 2,
                        "resources": {"cpu": 0.25, "mem": "256m"},
                    }
                )
            )
        for name in ("twice1", "twice2"):
            assert c.wait_session(name, until="running", timeout=120).status == "RUNNING"
            c.destroy_session(name)
    assert _pull_count(server, image) == 1


def test_wrong_password_fails_clearly_and_leaves_nothing(
    server: Server, registry: LocalRegistry, tmp_path: Path
) -> None:
    image = registry.push("locked", 1024)
    _add(server, registry, tmp_path, "not-the-password")
    try:
        r = server.cli(
            "session",
            "create",
            "reg-bad",
            "-i",
            image,
            "--cluster-size",
            "2",
            "--cpu",
            "0.25",
            "--mem",
            "256m",
            "--wait",
        )
        assert r.returncode != 0
        for word in ("unauthorised", image, registry.host, "agent local"):
            assert word in r.stderr, (word, r.stderr)
        s = json.loads(server.cli("session", "info", "reg-bad", "--json").stdout)
        assert s["status"] == "ERROR"
        sid = s["id"]
        assert not docker("ps", "-aq", "--filter", f"label=troupe.session={sid}").stdout.strip()
        assert not docker(
            "network", "ls", "-q", "--filter", f"label=troupe.session={sid}"
        ).stdout.strip()
        assert docker("image", "inspect", image, check=False).returncode != 0
        # and ``image pull`` says the same
        r = server.cli("image", "pull", image, "--agent", "local")
        assert r.returncode != 0 and "unauthorised" in r.stderr, r.stderr
    finally:
        _add(server, registry, tmp_path, PASSWORD)
    r = server.cli("image", "pull", image, "--agent", "local")
    assert r.returncode == 0 and "local: " + image + " pulled" in r.stdout, r.stderr
