// The session page: its live part is re-rendered by the server on every change.
"use strict";
(() => {
  const live = document.getElementById("live");
  async function fillTail() {
    const pre = live.querySelector("pre[data-tail]");
    if (!pre) return;
    try {
      const r = await fetch(pre.dataset.tail, {credentials: "same-origin"});
      const lines = (await r.text()).split("\n").filter((l, i, a) => i < a.length - 1 || l);
      pre.textContent = lines.slice(-20).join("\n") || "(no output)";
    } catch (e) { pre.textContent = "(could not read the log)"; }
  }
  troupe.live(live.dataset.live, (ev) => {
    if (ev.id !== live.dataset.id) return;
    const focused = document.activeElement && document.activeElement.id;
    live.replaceChildren(troupe.fragment(ev.html));
    if (focused) document.getElementById(focused)?.focus();
    fillTail();
    document.dispatchEvent(new CustomEvent("troupe:session-changed", {detail: {status: ev.status}}));
  });
  fillTail();
  troupe.wireDestroy(() => {});
})();
