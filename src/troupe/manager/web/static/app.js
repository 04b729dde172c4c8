// Shared by every page: JSON calls to /v1 with the sign-in cookie, field errors, the destroy
// dialog, copy buttons, relative ages and the page's one live event stream.
"use strict";

const troupe = (() => {
  async function api(method, path, body) {
    const opts = {method, headers: {Accept: "application/json"}, credentials: "same-origin"};
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const r = await fetch(path, opts);
    const text = await r.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = {error: {message: text}}; }
    if (!r.ok) {
      const err = (data && data.error) || {message: r.statusText};
      if (r.status === 401) { location.href = "/signin?next=" + encodeURIComponent(location.pathname); }
      throw Object.assign(new Error(err.message || "request failed"), {field: err.field, status: r.status});
    }
    return data;
  }

  function toast(text) {
    const t = document.getElementById("toast");
    t.textContent = text;
    t.classList.add("show");
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => t.classList.remove("show"), 2500);
  }

  // Shows ``err`` next to the input its ``field`` names (``resources.cpu`` ...), else on top.
  function showError(form, err) {
    clearErrors(form);
    const field = err.field || "";
    let slot = form.querySelector(`[data-error="${CSS.escape(field)}"]`);
    if (!slot && /[.[]/.test(field)) {  // resources.cpu -> resources, roles[1].name -> roles
      slot = form.querySelector(`[data-error="${CSS.escape(field.split(/[.[]/)[0])}"]`);
    }
    slot = slot || form.querySelector('[data-error=""]');
    if (!slot) { toast(err.message); return; }
    slot.textContent = err.message;
    slot.hidden = false;
    const box = slot.closest(".field");
    // a hint that the message says again word for word is hidden while the message shows
    const hint = box?.querySelector(".hint");
    const said = hint ? hint.textContent.trim() : "";
    if (said && err.message.includes(said)) {
      hint.hidden = true;
      hint.dataset.saidByError = "";
    }
    const input = box?.querySelector("input, select");
    if (input) { input.setAttribute("aria-invalid", "true"); input.focus(); }
  }

  function clearErrors(form) {
    form.querySelectorAll("[data-error]").forEach((e) => { e.hidden = true; e.textContent = ""; });
    form.querySelectorAll("[data-said-by-error]").forEach((h) => {
      h.hidden = false;
      delete h.dataset.saidByError;
    });
    form.querySelectorAll("[aria-invalid]").forEach((e) => e.removeAttribute("aria-invalid"));
  }

  // One live stream per page; ``onSession`` gets {id, status, html}; ``onReopen``, if given,
  // runs each time the stream opens after a failed or cut one (what changed meanwhile came on
  // no stream). The browser's EventSource reconnects by itself after a dropped connection, but
  // gives up for good after an answer that is not a stream (429 when the user has too many
  // streams open, a 5xx): then a new one is opened after about 1 s, 2 s, 4 s ... at most 30 s
  // (jittered, so that a user's tabs do not come back together), while the page is visible (a
  // hidden one waits until it is shown: it would hold one of the user's stream slots for
  // nothing), so a page never stays stale without end; also when it is shown again from the
  // browser's back-forward cache.
  function live(url, onSession, onReopen) {
    let es = null;
    let timer = null;
    let delay = 1000;
    let cut = false;
    const open = () => {
      const source = es = new EventSource(url);
      source.addEventListener("session", (ev) => onSession(JSON.parse(ev.data)));
      source.addEventListener("open", () => {
        delay = 1000;
        if (cut && onReopen) onReopen();
        cut = false;
      });
      source.addEventListener("error", () => {
        cut = true;
        // (still connecting: the browser tries again by itself)
        if (source.readyState !== EventSource.CLOSED || source !== es) return;
        timer = setTimeout(retry, delay * (0.75 + Math.random() / 2));
        delay = Math.min(delay * 2, 30000);
      });
    };
    const retry = () => {
      timer = null;
      if (document.visibilityState !== "hidden") open();
      else document.addEventListener("visibilitychange", retry, {once: true});
    };
    open();
    window.addEventListener("pagehide", () => {
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", retry);
      if (es) es.close();
    });
    window.addEventListener("pageshow", (ev) => {
      if (!ev.persisted) return;
      cut = true;
      delay = 1000;
      open();
    });
  }

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content;
  }

  // The destroy dialog: any [data-destroy] button opens it; its Destroy button confirms.
  function wireDestroy(after) {
    const dialog = document.getElementById("destroy-dialog");
    if (!dialog) return;
    let target = null;
    document.addEventListener("click", (ev) => {
      const b = ev.target.closest("[data-destroy]");
      if (!b) return;
      target = b.dataset.destroy;
      dialog.querySelector('[data-slot="name"]').textContent = b.dataset.name;
      dialog.querySelector('[data-slot="error"]').hidden = true;
      dialog.showModal();
    });
    dialog.querySelector("[data-confirm]").addEventListener("click", async (ev) => {
      ev.target.disabled = true;
      try {
        await api("DELETE", `/v1/sessions/${encodeURIComponent(target)}`);
        dialog.close();
        toast("Session destroyed");
        if (after) after(target);
      } catch (e) {
        const slot = dialog.querySelector('[data-slot="error"]');
        slot.textContent = e.message;
        slot.hidden = false;
      } finally {
        ev.target.disabled = false;
      }
    });
  }

  document.addEventListener("click", async (ev) => {
    const b = ev.target.closest("[data-copy]");
    if (!b) return;
    const text = document.querySelector(b.dataset.copy).textContent.trim();
    try {
      await navigator.clipboard.writeText(text);
      toast("Copied: " + text);
    } catch (e) {
      const range = document.createRange();
      range.selectNodeContents(document.querySelector(b.dataset.copy));
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      toast("Selected: press Ctrl+C to copy");
    }
  });

  function age(iso) {
    const s = Math.max(0, Math.floor((Date.now() - Date.parse(iso)) / 1000));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    if (s < 86400) {
      const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
      return m ? `${h} h ${m} min` : `${h} h`;
    }
    return `${Math.floor(s / 86400)} d`;
  }
  setInterval(() => {
    // only ages (the sessions list): other times on a page are clock times and stay so
    document.querySelectorAll("time[data-age]").forEach((t) => { t.textContent = age(t.dateTime); });
  }, 15000);

  const FINAL = ["TERMINATED", "ERROR", "CANCELLED"];
  return {api, toast, showError, clearErrors, live, fragment, wireDestroy, FINAL};
})();
