"""The launch dialog's roles and session files in a real browser (real manager, Docker): role
rows with live totals, "Download spec" of what is filled in (the file ``troupe session
create -f`` takes), "Load spec" filling the form (keeping what it does not show), a bad file
named, and a session launched with roles; axe-core on the dialog with rows."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml
from playwright.sync_api import Locator, expect

from tests.browser.conftest import Web
from tests.conftest import BASE_IMAGE

pytestmark = pytest.mark.docker
START = 120_000


def role_row(dialog: Locator, i: int) -> Locator:
    return dialog.locator(".role-row").nth(i)


def test_role_rows_totals_and_download(web: Web) -> None:
    page = web.page
    page.get_by_role("button", name="New session").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name", exact=True).fill("webroles")
    expect(dialog.locator(f'#f-image option[value="{BASE_IMAGE}"]')).to_have_count(1)
    dialog.locator("#f-cpu").fill("0.5")
    dialog.locator("#f-mem").fill("256m")
    dialog.get_by_role("button", name="Add role").click()
    row = role_row(dialog, 0)
    expect(row.get_by_label("Role")).to_be_focused()
    row.get_by_label("Role").fill("worker")
    row.get_by_label("Replicas").fill("2")
    row.get_by_label("CPU").fill("0.25")
    row.get_by_label("Memory").fill("128m")
    dialog.get_by_role("button", name="Add role").click()
    role_row(dialog, 1).get_by_label("Role").fill("ps")
    # main1 (0.5 CPU, 256m) + 2 x (0.25, 128m) + ps1 (0.5, 256m): live, and the size follows
    total = dialog.locator("#total")
    expect(total).to_have_text(
        "main \u00d7 1 + worker \u00d7 2 + ps \u00d7 1 = 4 kernels; 1.5 CPU; 768 MiB"
    )
    expect(dialog.get_by_label("Cluster size")).to_be_disabled()
    expect(dialog.get_by_label("Cluster size")).to_have_value("4")
    web.shot("roles-01-dialog-with-roles")
    web.audit("launch-dialog-roles")

    with page.expect_download() as got:
        dialog.get_by_role("button", name="Download spec").click()
    download = got.value
    assert download.suggested_filename == "webroles.yaml"
    text = Path(download.path()).read_text()
    assert text.startswith(f"# yaml-language-server: $schema={web.server.url}/v1/schemas/")
    spec = yaml.safe_load(text)
    assert spec["name"] == "webroles" and spec["image"] == BASE_IMAGE
    assert spec["roles"] == [
        {"name": "worker", "replicas": 2, "resources": {"cpu": 0.25, "mem": "128m"}},
        {"name": "ps"},
    ]
    dialog.get_by_role("button", name="Remove").last.click()
    expect(total).to_contain_text("main \u00d7 1 + worker \u00d7 2 = 3 kernels")
    dialog.get_by_role("button", name="Cancel").click()


def test_load_spec_fills_the_form_and_keeps_the_rest(web: Web, tmp_path: Path) -> None:
    page = web.page
    page.get_by_role("button", name="New session").click()
    dialog = page.get_by_role("dialog")
    bad = tmp_path / "bad.yaml"
    bad.write_text("image: troupe/base:0.1.0\nroles: [{name: w}, {name: w}]\n")
    dialog.locator("#spec-file").set_input_files(str(bad))
    expect(dialog.locator('[data-error="roles"]')).to_have_text(
        "bad.yaml: roles[1].name: role 'w' is given twice"
    )
    good = tmp_path / "launch.yaml"
    good.write_text(
        f"name: webloaded\nimage: {BASE_IMAGE}\nresources: {{cpu: 0.25, mem: 256m}}\n"
        "priority: 7\nenviron: {GREETING: hi}\n"
        "roles:\n  - {name: worker, replicas: 1, resources: {cpu: 0.25}, environ: {W: x}}\n"
    )
    dialog.locator("#spec-file").set_input_files(str(good))
    expect(dialog.get_by_label("Name", exact=True)).to_have_value("webloaded")
    expect(dialog.locator("#f-mem")).to_have_value("256m")
    expect(role_row(dialog, 0).get_by_label("Role")).to_have_value("worker")
    expect(dialog.locator('[name="env-key"]')).to_have_value("GREETING")
    expect(dialog.locator("#total")).to_have_text(
        "main \u00d7 1 + worker \u00d7 1 = 2 kernels; 0.5 CPU; 512 MiB"
    )
    web.shot("roles-02-loaded-spec")
    # what the form does not show (priority, the role's environ) goes out with it
    with page.expect_download() as got:
        dialog.get_by_role("button", name="Download spec").click()
    spec = yaml.safe_load(Path(got.value.path()).read_text())
    assert spec["priority"] == 7 and spec["roles"][0]["environ"] == {"W": "x"}

    try:
        dialog.get_by_role("button", name="Launch").click()
        page.wait_for_url(re.compile(r"/sessions/[0-9a-f-]{36}$"))
        for host in ("main1", "worker1"):
            row = page.locator(f'tr[data-kernel="{host}"]')
            expect(row).to_contain_text("RUNNING", timeout=START)
        web.shot("roles-03-session", full_page=True)
    finally:
        headers = {"Authorization": f"Bearer {web.server.key}"}
        httpx.delete(f"{web.server.url}/v1/sessions/webloaded", headers=headers, timeout=60)
