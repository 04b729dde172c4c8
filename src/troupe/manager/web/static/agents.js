// The agents page: each agent's heartbeat age, asked again every 5 s (GET /v1/agents), so it
// says how long ago the agent last sent one now, not when the page was loaded. An agent whose
// status changed (ALIVE <-> LOST) reloads the page: its bars and badge are the server's.
"use strict";

(() => {
  const PERIOD = 5000;

  async function refresh() {
    let agents;
    try {
      agents = await troupe.api("GET", "/v1/agents");
    } catch (e) {
      return;  // the next period asks again
    }
    for (const a of agents) {
      const el = document.querySelector(`[data-heartbeat="${CSS.escape(a.name)}"]`);
      if (!el) continue;
      if (a.status !== el.dataset.status) { location.reload(); return; }
      if (a.heartbeat_age !== null) el.textContent = `heartbeat ${Math.round(a.heartbeat_age)} s ago`;
    }
  }

  if (document.querySelector("[data-heartbeat]")) {
    setInterval(() => { if (!document.hidden) refresh(); }, PERIOD);
  }
})();
