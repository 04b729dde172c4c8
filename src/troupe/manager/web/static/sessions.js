// The sessions page: live rows, the destroy dialog and the launch dialog.
"use strict";
(() => {
  const table = document.getElementById("sessions");
  const body = table.querySelector("tbody");
  const finished = table.dataset.show === "finished";
  const empty = document.getElementById("no-sessions");
  const pager = document.getElementById("pager");

  function apply(ev) {
    const row = troupe.fragment(ev.html).firstElementChild;
    const belongs = (row.dataset.final === "yes") === finished;
    const old = document.getElementById("row-" + ev.id);
    if (old && belongs) old.replaceWith(row);
    else if (old) old.remove();
    else if (belongs) body.prepend(row);
    empty.hidden = body.rows.length > 0;
  }
  // Rows as the page would show them now: after the live stream was cut, changes of that
  // while came on no stream (the session page's stream renders its session when it opens).
  // Live rows that come meanwhile are held and applied after the swap, in order: each was
  // rendered after its change, so the last one of a session is at least as new as the page.
  let held = null;
  let asked = 0;
  async function refreshRows(again = true) {
    const mine = ++asked;
    held = held || [];
    let fresh = null;
    try {
      const r = await fetch(location.href, {credentials: "same-origin", signal: AbortSignal.timeout(15000)});
      if (r.ok) fresh = new DOMParser().parseFromString(await r.text(), "text/html");
    } catch (e) { /* asked again below */ }
    if (mine !== asked) return; // a later refresh replaces this one (and holds the rows)
    const rows = fresh && fresh.querySelector("#sessions tbody");
    if (rows) {
      body.replaceChildren(...rows.children);
      // the links to other pages may have changed too (swapped only then: a swap drops focus)
      const pages = fresh.getElementById("pager");
      if (pages && pages.innerHTML !== pager.innerHTML) pager.replaceChildren(...pages.childNodes);
    }
    const late = held;
    held = null;
    late.forEach(apply);
    empty.hidden = body.rows.length > 0;
    if (!rows && again) setTimeout(() => refreshRows(false), 5000);
  }
  troupe.live(table.dataset.live, (ev) => (held ? held.push(ev) : apply(ev)), refreshRows);
  troupe.wireDestroy(() => {});

  // -- launch dialog ------------------------------------------------------------------
  const dialog = document.getElementById("launch-dialog");
  const form = document.getElementById("launch-form");
  const $ = (sel) => form.querySelector(sel);
  let imagesLoaded = false;

  const newSession = document.getElementById("new-session");
  newSession.type = "button"; // the script is here: the dialog opens in place (no new page)
  newSession.addEventListener("click", () => openLaunch());
  async function openLaunch() {
    troupe.clearErrors(form);
    dialog.showModal();
    $("#f-name").focus();
    update();
    if (!imagesLoaded) {
      try {
        const names = await troupe.api("GET", "/ui/images");
        if (names.length) {
          const sel = $("#f-image"), keep = sel.value;
          sel.replaceChildren(...names.map((n) => new Option(n, n, false, n === keep)));
          document.getElementById("image-list").replaceChildren(...names.map((n) => new Option(n)));
        }
        imagesLoaded = true;
      } catch (e) { /* the default image stays */ }
    }
  }
  dialog.querySelectorAll("[data-close]").forEach((b) => b.addEventListener("click", () => dialog.close()));

  $("#f-type").addEventListener("change", () => {
    $("#startup-field").hidden = $("#f-type").value !== "batch";
  });
  $("#add-env").addEventListener("click", () => {
    const row = document.getElementById("env-row").content.cloneNode(true);
    $("#env-rows").append(row);
    $("#env-rows").lastElementChild.querySelector("input").focus();
  });
  function addRole(role) {
    const row = document.getElementById("role-row").content.cloneNode(true).firstElementChild;
    const r = role || {}, res = r.resources || {};
    const set = (name, v) => { if (v !== undefined && v !== null) row.querySelector(`[name="role-${name}"]`).value = v; };
    set("name", r.name); set("replicas", r.replicas); set("image", r.image);
    set("cpu", res.cpu); set("mem", res.mem === undefined ? undefined : sizeText(res.mem)); set("gpu", res.gpu);
    const {name, replicas, image, resources, ...rest} = r;  // environ, startup_command: kept as loaded
    row.dataset.extra = JSON.stringify(rest);
    $("#role-rows").append(row);
    return row;
  }
  $("#add-role").addEventListener("click", () => {
    addRole().querySelector("input").focus();
    update();
  });
  form.addEventListener("click", (ev) => {
    const b = ev.target.closest("[data-remove-env]");
    if (b) b.closest(".env-row").remove();
    const r = ev.target.closest("[data-remove-role]");
    if (r) { r.closest(".role-row").remove(); update(); }
  });

  // The rows as the API's roles: an empty cell is left out (the session's value).
  function roles() {
    return [...form.querySelectorAll(".role-row")].map((row) => {
      const v = (name) => row.querySelector(`[name="role-${name}"]`).value.trim();
      const role = {...JSON.parse(row.dataset.extra || "{}"), name: v("name"), replicas: Number(v("replicas") || 1)};
      if (v("image")) role.image = v("image");
      const res = {};
      if (v("cpu")) res.cpu = Number(v("cpu"));
      if (v("mem")) res.mem = v("mem");
      if (v("gpu")) res.gpu = Number(v("gpu"));
      if (Object.keys(res).length) role.resources = res;
      return role;
    });
  }

  const SIZE = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$/i;
  const UNITS = {"": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4};
  function bytes(text) {
    const m = SIZE.exec(text);
    return m ? Math.floor(parseFloat(m[1]) * UNITS[m[2].toLowerCase()]) : NaN;
  }
  function human(n) {
    for (const [u, f] of [["TiB", 1024 ** 4], ["GiB", 1024 ** 3], ["MiB", 1024 ** 2], ["KiB", 1024]]) {
      if (n >= f) return `${+(n / f).toFixed(1)} ${u}`;
    }
    return `${n} B`;
  }
  function sizeText(n) {  // bytes as the form shows them: 512m, 2g
    if (typeof n !== "number") return n;
    for (const [u, f] of [["t", 1024 ** 4], ["g", 1024 ** 3], ["m", 1024 ** 2], ["k", 1024]]) {
      if (n >= f && n % f === 0) return `${n / f}${u}`;
    }
    return String(n);
  }
  const num = (x) => +(+x).toFixed(3);
  const mode = () => form.querySelector('input[name="cluster_mode"]:checked').value;

  let fitTimer = null;
  function update() {
    let n = parseInt($("#f-size").value, 10) || 0;
    const cpu = parseFloat($("#f-cpu").value) || 0;
    const mem = bytes($("#f-mem").value), gpu = parseInt($("#f-gpu").value, 10) || 0;
    const rs = roles();
    $("#f-size").disabled = rs.length > 0;
    if (rs.length) {
      // main1 with the top-level values unless a role named main gives its own
      const all = rs.some((r) => r.name === "main") ? rs : [{name: "main", replicas: 1}, ...rs];
      const of = (r) => ({k: Math.max(0, r.replicas || 0), c: (r.resources || {}).cpu ?? cpu,
        m: (r.resources || {}).mem !== undefined ? bytes(r.resources.mem) : mem, g: (r.resources || {}).gpu ?? gpu});
      const t = all.map(of).reduce((a, x) => ({k: a.k + x.k, c: a.c + x.k * x.c, m: a.m + x.k * x.m, g: a.g + x.k * x.g}), {k: 0, c: 0, m: 0, g: 0});
      n = t.k;
      $("#f-size").value = n;
      const parts = [all.map((r) => `${r.name || "?"} × ${r.replicas || 0}`).join(" + ") + ` = ${n} kernel${n === 1 ? "" : "s"}`,
        `${num(t.c)} CPU`];
      if (!isNaN(t.m)) parts.push(human(t.m));
      if (t.g) parts.push(`${t.g} GPU`);
      $("#total").textContent = parts.join("; ");
    } else {
      const parts = [`${n} × ${num(cpu)} CPU = ${num(n * cpu)} CPU`];
      if (!isNaN(mem)) parts.push(`${n} × ${human(mem)} = ${human(n * mem)}`);
      if (gpu) parts.push(`${n} × ${gpu} GPU = ${n * gpu} GPU`);
      $("#total").textContent = parts.join("; ");
    }
    clearTimeout(fitTimer);
    fitTimer = setTimeout(async () => {
      const q = new URLSearchParams({cpu: cpu || 0.5, mem: $("#f-mem").value || "512m", gpu});
      try {
        const fit = await troupe.api("GET", "/ui/fit?" + q);
        const largest = fit.largest[mode()];
        const unit = mode() === "multi-node" ? "over all agents" : "on one agent";
        $("#largest").textContent = largest > 0
          ? `Up to ${largest} could start now ${unit}; larger sessions wait PENDING.`
          : `None could start now ${unit}: the session would wait PENDING.`;
      } catch (e) { $("#largest").textContent = ""; }
    }, 150);
  }
  form.addEventListener("input", update);

  // What the form holds, as the create request; ``extra`` keeps what a loaded file set that
  // the form does not show (priority, uid, ...), so a download or a launch loses nothing.
  let extra = {};
  function request() {
    const environ = {};
    form.querySelectorAll(".env-row").forEach((r) => {
      const k = r.querySelector('[name="env-key"]').value.trim();
      if (k) environ[k] = r.querySelector('[name="env-value"]').value;
    });
    const mounts = [...form.querySelectorAll('input[name="mount"]:checked')].map((c) => ({
      folder: c.value, readonly: form.querySelector(`input[name="ro-${CSS.escape(c.value)}"]`).checked,
    }));
    const memText = $("#f-mem").value.trim();
    const body = {
      ...extra,
      name: $("#f-name").value.trim(),
      image: $("#f-image").value,
      type: $("#f-type").value,
      cluster_mode: mode(),
      cluster_size: Number($("#f-size").value),
      resources: {cpu: Number($("#f-cpu").value), mem: memText, gpu: Number($("#f-gpu").value)},
      mounts, environ,
    };
    const rs = roles();
    if (rs.length) { body.roles = rs; delete body.cluster_size; }
    if (body.type === "batch") body.startup_command = $("#f-startup").value;
    return body;
  }

  // Fills the form from a loaded file's request; what it does not show goes to ``extra``.
  const SHOWN = ["name", "image", "type", "startup_command", "resources", "cluster_mode",
    "cluster_size", "roles", "mounts", "environ"];
  function fill(req) {
    const {...rest} = req;
    SHOWN.forEach((k) => delete rest[k]);
    extra = rest;
    if (req.name !== undefined) $("#f-name").value = req.name;
    if (req.image !== undefined) {
      const sel = $("#f-image");
      if (![...sel.options].some((o) => o.value === req.image)) sel.append(new Option(req.image, req.image));
      sel.value = req.image;
    }
    $("#f-type").value = req.type || "interactive";
    $("#startup-field").hidden = $("#f-type").value !== "batch";
    $("#f-startup").value = req.startup_command || "";
    const res = req.resources || {};
    $("#f-cpu").value = res.cpu ?? 0.5;
    $("#f-mem").value = res.mem === undefined ? "512m" : sizeText(res.mem);
    $("#f-gpu").value = res.gpu ?? 0;
    form.querySelector(`input[name="cluster_mode"][value="${CSS.escape(req.cluster_mode || "single-node")}"]`).checked = true;
    $("#f-size").value = req.cluster_size || 1;
    $("#role-rows").replaceChildren();
    (req.roles || []).forEach((r) => addRole(r));
    const mounts = new Map((req.mounts || []).map((m) => [m.folder, m]));
    form.querySelectorAll('input[name="mount"]').forEach((c) => {
      c.checked = mounts.has(c.value);
      form.querySelector(`input[name="ro-${CSS.escape(c.value)}"]`).checked = !!(mounts.get(c.value) || {}).readonly;
      mounts.delete(c.value);
    });
    $("#env-rows").replaceChildren();
    Object.entries(req.environ || {}).forEach(([k, v]) => {
      $("#add-env").click();
      const row = $("#env-rows").lastElementChild;
      row.querySelector('[name="env-key"]').value = k;
      row.querySelector('[name="env-value"]').value = v;
    });
    update();
    if (mounts.size) {
      troupe.showError(form, {field: "mounts", message: `mounts: no folder ${[...mounts.keys()].join(", ")} here`});
    }
  }

  // An error of the API shown next to its field; one about a role (``roles[1].resources.cpu``)
  // names the row as the dialog shows it ("Role 2 (worker), CPU: ...") and marks that cell.
  function showFieldError(e) {
    const m = /^roles\[(\d+)\]\.([\w.]+)/.exec(e.field || "");
    const row = m && form.querySelectorAll(".role-row")[Number(m[1])];
    if (!row) { troupe.showError(form, e); return; }
    const input = row.querySelector(`[name="role-${m[2].replace(/^resources\./, "")}"]`);
    const name = row.querySelector('[name="role-name"]').value.trim();
    const named = m[2] !== "name" && name ? ` (${name})` : "";
    const what = input && m[2] !== "name" ? input.closest("label").firstChild.textContent.trim() : m[2];
    const rule = e.message.replace(/^roles\[\d+\][\w.]*:\s*/, "");
    troupe.showError(form, {field: "roles", message: `Role ${Number(m[1]) + 1}${named}, ${what}: ${rule}`});
    form.querySelectorAll("#role-rows [aria-invalid]").forEach((x) => x.removeAttribute("aria-invalid"));
    if (input) { input.setAttribute("aria-invalid", "true"); input.focus(); }
  }

  $("#load-spec").addEventListener("click", () => $("#spec-file").click());
  $("#spec-file").addEventListener("change", async () => {
    const file = $("#spec-file").files[0];
    $("#spec-file").value = "";
    if (!file) return;
    troupe.clearErrors(form);
    try {
      const r = await fetch("/ui/spec/load", {method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/yaml", Accept: "application/json"}, body: await file.text()});
      const data = await r.json();
      if (!r.ok) {
        const err = data.error || {};
        throw Object.assign(new Error(`${file.name}: ${err.message}`), {field: err.field === "file" ? "" : err.field});
      }
      fill(data);
      troupe.toast(`Loaded ${file.name}`);
    } catch (e) {  // the file's error, not the form's rows': shown as the file says it
      troupe.showError(form, e);
    }
  });

  $("#download-spec").addEventListener("click", async () => {
    troupe.clearErrors(form);
    const body = request();
    try {
      const r = await fetch("/ui/spec/download", {method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
      if (!r.ok) {
        const err = (await r.json()).error || {};
        throw Object.assign(new Error(err.message || "request failed"), {field: err.field});
      }
      const url = URL.createObjectURL(new Blob([await r.text()], {type: "application/yaml"}));
      const a = Object.assign(document.createElement("a"), {href: url, download: `${body.name || "session"}.yaml`});
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 1000);
    } catch (e) {
      showFieldError(e);
    }
  });

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    troupe.clearErrors(form);
    const body = request();
    const submit = form.querySelector('button[type="submit"]');
    submit.disabled = true;
    try {
      const s = await troupe.api("POST", "/v1/sessions", body);
      location.href = `/sessions/${s.id}`;
    } catch (e) {
      showFieldError(e);
    } finally {
      submit.disabled = false;
    }
  });

  // "New session" clicked before this script had come: its form asked for the page with new=1
  const here = new URL(location.href);
  if (here.searchParams.get("new") === "1") {
    here.searchParams.delete("new");
    history.replaceState(null, "", here);
    openLaunch();
  }
})();
