"""Registries and pulls through the manager: the API (admins, secrets never returned), the
pull of a missing image before the kernels start (shared, with progress, under its own limit),
clear failures with nothing left, ``image pull`` / ``image list``, allowed registries."""

from __future__ import annotations

import asyncio
import json
import stat

from tests.inprocess.asgi import AsgiHttp
from tests.inprocess.conftest import Harness, MakeManager
from tests.inprocess.helpers import error_of
from troupe.api.errors import AgentFailed
from troupe.manager.web import signin

REG = "registry.test:5000"
PRIVATE = f"{REG}/team/cuda:12"
PASSWORD = "s3cret-pa55"


async def _add(h: Harness, **body: object) -> dict[str, object]:
    r = await h.client.post(
        "/registries", json={"host": REG, "username": "bob", "password": PASSWORD, **body}
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_registry_api_keeps_secrets_in_a_private_file(manager: Harness) -> None:
    added = await _add(manager, ca_pem="-----BEGIN CERTIFICATE-----\nx\n")
    assert added == {"host": REG, "username": "bob", "has_password": True, "has_ca": True}
    listed = (await manager.client.get("/registries")).json()
    assert listed == [added]
    assert PASSWORD not in json.dumps(listed)
    path = manager.config.registries_file
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())[REG]["password"] == PASSWORD
    # again: 409; remove, then gone
    r = await manager.client.post("/registries", json={"host": REG})
    assert r.status_code == 409 and error_of(r)["field"] == "host"
    assert (await manager.client.delete(f"/registries/{REG}")).status_code == 204
    assert (await manager.client.get("/registries")).json() == []
    assert (await manager.client.delete(f"/registries/{REG}")).status_code == 404


async def test_registry_bad_input_is_refused_naming_the_field(manager: Harness) -> None:
    for host in ("https://reg.test", "reg.test/path", "reg.test:0", "reg.test:99999", "a b", ""):
        r = await manager.client.post("/registries", json={"host": host})
        assert r.status_code == 422, (host, r.text)
        assert error_of(r)["field"] == "host", host
    r = await manager.client.post("/registries", json={"host": REG, "username": "bob"})
    assert r.status_code == 422 and error_of(r)["field"] == "password"
    r = await manager.client.post("/registries", json={"host": REG, "ca_pem": "junk"})
    assert r.status_code == 422 and error_of(r)["field"] == "ca_pem"


async def test_registries_are_for_admins_only(manager: Harness) -> None:
    r = await manager.client.post("/users", json={"name": "carol"})
    carol = manager.user_client(r.json()["api_key"])
    for method, path in (
        ("GET", "/registries"),
        ("POST", "/registries"),
        ("DELETE", "/registries/x"),
    ):
        r = await carol.request(method, path, json={"host": REG})
        assert r.status_code == 403, (method, path)
    r = await carol.post("/images/pull", json={"image": PRIVATE})
    assert r.status_code == 403
    await carol.aclose()


async def test_missing_image_is_pulled_once_with_progress_and_credentials(
    manager: Harness,
) -> None:
    await _add(manager)
    agent = manager.local
    agent.pullable[PRIVATE] = 4000
    agent.pull_gate = asyncio.Event()
    a = await manager.create("a", image=PRIVATE, cluster_size=3)
    b = await manager.create("b", image=PRIVATE)
    # both wait on the one pull; its progress shows on each session, per agent
    for ref in ("a", "b"):
        s = await _pulling(manager, ref)
        assert s["status"] == "PREPARING"
        assert s["status_info"]["pulling"] == [
            {"agent": "local", "image": PRIVATE, "done_bytes": 2000, "total_bytes": 4000}
        ]
    agent.pull_gate.set()
    for ref in ("a", "b"):
        s = await manager.wait(ref)
        assert s["status"] == "RUNNING", s
        assert "pulling" not in s["status_info"]
        assert "pulled" in s["phases"] and s["phases"]["pulled"] <= s["phases"]["network"]
    assert len(agent.pulls) == 1  # one pull for both sessions and all 4 kernels
    auth = agent.pulls[0].auth
    assert auth is not None and (auth.username, auth.password) == ("bob", PASSWORD)
    assert a["id"] != b["id"]
    # the next session of it: no pull at all
    await manager.create("c", image=PRIVATE)
    assert (await manager.wait("c"))["status"] == "RUNNING"
    assert len(agent.pulls) == 1


async def _pulling(h: Harness, ref: str) -> dict[str, object]:
    for _ in range(500):
        s = await h.get(ref)
        if s["status_info"].get("pulling", [{}])[0].get("done_bytes"):
            return s
        await asyncio.sleep(0.01)
    raise AssertionError(f"no pull progress on {ref}: {s}")


async def test_pull_does_not_count_in_the_create_timeout(make_manager: MakeManager) -> None:
    h = await make_manager(create_timeout=0.5)
    await _add(h)
    h.local.pullable[PRIVATE] = 10
    h.local.pull_gate = asyncio.Event()
    await h.create("a", image=PRIVATE)
    await _pulling(h, "a")
    await asyncio.sleep(1.0)  # past the create time-out, still pulling
    assert (await h.get("a"))["status"] == "PREPARING"
    h.local.pull_gate.set()
    assert (await h.wait("a"))["status"] == "RUNNING"


