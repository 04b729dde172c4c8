// The sessions page: live rows, the destroy dialog and the launch dialog.
"use strict";
(() => {
  const table = document.getElementById("sessions");
  const body = table.querySelector("tbody");
  const finished = table.dataset.show === "finished";
  const empty = document.getElementById("no-sessions");

  troupe.live(table.dataset.live, (ev) => {
    const row = troupe.fragment(ev.html).firstElementChild;
    const belongs = (row.dataset.final === "yes") === finished;
    const old = document.getElementById("row-" + ev.id);
    if (old && belongs) old.replaceWith(row);
    else if (old) old.remove();
    else if (belongs) body.prepend(row);
    empty.hidden = body.rows.length > 0;
  });
  troupe.wireDestroy(() => {});

  // -- launch dialog ------------------------------------------------------------------
  const dialog = document.getElementById("launch-dialog");
  const form = document.getElementById("launch-form");
  const $ = (sel) => form.querySelector(sel);
  let imagesLoaded = false;

  document.getElementById("new-session").addEventListener("click", async () => {
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
        }
        imagesLoaded = true;
      } catch (e) { /* the default image stays */ }
    }
  });
  dialog.querySelectorAll("[data-close]").forEach((b) => b.addEventListener("click", () => dialog.close()));

  $("#f-type").addEventListener("change", () => {
    $("#startup-field").hidden = $("#f-type").value !== "batch";
  });
  $("#add-env").addEventListener("click", () => {
    const row = document.getElementById("env-row").content.cloneNode(true);
    $("#env-rows").append(row);
    $("#env-rows").lastElementChild.querySelector("input").focus();
  });
  form.addEventListener("click", (ev) => {
    const b = ev.target.closest("[data-remove-env]");
    if (b) b.closest(".env-row").remove();
  });

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
  const num = (x) => +(+x).toFixed(3);
  const mode = () => form.querySelector('input[name="cluster_mode"]:checked').value;

  let fitTimer = null;
  function update() {
    const n = parseInt($("#f-size").value, 10) || 0, cpu = parseFloat($("#f-cpu").value) || 0;
    const mem = bytes($("#f-mem").value), gpu = parseInt($("#f-gpu").value, 10) || 0;
    const parts = [`${n} × ${num(cpu)} CPU = ${num(n * cpu)} CPU`];
    if (!isNaN(mem)) parts.push(`${n} × ${human(mem)} = ${human(n * mem)}`);
    if (gpu) parts.push(`${n} × ${gpu} GPU = ${n * gpu} GPU`);
    $("#total").textContent = parts.join("; ");
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

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    troupe.clearErrors(form);
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
      name: $("#f-name").value.trim(),
      image: $("#f-image").value,
      type: $("#f-type").value,
      cluster_mode: mode(),
      cluster_size: Number($("#f-size").value),
      resources: {cpu: Number($("#f-cpu").value), mem: memText, gpu: Number($("#f-gpu").value)},
      mounts, environ,
    };
    if (body.type === "batch") body.startup_command = $("#f-startup").value;
    const submit = form.querySelector('button[type="submit"]');
    submit.disabled = true;
    try {
      const s = await troupe.api("POST", "/v1/sessions", body);
      location.href = `/sessions/${s.id}`;
    } catch (e) {
      troupe.showError(form, e);
    } finally {
      submit.disabled = false;
    }
  });
})();
