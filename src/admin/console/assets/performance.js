// Performance: per channel and model over a window, TTFB p50/p95, tokens per second and error
// rate, as a table and as charts over time (so weights can be compared), and the gateway's own
// time per request from its overhead histograms.
"use strict";
(function () {
  const { api, el, fill, ms, pct, num, say, chart, autoRefresh } = window.SY;
  const select = document.getElementById("p-window");

  function overhead(o) {
    const dl = document.getElementById("overhead");
    const rows = [];
    for (const [kind, label] of [["non_stream", "Non-stream"], ["stream", "Stream"]]) {
      const v = o && o[kind];
      const text = v ? "mean " + v.mean_us + " µs · p50 ≤ " + v.p50_us + " µs · p95 ≤ " + v.p95_us + " µs (" + v.count + " requests since start)" : "no requests measured yet";
      rows.push(el("dt", { text: label }), el("dd", { text }));
    }
    dl.replaceChildren(...rows);
  }

  // One line per channel and model, over the union of their points' times.
  function lines(series, pick) {
    const times = [...new Set(series.flatMap((s) => s.points.map((p) => p.t_ms)))].sort((a, b) => a - b);
    const lines = series.map((s) => {
      const at = new Map(s.points.map((p) => [p.t_ms, pick(p)]));
      return { label: s.channel + " · " + s.model, values: times.map((t) => at.get(t) ?? null) };
    });
    return [times, lines];
  }

  async function load() {
    try {
      const stats = await api("/admin/stats?window=" + select.value);
      fill("perf", stats.series, (s) => [
        el("td", {}, el("strong", { text: s.channel })), s.model, String(s.total.calls),
        pct(s.total.error_rate), ms(s.total.ttfb_p50_ms), ms(s.total.ttfb_p95_ms), num(s.total.tokens_per_s),
      ], "No traffic in this window.");
      chart("chart-ttfb", ...lines(stats.series, (p) => p.ttfb_p95_ms));
      chart("chart-tps", ...lines(stats.series, (p) => p.tokens_per_s));
      chart("chart-errors", ...lines(stats.series, (p) => p.error_rate));
      overhead(stats.overhead);
      say(stats.requests + " requests in the window" + (stats.sampled ? " (the newest, sampled)" : "") + " · updated " + new Date().toLocaleTimeString());
    } catch (e) { say("Could not load the figures: " + e.message, true); }
  }

  select.addEventListener("change", load);
  document.getElementById("window").addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  autoRefresh(document.getElementById("autorefresh"), load, 10000);
  load();
})();