async def test_pull_has_its_own_limit(make_manager: MakeManager) -> None:
    h = await make_manager(pull_timeout=0.3)
    await _add(h)
    h.local.pullable[PRIVATE] = 10
    h.local.pull_gate = asyncio.Event()
    await h.create("a", image=PRIVATE)
    s = await h.wait("a", until="final")
    assert s["status"] == "ERROR", s
    assert "not done after 0.3 s" in s["status_info"]["message"]
    assert PRIVATE in s["status_info"]["message"] and "local" in s["status_info"]["message"]


async def test_failed_pull_names_image_registry_agent_and_leaves_nothing(
    manager: Harness,
) -> None:
    await _add(manager)
    manager.local.failures["pull_image"] = AgentFailed(
        f"pulling {PRIVATE} from {REG} on agent local: unauthorised: the registry refused",
        field="image",
    )
    await manager.create("a", image=PRIVATE, cluster_size=2)
    s = await manager.wait("a", until="final")
    assert s["status"] == "ERROR"
    assert s["status_info"]["reason"] == "failed while pulling images"
    msg = s["status_info"]["message"]
    assert PRIVATE in msg and REG in msg and "agent local" in msg and "unauthorised" in msg
    assert manager.local.containers == {} and manager.local.networks == {}
    assert all(k["status"] != "RUNNING" for k in s["kernels"])


async def test_unknown_image_of_a_configured_registry_fails_at_pull(manager: Harness) -> None:
    await _add(manager)
    await manager.create("a", image=f"{REG}/nope:1")
    s = await manager.wait("a", until="final")
    assert s["status"] == "ERROR" and "unknown image" in s["status_info"]["message"]
    assert manager.local.containers == {}


async def test_image_of_no_configured_registry_is_refused_at_create(manager: Harness) -> None:
    r = await manager.client.post("/sessions", json={"name": "a", "image": "other.test/x:1"})
    assert r.status_code == 422
    err = error_of(r)
    assert err["field"] == "image" and "registry 'other.test' is not configured" in err["message"]


async def test_malformed_and_bad_digest_references_are_refused(manager: Harness) -> None:
    for image in (f"{REG}/x@sha256:abc", "UPPER/case", f"{REG}/x@md5:00"):
        r = await manager.client.post("/sessions", json={"name": "a", "image": image})
        assert r.status_code == 422, image
        assert error_of(r)["field"] == "image", image


async def test_allowed_registries_refuse_others_at_create(make_manager: MakeManager) -> None:
    h = await make_manager(allowed_registries=[REG])
    h.local.image_names.add("elsewhere.test/x:1")
    r = await h.client.post("/sessions", json={"name": "a", "image": "elsewhere.test/x:1"})
    assert r.status_code == 422
    err = error_of(r)
    assert err["field"] == "image" and "not allowed" in err["message"] and REG in err["message"]
    # the troupe images (Docker Hub names) too, unless allowed
    r = await h.client.post("/sessions", json={"name": "a", "image": "troupe/base:0.1.0"})
    assert r.status_code == 422 and "'docker.io'" in error_of(r)["message"]
    # an allowed registry's image is pulled even when the registry has no credentials
    h.local.pullable[PRIVATE] = 10
    await h.create("b", image=PRIVATE)
    assert (await h.wait("b"))["status"] == "RUNNING"
    assert h.local.pulls[0].auth is None


async def test_image_pull_and_list(manager: Harness) -> None:
    await _add(manager)
    manager.local.pullable[PRIVATE] = 10
    r = await manager.client.post("/images/pull", json={"image": PRIVATE})
    assert r.status_code == 200, r.text
    assert r.json() == [{"agent": "local", "image": PRIVATE, "pulled": True}]
    r = await manager.client.post("/images/pull", json={"image": PRIVATE, "agent": "local"})
    assert r.json() == [{"agent": "local", "image": PRIVATE, "pulled": False}]
    r = await manager.client.post("/images/pull", json={"image": PRIVATE, "agent": "nope"})
    assert r.status_code == 404
    images = {i["name"]: i for i in (await manager.client.get("/images")).json()}
    assert images[PRIVATE]["agents"] == ["local"]
    r = await manager.client.post("/images/pull", json={"image": f"{REG}/nope:1"})
    assert r.status_code == 502 or r.status_code >= 400
    assert "unknown image" in error_of(r)["message"]


async def test_pull_progress_shows_on_the_web_page(manager: Harness) -> None:
    from tests.inprocess.helpers import signed_in

    await _add(manager)
    manager.local.pullable[PRIVATE] = 4 * 1024**2
    manager.local.pull_gate = asyncio.Event()
    s = await manager.create("a", image=PRIVATE)
    await _pulling(manager, "a")
    web = await signed_in(manager)
    page = (await web.get(f"/sessions/{s['id']}")).text
    assert "Pulling images" in page and "2 MiB of 4 MiB" in page, page
    # the page's live part is sent again while the pull runs (no status change meanwhile)
    stream = AsgiHttp(
        manager, "GET", "/ui/events", query=f"session={s['id']}", accept="text/event-stream"
    )
    stream.scope["headers"].append(
        (b"cookie", f"{signin.COOKIE}={web.cookies[signin.COOKIE]}".encode())
    )
    stream.start()
    for _ in range(300):
        if stream.body().count(b"Pulling images") >= 2:
            break
        await asyncio.sleep(0.02)
    stream.leave()
    assert stream.body().count(b"Pulling images") >= 2, stream.body()[-500:]
    manager.local.pull_gate.set()
    assert (await manager.wait("a"))["status"] == "RUNNING"
    await web.aclose()
