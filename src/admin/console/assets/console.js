// The console's shared helpers: calls to the admin API with the session (and, for writes,
// its CSRF token), building elements without innerHTML, tables, times in the browser's zone,
// auto-refresh and charts. Each page's own script uses `window.SY`.
"use strict";
(function () {
  // Already signed in when the demo's URL was opened: its token leaves the address bar.
  if (location.hash.startsWith("#token=")) history.replaceState(null, "", location.pathname + location.search);
  const csrf = document.querySelector('meta[name="csrf-token"]')?.content || "";
  const isAdmin = document.body.dataset.role === "admin";

  class ApiError extends Error {
    constructor(status, body) {
      const err = body && body.error;
      super((err && err.message) || "HTTP " + status);
      this.status = status;
      this.code = err && err.code;
    }
  }

  // A call to the admin API; a JSON body for writes. Throws ApiError with the envelope's message.
  async function api(path, opts = {}) {
    const init = { method: opts.method || "GET", headers: {}, credentials: "same-origin" };
    if (init.method !== "GET") init.headers["x-csrf-token"] = csrf;
    if (opts.body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    const resp = await fetch(path, init);
    if (resp.status === 401) {
      window.location.assign("/console");
      throw new ApiError(401, null);
    }
    const text = await resp.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
    if (!resp.ok) throw new ApiError(resp.status, body);
    return body;
  }

  // An element with attributes (`on*` as listeners, `text` as its text) and children.
  function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "class") e.className = v;
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // Replaces a table's body with one row per item; `cells(item)` gives each row's cells
  // (strings, numbers or nodes). An empty list shows one row saying so.
  function fill(id, items, cells, empty = "Nothing yet.") {
    const table = document.getElementById(id);
    const body = table.tBodies[0];
    const width = table.tHead.rows[0].cells.length;
    body.replaceChildren();
    if (!items.length) {
      body.append(el("tr", {}, el("td", { colspan: width, class: "empty", text: empty })));
      return [];
    }
    return items.map((item) => {
      const tr = el("tr");
      for (const c of cells(item)) tr.append(c instanceof Node && c.tagName === "TD" ? c : el("td", {}, c ?? "—"));
      body.append(tr);
      return tr;
    });
  }

  const dash = (v) => (v === null || v === undefined || v === "" ? "—" : v);
  const time = (ms) => (ms ? new Date(ms).toLocaleString() : "—");
  const ms = (v) => (v === null || v === undefined ? "—" : Math.round(v) + " ms");
  const pct = (v) => (v === null || v === undefined ? "—" : (v * 100).toFixed(1) + " %");
  const num = (v, d = 1) => (v === null || v === undefined ? "—" : Number(v).toFixed(d));
  const usd = (micros) => (micros === null || micros === undefined ? "—" : "$" + (micros / 1e6).toFixed(6).replace(/0{1,4}$/, ""));

  // The page's status line: what just happened, or what went wrong.
  function say(text, isError = false) {
    const s = document.querySelector("p.status");
    if (!s) return;
    s.textContent = text;
    s.classList.toggle("error", isError);
  }

  // Runs `load` now and, while the checkbox is ticked, every `everyMs`.
  function autoRefresh(box, load, everyMs) {
    let timer = null;
    const set = () => {
      clearInterval(timer);
      timer = box && box.checked ? setInterval(load, everyMs) : null;
    };
    if (box) box.addEventListener("change", set);
    set();
  }

  // A line chart of `series` ({label, values}) over times in ms; redrawn in place.
  const charts = new Map();
  const palette = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#be185d", "#4b5563"];
  // `pad` (seconds) widens the time axis around a lone point, which uPlot would stretch to years.
  function chart(id, times, series, pad = 3600) {
    const box = document.getElementById(id);
    if (!box || !window.uPlot) return null;
    const old = charts.get(id);
    if (old) old.destroy();
    box.replaceChildren();
    if (!times.length) {
      box.append(el("p", { class: "empty", text: "No data in this window." }));
      return null;
    }
    const width = Math.max(280, box.clientWidth || 600);
    const opts = {
      width,
      height: 220,
      series: [{}].concat(series.map((s, i) => ({
        label: s.label, stroke: palette[i % palette.length], width: 2, spanGaps: true,
      }))),
      axes: [{}, { size: 60 }],
      scales: { x: times.length > 1 ? { time: true } : { time: true, range: [times[0] / 1000 - pad, times[0] / 1000 + pad] } },
    };
    const data = [times.map((t) => t / 1000)].concat(series.map((s) => s.values));
    const plot = new window.uPlot(opts, data, box);
    charts.set(id, plot);
    return plot;
  }

  // A click or a key is the user at work: tell the gateway (at most once a minute), so that the
  // session's idle clock restarts; background refreshes never do.
  let lastActive = Date.now();
  const active = () => {
    if (Date.now() - lastActive < 60000) return;
    lastActive = Date.now();
    fetch("/console/activity", { method: "POST", credentials: "same-origin" }).then((r) => {
      if (r.status === 401) window.location.assign("/console");
    }).catch(() => {});
  };
  document.addEventListener("click", active, { passive: true });
  document.addEventListener("keydown", active, { passive: true });

  window.SY = { api, el, fill, dash, time, ms, pct, num, usd, say, autoRefresh, chart, isAdmin, ApiError };
})();
