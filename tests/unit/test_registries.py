"""Registry hosts, image references, pull progress and failure words, the password file rule,
and the secrets file's mode."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import typer

from troupe.agent.pulls import Tally, failure, install_ca
from troupe.api.errors import Conflict, Invalid
from troupe.api.registries import RegistryAdd, allowed, parse_host, registry_of, split_image
from troupe.client.cli.registries import read_password
from troupe.manager.registries import RegistryBook

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "host"),
    [
        ("registry.example.com", "registry.example.com"),
        ("Registry.Example.com:5000", "registry.example.com:5000"),
        ("127.0.0.1:5000", "127.0.0.1:5000"),
        ("localhost:443", "localhost:443"),
        ("[::1]:5000", "[::1]:5000"),
    ],
)
def test_good_hosts(text: str, host: str) -> None:
    assert parse_host(text) == host


@pytest.mark.parametrize(
    "text",
    [
        "",
        "https://reg.example.com",
        "reg.example.com/path",
        "reg.example.com:",
        "reg.example.com:0",
        "reg.example.com:65536",
        "reg.example.com:port",
        "-bad.example.com",
        "a b",
        "[::1",
        "[nothost]:5",
        "reg_example.com",
    ],
)
def test_malformed_hosts_name_the_field(text: str) -> None:
    with pytest.raises(Invalid) as e:
        parse_host(text)
    assert e.value.field == "host" and "HOST[:PORT]" in e.value.message


@pytest.mark.parametrize(
    ("image", "parts"),
    [
        ("troupe/base:0.1.0", ("docker.io", "troupe/base", "0.1.0", "")),
        ("ubuntu", ("docker.io", "ubuntu", "", "")),
        ("reg.test:5000/team/cuda:12", ("reg.test:5000", "team/cuda", "12", "")),
        ("localhost/x", ("localhost", "x", "", "")),
        (f"nvcr.io/nvidia/pytorch@{DIGEST}", ("nvcr.io", "nvidia/pytorch", "", DIGEST)),
        (f"reg.test/a:1@{DIGEST}", ("reg.test", "a", "1", DIGEST)),
    ],
)
def test_image_references(image: str, parts: tuple[str, str, str, str]) -> None:
    assert split_image(image) == parts
    assert registry_of(image) == parts[0]


@pytest.mark.parametrize(
    "image",
    ["", "UPPER/case", "reg.test/x@sha256:abc", "reg.test/x@md5:" + "0" * 32, "a//b", "x:"],
)
def test_bad_references_name_image(image: str) -> None:
    with pytest.raises(Invalid) as e:
        split_image(image)
    assert e.value.field == "image"


def test_allowed_registries() -> None:
    assert allowed("anything/x", [])
    assert allowed("reg.test:5000/x", ["reg.test:5000"])
    assert not allowed("reg.test:5001/x", ["reg.test:5000"])
    assert not allowed("troupe/base", ["reg.test:5000"])
    assert allowed("troupe/base", ["docker.io"])


def test_tally_sums_layers() -> None:
    t = Tally("a1", "img")
    t.add({"status": "Pulling fs layer", "id": "l1"})
    t.add({"status": "Downloading", "id": "l1", "progressDetail": {"current": 10, "total": 100}})
    p = t.add({"status": "Downloading", "id": "l2", "progressDetail": {"current": 5, "total": 50}})
    assert (p.done_bytes, p.total_bytes) == (15, 150)
    p = t.add({"status": "Download complete", "id": "l1"})
    assert (p.done_bytes, p.total_bytes) == (105, 150)
    p = t.add({"status": "Extracting", "id": "l2", "progressDetail": {"current": 1, "total": 9}})
    assert (p.done_bytes, p.total_bytes) == (105, 150)  # extraction is not download
    p = t.add({"status": "Digest: sha256:..."})
    assert p.total_bytes == 150 and not p.done


@pytest.mark.parametrize(
    ("message", "case"),
    [
        ("unauthorized: authentication required", "unauthorised"),
        ("Head https://r/v2/x/manifests/1: no basic auth credentials", "unauthorised"),
        ("manifest for r/x:1 not found: manifest unknown", "unknown image"),
        ('Get "https://r/v2/": dial tcp 127.0.0.1:1: connect: connection refused', "unreachable"),
        ("x509: certificate signed by unknown authority", "unreachable"),
        ("write /var/lib/docker/tmp/x: no space left on device", "disk full"),
        ("no matching manifest for linux/amd64 in the manifest list entries", "architecture"),
        ("something else", "pull failed"),
    ],
)
def test_failures_say_the_case_and_name_everything(message: str, case: str) -> None:
    e = failure("agent7", "reg.test:5000/team/x:1", message)
    assert case in e.message
    assert "reg.test:5000/team/x:1" in e.message and "from reg.test:5000" in e.message
    assert "on agent agent7" in e.message and e.field == "image"


def test_digest_that_does_not_match() -> None:
    e = failure("a", f"reg.test/x@{DIGEST}", "manifest for reg.test/x@... not found")
    assert "the digest does not match" in e.message


def test_install_ca_writes_where_the_engine_looks(tmp_path: Path) -> None:
    install_ca(tmp_path, "reg.test:5000", "PEM")
    assert (tmp_path / "reg.test:5000" / "ca.crt").read_text() == "PEM"
    install_ca(tmp_path, "reg.test:5000", "PEM2")
    assert (tmp_path / "reg.test:5000" / "ca.crt").read_text() == "PEM2"


def test_password_file_must_be_private(tmp_path: Path) -> None:
    f = tmp_path / "pw"
    f.write_text("secret\nignored\n")
    f.chmod(0o600)
    assert read_password(f) == "secret"
    f.chmod(0o640)
    with pytest.raises(typer.Exit):
        read_password(f)
    f.chmod(0o400)
    assert read_password(f) == "secret"
    with pytest.raises(typer.Exit):
        read_password(tmp_path / "missing")


def test_book_file_is_0600_and_holds_no_secret_in_its_answers(tmp_path: Path) -> None:
    book = RegistryBook(tmp_path / "d" / "registries.json")
    info = book.add(RegistryAdd(host="Reg.Test:5000", username="u", password="p", ca_pem="C"))
    assert info.model_dump() == {
        "host": "reg.test:5000",
        "username": "u",
        "has_password": True,
        "has_ca": True,
    }
    assert stat.S_IMODE(book.path.stat().st_mode) == 0o600
    auth, ca = book.auth("reg.test:5000")
    assert auth is not None and (auth.username, auth.password, ca) == ("u", "p", "C")
    assert book.auth("other") == (None, None)
    with pytest.raises(Conflict):
        book.add(RegistryAdd(host="reg.test:5000"))
    book.remove("REG.test:5000")
    assert book.infos() == [] and book.hosts() == []
