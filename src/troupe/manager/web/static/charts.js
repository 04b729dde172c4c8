// Utilisation charts (uPlot, vendored): on the session page each kernel's CPU, memory, network
// and GPUs, on the agents page (admins) each agent's used/total. Each box asks the metrics API
// for the samples after the newest it has (see poll), every POLL ms while the page is visible. Every chart is
// a figure whose caption, the newest figures in words, is its text alternative; the canvas is
// hidden from screen readers.
"use strict";
(() => {
  const POLL = 5000, KEEP = 720;  // an hour of 5 s samples per chart
  const C = {used: "#3451b2", limit: "#c2261c", rx: "#177a35", tx: "#8a5a00",
    gpus: ["#3451b2", "#177a35", "#8a5a00", "#7a2e8f", "#1f5fbf", "#c2261c", "#5d6677", "#0b6b6b"]};

  function bytes(n) {
    if (n === null || n === undefined) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
  }
  const num = (n, d = 2) => (n === null || n === undefined ? "—" : String(+n.toFixed(d)));
  const rate = (n) => `${bytes(n)}/s`;
  const cores = (n) => { const t = num(n); return `${t} core${t === "1" ? "" : "s"}`; };
  const pct = (n) => (n === null || n === undefined ? "—" : `${Math.round(n)} %`);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // A bytes axis' ticks: multiples of a power of two (0, 128 MiB, 256 MiB), not of ten. Only
  // 0 below 1 KiB: a chart without samples spans 0-1, and halves of a byte read "1 B, 1 B".
  function binarySplits(u, axis, min, max) {
    if (!(max >= 1024)) return [0];
    const step = 2 ** Math.floor(Math.log2(max / 2));
    const out = [];
    for (let v = 0; v <= max; v += step) out.push(v);
    return out;
  }

  // One small chart. ``lines``: [{label, color, dash}], ``value(sample)``: their values,
  // ``caption(sample)``: the text alternative, ``tick``: the y axis' number format, ``top``:
  // the y axis' fixed top (else a tenth above the highest value).
  class Chart {
    constructor(parent, title, lines, value, caption, tick, top) {
      const fig = el("figure", "chart");
      const plot = el("div", "plot");
      plot.setAttribute("aria-hidden", "true");
      plot.hidden = true;  // (until its first sample: the caption alone says there is none)
      this.cap = el("figcaption", "", `${title}: no sample yet`);
      fig.append(plot, this.cap);
      parent.append(fig);
      Object.assign(this, {title, value, caption, data: [[], ...lines.map(() => [])]});
      this.u = new uPlot({
        width: Math.max(200, plot.clientWidth || 280), height: 110,
        legend: {show: true, live: false}, cursor: {show: false},
        // (one sample: the minute before it, not uPlot's span of years around a point)
        scales: {x: {time: true, range: (u, lo, hi) => (lo !== null && lo === hi ? [lo - 60, hi] : [lo, hi])},
          y: {range: (u, lo, hi) => [0, top || (hi > 0 ? hi * 1.1 : 1)]}},
        series: [{}, ...lines.map((l) => ({label: l.label, stroke: l.color, width: 1.5, dash: l.dash,
          points: {show: false}}))],
        axes: [{size: 26, font: "11px system-ui"},
          {size: 62, font: "11px system-ui", values: (u, vals) => vals.map(tick),
            ...(tick === bytes ? {splits: binarySplits} : {})}],
      }, this.data, plot);
      Object.assign(this, {fig, plot});
    }
    add(sample) {
      if (this.last && sample.t <= this.last.t) return;  // had it (answers overlap: see poll)
      this.data[0].push(sample.t);
      this.value(sample).forEach((v, i) => this.data[i + 1].push(v ?? null));
      if (this.data[0].length > KEEP) this.data.forEach((col) => col.splice(0, col.length - KEEP));
      this.last = sample;
    }
    draw() {
      this.u.setData(this.data);
      if (this.plot.hidden && this.data[0].length) {
        this.plot.hidden = false;
        this.fit();  // (its width is known once shown)
      }
      this.fig.dataset.points = this.data[0].length;  // for the browser tests
      if (this.last) this.cap.textContent = `${this.title}: ${this.caption(this.last)}`;
    }
    fit() { this.u.setSize({width: Math.max(200, this.plot.clientWidth), height: 110}); }
  }

  // Polls ``url`` and hands each answer to ``take``, which returns the newest sample's time
  // (or false to stop). The next request asks for what came after that less OVERLAP seconds:
  // another agent of the session may deliver a round that started a little earlier (its
  // kernels' samples the charts already have are skipped).
  const OVERLAP = 10;
  // Returns a function that asks at once (one that is under way answers soon enough).
  function poll(url, take) {
    let since = null, timer = null, busy = false, over = false;
    async function tick() {
      clearTimeout(timer);
      if (busy || over) return;
      busy = true;
      if (!document.hidden) {
        try {
          const q = since === null ? "" : `?since=${since - OVERLAP}`;
          const next = take(await troupe.api("GET", url + q));
          if (next === false) over = true;
          else if (typeof next === "number") since = Math.max(since ?? 0, next);
        } catch (e) { /* the next tick tries again */ }
      }
      busy = false;
      if (!over) timer = setTimeout(tick, POLL);
    }
    tick();
    window.addEventListener("pagehide", () => clearTimeout(timer));
    return tick;
  }

  function kernelCharts(box, hostname, first) {
    const id = `usage-${hostname}`;
    const group = el("section", "usage-kernel");
    group.setAttribute("aria-labelledby", id);
    const h = el("h3", "", hostname);
    h.id = id;
    const row = el("div", "charts");
    group.append(h, row);
    box.append(group);
    const charts = [
      new Chart(row, "CPU", [{label: "cores", color: C.used}, {label: "limit", color: C.limit, dash: [4, 3]}],
        (s) => [s.cpu_cores, s.cpu_limit],
        (s) => (s.cpu_limit ? `${num(s.cpu_cores)} of ${cores(s.cpu_limit)} (${pct(s.cpu_pct)})`
          : `${cores(s.cpu_cores)} (no limit)`), (v) => num(v)),
      new Chart(row, "Memory", [{label: "used", color: C.used}, {label: "limit", color: C.limit, dash: [4, 3]}],
        (s) => [s.mem_bytes, s.mem_limit],
        (s) => `${bytes(s.mem_bytes)}${s.mem_limit ? ` of ${bytes(s.mem_limit)}` : " (no limit)"}` +
          (s.oom_killed ? ", OOM-killed" : ""), bytes),
      new Chart(row, "Network", [{label: "receive", color: C.rx}, {label: "send", color: C.tx}],
        (s) => [s.net_rx_bps, s.net_tx_bps],
        (s) => `receive ${rate(s.net_rx_bps)}, send ${rate(s.net_tx_bps)}`, rate),
    ];
    const gpus = first.gpus || [];
    if (gpus.length) {
      const lines = gpus.map((g, i) => ({label: `GPU ${g.index}`, color: C.gpus[i % C.gpus.length]}));
      const of = (s, g) => (s.gpus || []).find((x) => x.index === g.index) || {};
      charts.push(
        new Chart(row, "GPU utilisation", lines, (s) => gpus.map((g) => of(s, g).util_pct),
          (s) => gpus.map((g) => `GPU ${g.index} ${pct(of(s, g).util_pct)}`).join(", "), pct, 100),
        new Chart(row, "GPU memory", [...lines, {label: "total", color: C.limit, dash: [4, 3]}],
          (s) => [...gpus.map((g) => of(s, g).mem_bytes), Math.max(...gpus.map((g) => of(s, g).mem_total || 0))],
          (s) => gpus.map((g) => `GPU ${g.index} ${bytes(of(s, g).mem_bytes)} of ${bytes(of(s, g).mem_total)}`).join(", "),
          bytes));
    }
    return charts;
  }

  // A finished session's summary: a sentence for the session, a table per kernel.
  function showSummary(note, u) {
    note.textContent = `Used over ${num(u.seconds / 60, 1)} min: peak memory ${bytes(u.peak_mem_bytes)}, ` +
      `mean CPU ${cores(u.mean_cpu_cores)}, ${num(u.gpu_hours, 3)} GPU-hours` +
      (u.oom_killed ? "; a kernel was OOM-killed" : "") + ".";
    const table = el("table", "usage-summary");
    const cap = el("caption", "sr-only", "What each kernel used");
    const head = el("tr");
    ["Kernel", "Peak memory", "Mean CPU (cores)", "GPU-hours", "Minutes sampled", "OOM-killed"]
      .forEach((t) => { const th = el("th", "", t); th.scope = "col"; head.append(th); });
    const body = el("tbody");
    Object.entries(u.kernels).forEach(([host, k]) => {
      const tr = el("tr");
      [host, bytes(k.peak_mem_bytes), num(k.mean_cpu_cores), num(k.gpu_hours, 3),
        num(k.seconds / 60, 1), k.oom_killed ? "yes" : "no"].forEach((t) => tr.append(el("td", "", t)));
      body.append(tr);
    });
    const thead = el("thead");
    thead.append(head);
    table.append(cap, thead, body);
    const wrap = el("div", "table-wrap");
    wrap.append(table);
    note.after(wrap);
  }

  const all = [];
  window.addEventListener("resize", () => all.forEach((c) => c.fit()));

  const usage = document.getElementById("usage");
  if (usage) {
    const box = usage.querySelector('[data-slot="kernels"]');
    const note = usage.querySelector('[data-slot="note"]');
    const kernels = new Map();
    let after = 0;  // answers asked for after the session ended
    const now = poll(usage.dataset.metrics, (m) => {
      let newest = null;
      for (const k of m.kernels) {
        if (!k.samples.length) continue;
        if (!kernels.has(k.hostname)) {
          kernels.set(k.hostname, kernelCharts(box, k.hostname, k.samples[k.samples.length - 1]));
          all.push(...kernels.get(k.hostname));
        }
        const charts = kernels.get(k.hostname);
        k.samples.forEach((s) => charts.forEach((c) => c.add(s)));
        charts.forEach((c) => c.draw());
        newest = Math.max(newest ?? 0, k.samples[k.samples.length - 1].t);
      }
      if (m.summary) { showSummary(note, m.summary); return false; }
      const final = troupe.FINAL.includes(m.status);
      if (!final) {
        if (kernels.size) note.textContent = "Live: the newest sample of each kernel, every few seconds.";
        return newest;
      }
      // Ended: its summary is stored a moment after the end, when anything was sampled; a
      // session that ended before its first sample has none (asked a few more times).
      note.textContent = kernels.size ? "The session ended; reading what it used…" : note.dataset.none;
      if (++after > 3) {
        if (kernels.size) note.textContent = "The session ended.";
        return false;
      }
      return newest;
    });
    // the session ended while the page is open: what it used (or that nothing was sampled)
    // now, not at the next poll
    document.addEventListener("troupe:session-changed", (e) => {
      if (troupe.FINAL.includes(e.detail.status)) now();
    });
  }

  document.querySelectorAll("[data-agent-metrics]").forEach((row) => {
    const cpu = +row.dataset.cpu, mem = +row.dataset.mem;
    const charts = [
      new Chart(row, "CPU used", [{label: "used", color: C.used}, {label: "total", color: C.limit, dash: [4, 3]}],
        (s) => [s.cpu_cores, cpu], (s) => `${num(s.cpu_cores)} of ${cores(cpu)}, ${s.kernels} kernel${s.kernels === 1 ? "" : "s"}`, (v) => num(v)),
      new Chart(row, "Memory used", [{label: "used", color: C.used}, {label: "total", color: C.limit, dash: [4, 3]}],
        (s) => [s.mem_bytes, mem], (s) => `${bytes(s.mem_bytes)} of ${bytes(mem)}`, bytes),
    ];
    all.push(...charts);
    poll(row.dataset.agentMetrics, (a) => {
      if (!a.samples.length) return undefined;
      a.samples.forEach((s) => charts.forEach((c) => c.add(s)));
      charts.forEach((c) => c.draw());
      return a.samples[a.samples.length - 1].t;
    });
  });
})();
