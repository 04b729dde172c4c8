// The terminal in main1: xterm.js over the same WebSocket shell bridge as
// `troupe session shell` (binary frames both ways, {"resize": [rows, cols]}, {"exit_code": N}).
"use strict";
(() => {
  const el = document.getElementById("terminal");
  const state = document.getElementById("term-state");
  const again = document.getElementById("term-reconnect");
  const term = new Terminal({
    cursorBlink: true, fontSize: 14, scrollback: 5000,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace',
    theme: {background: "#10141c", foreground: "#e6e8ee", selectionBackground: "#3b4a6b"},
  });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(el);
  fit.fit();
  const encoder = new TextEncoder();
  let ws = null;

  function send(data) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(typeof data === "string" ? encoder.encode(data) : data);
  }
  function sendSize() {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({resize: [term.rows, term.cols]}));
  }

  function connect() {
    again.hidden = true;
    state.textContent = "connecting…";
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    ws = new WebSocket(`${scheme}://${location.host}/v1/sessions/${encodeURIComponent(el.dataset.session)}/shell`);
    ws.binaryType = "arraybuffer";
    let ended = false;
    ws.onopen = () => { state.textContent = "connected"; sendSize(); term.focus(); };
    ws.onmessage = (ev) => {
      if (typeof ev.data !== "string") { term.write(new Uint8Array(ev.data)); return; }
      const msg = JSON.parse(ev.data);
      if ("exit_code" in msg) {
        ended = true;
        state.textContent = `shell exited with code ${msg.exit_code}`;
        term.write(`\r\n\x1b[2m[shell exited with code ${msg.exit_code}]\x1b[0m\r\n`);
      } else if (msg.error) {
        ended = true;
        state.textContent = msg.error.message;
        term.write(`\r\n\x1b[31m${msg.error.message}\x1b[0m\r\n`);
      }
    };
    ws.onclose = () => {
      if (!ended) state.textContent = "disconnected";
      again.hidden = false;
    };
  }

  term.onData((d) => send(d));
  term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0))));
  term.onResize(() => sendSize());
  new ResizeObserver(() => fit.fit()).observe(el);

  async function copy() {
    const text = term.getSelection();
    if (!text) return;
    try { await navigator.clipboard.writeText(text); troupe.toast("Copied"); }
    catch (e) { troupe.toast("Copy needs clipboard permission: use your browser's menu"); }
  }
  async function paste() {
    try { term.paste(await navigator.clipboard.readText()); }
    catch (e) { troupe.toast("Paste needs clipboard permission: use Ctrl+Shift+V or the browser menu"); }
    term.focus();
  }
  // Ctrl+Shift+C / Ctrl+Shift+V as in desktop terminals (plain Ctrl+C stays an interrupt);
  // the browser's own paste (Ctrl+Shift+V, middle click, menu) reaches xterm.js as a paste event.
  term.attachCustomKeyEventHandler((e) => {
    if (e.type === "keydown" && e.ctrlKey && e.shiftKey && e.code === "KeyC") { copy(); return false; }
    return true;
  });
  term.onSelectionChange(() => { if (term.hasSelection()) navigator.clipboard?.writeText(term.getSelection()).catch(() => {}); });
  document.getElementById("term-copy").addEventListener("click", copy);
  document.getElementById("term-paste").addEventListener("click", paste);
  again.addEventListener("click", () => { term.reset(); connect(); });
  window.addEventListener("pagehide", () => ws && ws.close());
  connect();
})();
