"""The launch dialog's errors in a real browser against a real manager: each is shown next to
its field, names it and says the rule in words as the API states it (never a regular
expression or pydantic's phrasing); an error of a role names its row as the dialog shows it
and marks that cell. The dialog with an error passes axe-core; its buttons fit a narrow window."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Locator, expect

from tests.browser.conftest import Web
from tests.conftest import Server
from troupe.api.models import NAME_RULE

pytestmark = pytest.mark.docker


def launch_error(dialog: Locator, field: str, text: str) -> Locator:
    """Presses Launch and waits for ``text`` in the error slot of ``field``."""
    dialog.get_by_role("button", name="Launch").click()
    slot = dialog.locator(f'[data-error="{field}"]')
    expect(slot).to_have_text(text)
    return slot


def test_every_field_error_names_the_field_and_its_rule_in_words(web: Web) -> None:
    page = web.go("/")
    page.get_by_role("button", name="New session").click()
    dialog = page.get_by_role("dialog")
    name = dialog.get_by_label("Name", exact=True)
    expect(dialog.locator("#name-hint")).to_have_text(NAME_RULE)  # said before it is broken

    name.fill("Bad Name")
    launch_error(dialog, "name", f"name: must be {NAME_RULE}")
    expect(name).to_have_attribute("aria-invalid", "true")
    expect(dialog.locator("#name-hint")).to_be_hidden()  # (the error says it: not twice)
    web.shot("errors-01-name")
    web.audit("launch-dialog-name-error")

    name.fill("errs")
    cpu = dialog.get_by_label("CPU", exact=True)
    cpu.fill("0")
    launch_error(dialog, "resources.cpu", "resources.cpu: must be more than 0")
    expect(dialog.locator("#name-hint")).to_be_visible()  # (back with the name's error gone)
    cpu.fill("0.5")

    dialog.get_by_role("button", name="Add role").click()
    row = dialog.locator(".role-row").first
    row.get_by_label("Role").fill("worker")
    row.get_by_label("CPU").fill("0")
    launch_error(dialog, "roles", "Role 1 (worker), CPU: must be more than 0")
    expect(dialog.locator("#roles-hint")).to_be_visible()  # (an error that does not say it)
    expect(row.get_by_label("CPU")).to_have_attribute("aria-invalid", "true")
    expect(row.get_by_label("CPU")).to_be_focused()
    web.shot("errors-02-role-cpu")
    web.audit("launch-dialog-role-error")

    row.get_by_label("CPU").fill("")
    row.get_by_label("Memory").fill("lots")
    launch_error(dialog, "roles", "Role 1 (worker), Memory: must be a size such as 512m or 2g")
    expect(row.get_by_label("Memory")).to_be_focused()
    row.get_by_label("Memory").fill("")
    row.get_by_label("Replicas").fill("0")
    launch_error(dialog, "roles", "Role 1 (worker), Replicas: must be at least 1")
    row.get_by_label("Replicas").fill("1")
    row.get_by_label("Role").fill("Worker2")
    launch_error(
        dialog,
        "roles",
        "Role 1, name: 'Worker2' must be a lowercase word of 1-16 letters a-z (hostnames are"
        " <name><idx>: a digit could make two equal)",
    )
    row.get_by_role("button", name="Remove").click()

    dialog.get_by_role("button", name="Add variable").click()
    dialog.get_by_label("Variable name").fill("1A")
    launch_error(
        dialog,
        "environ",
        "environ: '1A' is not a valid variable name (letters, digits and '_', not starting"
        " with a digit)",
    )
    for slot in dialog.locator(".field-error").all():
        assert "should" not in slot.inner_text() and "pattern" not in slot.inner_text()
    dialog.get_by_role("button", name="Cancel").click()


def test_new_session_opens_after_sign_in_over_a_slow_link(browser: Browser, server: Server) -> None:
    """The page shows before its scripts at the end of the body have come and run; a click
    on "New session" then did nothing, once in CI (now it asks for the page again: the next
    test). Signing in waits for them (the helper), and the dialog opens in place."""
    slow = Web(browser, server, width=420, height=900)
    try:
        slow.go("/")
        cdp = slow.context.new_cdp_session(slow.page)
        cdp.send("Network.enable")
        conditions = {"offline": False, "latency": 600, "downloadThroughput": -1}
        cdp.send("Network.emulateNetworkConditions", {**conditions, "uploadThroughput": -1})
        slow.sign_in(server.key)
        slow.page.get_by_role("button", name="New session").click()
        expect(slow.page.get_by_role("dialog")).to_be_visible(timeout=5000)
    finally:
        slow.close()


def test_new_session_clicked_before_the_scripts_came_opens_the_dialog(
    browser: Browser, server: Server
) -> None:
    """Over a slow link the page shows before its scripts: "New session" is then a form's
    button, so the click asks for the page again (new=1), and the dialog opens once the
    scripts have come, on the tab the user was on, the URL without new=1."""
    slow = Web(browser, server, width=420, height=900)
    try:
        slow.sign_in(server.key)
        asked: list[str] = []
        slow.page.on("request", lambda r: asked.append(r.url))
        cdp = slow.context.new_cdp_session(slow.page)
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})  # the scripts come again
        conditions = {"offline": False, "latency": 1500, "downloadThroughput": -1}
        cdp.send("Network.emulateNetworkConditions", {**conditions, "uploadThroughput": -1})
        slow.page.goto(server.url + "/?show=finished", wait_until="commit")
        slow.page.get_by_role("button", name="New session").wait_for()
        # the state read and the click made in one step in the page (Playwright's click()
        # waits for frames the loading page does not paint, until the scripts have come)
        click = "() => [document.readyState, document.getElementById('new-session').click()][0]"
        assert slow.page.evaluate(click) == "loading"  # clicked before any script ran
        expect(slow.page.get_by_role("dialog")).to_be_visible(timeout=20_000)
        assert any("new=1" in url for url in asked)
        assert slow.page.url == server.url + "/?show=finished"
    finally:
        slow.close()


def test_the_dialogs_buttons_fit_a_narrow_window(browser: Browser, server: Server) -> None:
    narrow = Web(browser, server, width=420, height=900)
    try:
        narrow.sign_in(server.key)
        page = narrow.page
        page.get_by_role("button", name="New session").click()
        dialog = page.get_by_role("dialog")
        box = dialog.bounding_box()
        assert box is not None
        for name in ("Load spec", "Download spec", "Cancel", "Launch"):
            b = dialog.get_by_role("button", name=name, exact=True).bounding_box()
            assert b is not None
            inside = box["x"] <= b["x"] and b["x"] + b["width"] <= box["x"] + box["width"]
            assert inside, f"{name} at {b} is outside the dialog {box}"
        narrow.shot("errors-03-dialog-400px")
        narrow.audit("launch-dialog-400px")
    finally:
        narrow.close()
