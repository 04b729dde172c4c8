// The session page's apps: a button per app the image declares, "Open port…" for any other
// port. Each POSTs /v1/sessions/{id}/apps/{app} and opens the answer's one-time link in a new
// tab (opened at the click, so no pop-up blocker stops it; its opener cut, so the app's page
// cannot reach this one). Apps are asked for and opened only while the session is RUNNING;
// once it finished, the card goes (the page shows a finished session without it).
"use strict";
(() => {
  const box = document.getElementById("apps");
  if (!box) return;
  const base = `/v1/sessions/${encodeURIComponent(box.dataset.session)}/apps`;
  const list = box.querySelector('[data-slot="list"]');
  const error = box.querySelector('[data-slot="error"]');
  const STATES = {running: "ok", starting: "wait", failed: "bad", stopped: ""};
  // Names as their projects write them; any other app: its name, capitalised.
  const NAMES = {jupyter: "Jupyter", tensorboard: "TensorBoard", vscode: "VS Code"};
  const label = (name) => NAMES[name] || name.charAt(0).toUpperCase() + name.slice(1);

  function render(apps) {
    list.replaceChildren(...apps.map((a) => {
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button";
      b.className = "btn";
      b.dataset.app = a.name;
      b.textContent = label(a.name);
      const state = document.createElement("span");
      state.className = `badge ${STATES[a.state] || ""}`;
      state.textContent = a.state;
      li.append(b, " ", state, ` port ${a.port}`);
      if (a.state === "failed" && a.log_tail && a.log_tail.length) {
        const pre = document.createElement("pre");
        pre.className = "tail";
        pre.setAttribute("role", "log");
        pre.setAttribute("aria-label", `last log lines of ${a.name}`);
        pre.textContent = a.log_tail.join("\n");
        li.append(pre);
      }
      return li;
    }));
  }

  const openPort = box.querySelector("[data-open-port]");
  const wait = box.querySelector('[data-slot="wait"]');
  const running = () => box.dataset.status === "RUNNING";

  async function refresh() {
    if (!running()) { list.replaceChildren(); return; }
    try { render(await troupe.api("GET", base)); } catch (e) { /* it stopped running meanwhile */ }
  }

  function fail(message) {
    error.textContent = message;
    error.hidden = false;
  }

  // Opens ``app`` (a name or a port) in ``tab``; the error, if any, is thrown.
  async function open(app, tab) {
    try {
      const info = await troupe.api("POST", `${base}/${encodeURIComponent(app)}`);
      tab.location.href = info.url;
      refresh();
    } catch (e) {
      tab.close();
      refresh();
      throw e;
    }
  }

  function newTab() {
    const tab = window.open("about:blank", "_blank");
    if (tab) tab.opener = null;
    return tab;
  }

  box.addEventListener("click", async (ev) => {
    const b = ev.target.closest("[data-app]");
    if (!b) return;
    error.hidden = true;
    const tab = newTab();
    if (!tab) { fail("The browser blocked the new tab: allow pop-ups for this page."); return; }
    try { await open(b.dataset.app, tab); } catch (e) { fail(e.message); }
  });

  const dialog = document.getElementById("port-dialog");
  const form = dialog.querySelector("[data-port-form]");
  openPort.addEventListener("click", () => {
    troupe.clearErrors(form);
    error.hidden = true;
    dialog.showModal();
    form.port.focus();
  });
  dialog.querySelectorAll("[data-close]").forEach((b) => b.addEventListener("click", () => dialog.close()));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const port = Number(form.port.value);
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      troupe.showError(form, {field: "", message: "A port is a whole number from 1 to 65535."});
      return;
    }
    const tab = newTab();
    if (!tab) { troupe.showError(form, {field: "", message: "The browser blocked the new tab: allow pop-ups for this page."}); return; }
    try {
      await open(String(port), tab);
      dialog.close();
    } catch (e) { troupe.showError(form, {field: "", message: e.message}); }
  });

  refresh();
  document.addEventListener("troupe:session-changed", (ev) => {
    const status = ev.detail && ev.detail.status;
    if (!status) return;
    if (troupe.FINAL.includes(status)) {
      if (dialog.open) dialog.close();
      box.remove();
      dialog.remove();
      return;
    }
    box.dataset.status = status;
    openPort.disabled = !running();
    wait.hidden = running();
    refresh();
  });
})();
