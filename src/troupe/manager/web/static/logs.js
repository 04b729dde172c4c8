// The logs view: one kernel or all merged ([main1] prefixes), followed live over server-sent
// events. The browser reconnects by itself and sends Last-Event-ID, so the server resumes
// after the last line shown (no repeats); the stream's "end" event closes it for good. An
// empty view says so once the stream is open, instead of looking like it is still connecting.
"use strict";
(() => {
  const tools = document.getElementById("log-tools");
  const session = tools.dataset.session;
  const select = document.getElementById("kernel");
  const search = document.getElementById("log-search");
  const follow = document.getElementById("log-follow");
  const out = document.getElementById("log");
  const state = document.getElementById("log-state");
  const download = document.getElementById("log-download");
  let es = null, count = 0, filter = "", note = null;

  function matches(text) { return !filter || text.toLowerCase().includes(filter); }

  // a note in the empty view ("no output yet"); the first line replaces it
  function say(text) {
    if (note) note.remove();
    note = null;
    if (!text) return;
    note = document.createElement("span");
    note.className = "note";
    note.textContent = text;
    out.append(note);
  }

  function live() {
    return count ? `following live · ${count} line${count === 1 ? "" : "s"}` : "following live · no output yet";
  }

  function add(text) {
    say("");
    const line = document.createElement("span");
    line.className = "ln";
    line.textContent = text + "\n";
    if (!matches(text)) line.hidden = true;
    out.append(line);
    count += 1;
  }

  function open() {
    if (es) es.close();
    out.replaceChildren();
    count = 0;
    note = null;
    const kernel = select.value;
    const q = new URLSearchParams({follow: "true"});
    if (kernel) q.set("container", kernel);
    const base = `/v1/sessions/${encodeURIComponent(session)}/logs`;
    download.href = base + (kernel ? `?container=${encodeURIComponent(kernel)}` : "");
    download.download = `${tools.dataset.name}-${kernel || "all"}-logs.txt`;
    const url = new URL(location.href);
    if (kernel) url.searchParams.set("kernel", kernel); else url.searchParams.delete("kernel");
    history.replaceState(null, "", url);
    state.textContent = "connecting…";
    es = new EventSource(`${base}?${q}`);
    es.onopen = () => {
      state.textContent = live();
      if (!count) say("(no output yet)");
    };
    es.onmessage = (ev) => {
      const d = JSON.parse(ev.data);
      add(kernel ? d.text : `[${d.kernel}] ${d.text}`);
      if (follow.checked) out.scrollTop = out.scrollHeight;
      state.textContent = live();
    };
    es.addEventListener("end", (ev) => {
      es.close();
      const d = ev.data ? JSON.parse(ev.data) : {};
      state.textContent = d.error ? `log ended: ${d.error}` : `complete · ${count} line${count === 1 ? "" : "s"} (the kernels have ended or have not started)`;
      if (!count) say("(no output)");
    });
    es.onerror = () => {
      state.textContent = es.readyState === EventSource.CLOSED ? "disconnected: reload to retry" : "reconnecting…";
    };
  }

  select.addEventListener("change", open);
  search.addEventListener("input", () => {
    filter = search.value.toLowerCase();
    let shown = 0;
    out.querySelectorAll(".ln").forEach((l) => { l.hidden = !matches(l.textContent); shown += !l.hidden; });
    if (filter) state.textContent = `${shown} of ${count} lines match`;
  });
  window.addEventListener("pagehide", () => es && es.close());
  open();
})();
