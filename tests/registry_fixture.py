"""A real image registry for the tests: Debian's ``docker-registry`` (the distribution
registry) on loopback, with TLS (a CA and a certificate made here with ``cryptography``) and
htpasswd auth (``htpasswd -B`` of apache2-utils). Never the system service: a process of its
own with its own config, storage and port, stopped and removed by :meth:`LocalRegistry.close`,
which also removes the engine's ``certs.d`` entry and every image pushed through it.

With a ``rate``, what the registry sends reaches its clients through :class:`Throttle`, at most
that many bytes a second: a pull then takes a known while on any machine (a test that watches
its progress sees some).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import DOCKER, docker, free_port

REGISTRY_BIN = "/usr/bin/docker-registry"
CERTS_D = Path("/etc/docker/certs.d")
USER, PASSWORD = "tester", "pa55-w0rd-for-tests"


def _ca_and_cert(tmp: Path, address: str) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for ``address`` / localhost it signed: (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "troupe test registry CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(address)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    paths = (tmp / "ca.crt", tmp / "registry.crt", tmp / "registry.key")
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(cert.public_bytes(pem))
    paths[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


class Throttle:
    """A TCP relay on ``address``:``port`` to ``target``: what the target answers passes at
    most ``rate`` bytes a second, what clients send passes at once (TLS goes through as is)."""

    def __init__(self, address: str, port: int, target: tuple[str, int], rate: int) -> None:
        self.target, self.rate = target, rate
        self.sock = socket.create_server((address, port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target)
        except OSError:  # (the registry not up yet: the client sees the connection end)
            client.close()
            return
        with client, upstream:
            up = threading.Thread(target=self._pump, args=(client, upstream, 0), daemon=True)
            up.start()
            self._pump(upstream, client, self.rate)
            up.join()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, rate: int) -> None:
        try:
            while data := src.recv(64 * 1024):
                dst.sendall(data)
                if rate:
                    time.sleep(len(data) / rate)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.sock.close()


@dataclass
class LocalRegistry:
    host: str
    dir: Path
    ca: Path
    proc: subprocess.Popen[bytes]
    #: images pushed or pulled by the tests, removed from the engine at the end
    images: set[str] = field(default_factory=set)
    #: the relay in front of it, with a ``rate``
    throttle: Throttle | None = None

    @property
    def docker_env(self) -> dict[str, str]:
        """The docker CLI with a config of its own (its login never touches root's)."""
        return {**os.environ, "DOCKER_CONFIG": str(self.dir / "docker-config")}

    def docker(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [DOCKER, *args],
            capture_output=True,
            text=True,
            check=check,
            env=self.docker_env,
            input=input,
        )

    def trust(self) -> None:
        """The engine trusts the CA (``certs.d``): needed to log in and push to a registry
        off loopback; :meth:`close` removes it."""
        (CERTS_D / self.host).mkdir(parents=True, exist_ok=True)
        shutil.copy(self.ca, CERTS_D / self.host / "ca.crt")

    def push(self, name: str, size: int) -> str:
        """Builds ``troupe-test/<name>`` on troupe/base with a layer of ``size`` random
        bytes, pushes it here and removes it from the engine; returns its reference."""
        ref = f"{self.host}/troupe-test/{name}:1"
        self.images.add(ref)
        ctx = self.dir / f"ctx-{name}"
        ctx.mkdir()
        (ctx / "blob").write_bytes(os.urandom(size))
        (ctx / "Dockerfile").write_text("FROM troupe/base:0.1.0\nCOPY blob /opt/blob\n")
        self.docker("build", "-q", "-t", ref, str(ctx))
        self.docker("push", "-q", ref)
        self.docker("image", "rm", ref)
        return ref

    def close(self) -> None:
        for ref in self.images:
            docker("image", "rm", "-f", ref, check=False)
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(CERTS_D / self.host, ignore_errors=True)
        if self.throttle is not None:
            self.throttle.close()


def start_registry(tmp: Path, address: str = "127.0.0.1", rate: int = 0) -> LocalRegistry:
    """The registry on ``address`` at a free port, logged in (with the docker CLI's own
    config), answering; with ``rate``, behind a :class:`Throttle` on that port (the registry
    itself on another). The engine's trust in its CA is left to ``registry add --ca-file``
    (the agent writes ``certs.d``; the engine takes any registry on loopback as "insecure"
    anyway: it tries TLS without checking the certificate, then plain HTTP)."""
    tmp.mkdir(parents=True, exist_ok=True)
    ca, cert, key = _ca_and_cert(tmp, address)
    line = subprocess.run(
        ["htpasswd", "-nbB", USER, PASSWORD], capture_output=True, text=True, check=True
    ).stdout.strip()
    (tmp / "htpasswd").write_text(line + "\n")
    port = free_port()
    host = f"{address}:{port}"
    listen_port = free_port() if rate else port  # (the throttle listens on ``port``)
    config = {  # (YAML, written as JSON: its subset)
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {
            "filesystem": {"rootdirectory": str(tmp / "storage")},
            "delete": {"enabled": True},
        },
        "http": {
            "addr": f"{address}:{listen_port}",
            "tls": {"certificate": str(cert), "key": str(key)},
        },
        "auth": {"htpasswd": {"realm": "troupe-test", "path": str(tmp / "htpasswd")}},
    }
    (tmp / "config.yml").write_text(json.dumps(config))
    log = open(tmp / "registry.log", "ab")  # noqa: SIM115 (the process holds it)
    proc = subprocess.Popen(
        [REGISTRY_BIN, "serve", str(tmp / "config.yml")],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    reg = LocalRegistry(host, tmp, ca, proc)
    try:
        if rate:
            reg.throttle = Throttle(address, port, (address, listen_port), rate)
        if not ipaddress.ip_address(address).is_loopback:
            reg.trust()  # (the engine checks the certificate of a registry off loopback)
        deadline = time.monotonic() + 30
        while True:
            r = reg.docker(
                "login", host, "-u", USER, "--password-stdin", check=False, input=PASSWORD
            )
            if r.returncode == 0:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"registry not up: {r.stderr}\n{(tmp / 'registry.log').read_text()}"
                )
            time.sleep(0.2)
    except BaseException:
        reg.close()
        raise
    return reg
