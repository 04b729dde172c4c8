"""The launch dialog's session files (``/ui/spec/load``, ``/ui/spec/download``): the CLI's
reader and writer behind the pages' sign-in (docs/webui.md)."""

from __future__ import annotations

import yaml

from tests.inprocess.conftest import IMAGE, Harness
from tests.inprocess.helpers import ORIGIN, error_of, signed_in, web_client
from troupe.api.models import SessionCreate


async def test_load_gives_the_request_the_file_sets(manager: Harness) -> None:
    c = await signed_in(manager)
    c.headers["Origin"] = ORIGIN
    try:
        text = f"image: {IMAGE}\nresources: {{mem: 1g}}\nroles: [{{name: w, replicas: 2}}]\n"
        r = await c.post("/ui/spec/load", content=text)
        assert r.status_code == 200, r.text
        # the values it sets, checked and normalised; no name given, none made up
        assert r.json() == {
            "image": IMAGE,
            "resources": {"mem": 2**30},
            "roles": [{"name": "w", "replicas": 2}],
            "cluster_size": 3,  # the roles' total
        }
        for bad, words in (
            ("- a\n", "file: a session file is a mapping"),
            ("a: [\n", "file: line 2: not valid YAML"),
            (f"image: {IMAGE}\ncolour: red\n", "colour: Extra inputs are not permitted"),
            (f"image: {IMAGE}\nroles: [{{name: main, replicas: 3}}]\n", "roles[0].replicas"),
        ):
            r = await c.post("/ui/spec/load", content=bad)
            assert r.status_code == 422 and error_of(r)["message"].startswith(words), r.text
    finally:
        await c.aclose()


async def test_download_writes_the_file_create_takes(manager: Harness) -> None:
    body = {"name": "w", "image": IMAGE, "roles": [{"name": "ps"}], "priority": 2}
    c = await signed_in(manager)
    c.headers["Origin"] = ORIGIN
    try:
        r = await c.post("/ui/spec/download", json=body)
        assert r.status_code == 200, r.text
        assert r.text.startswith("# yaml-language-server: $schema=http://troupe.test/v1/schemas/")
        assert SessionCreate.model_validate(yaml.safe_load(r.text)) == SessionCreate(**body)
        r = await c.post("/ui/spec/download", json={**body, "roles": [{"name": "W"}]})
        assert r.status_code == 422 and error_of(r)["field"] == "roles[0].name"
    finally:
        await c.aclose()


async def test_spec_pages_need_sign_in(manager: Harness) -> None:
    async with web_client(manager) as c:
        assert (await c.post("/ui/spec/load", content="a: 1")).status_code == 401
