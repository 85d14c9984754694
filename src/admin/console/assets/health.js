// Health: every channel and model as the router sees it (score, circuit and time left, 429
// cooldown, the last probe, credentials), the shared state's connection, the retry budget,
// budgets and the events queue.
"use strict";
(function () {
  const { api, el, fill, pct, num, say, autoRefresh } = window.SY;
  const secs = (v) => (v ? Math.ceil(v) + " s" : "—");

  // A fetched credential (AWS temporary keys, a Google token): where it came from, how long
  // it has left, and the last refresh's error, which is what an operator acts on.
  function token(t) {
    if (!t) return "";
    if (t.last_refresh_error) return " (" + t.source + ", refresh failed: " + t.last_refresh_error + ")";
    const left = t.expires_in_seconds == null ? "" : ", expires in " + (t.expires_in_seconds >= 120 ? Math.floor(t.expires_in_seconds / 60) + " min" : t.expires_in_seconds + " s");
    return " (" + t.source + left + ")";
  }

  function creds(list) {
    if (!list || !list.length) return "—";
    return list.map((c) => c.label + ": " + (c.disabled ? "disabled" : c.cooling_seconds_left ? "cooling " + secs(c.cooling_seconds_left) : "ready") + token(c.token)).join(", ");
  }

  async function load() {
    try {
      const h = await api("/admin/health");
      fill("circuits", h.data, (r) => [
        el("td", {}, el("strong", { text: r.channel }), r.model ? " · " + r.model : ""),
        num(r.score, 0),
        pct(r.success_rate),
        el("td", { class: "circuit-" + r.circuit }, r.circuit),
        secs(r.circuit_seconds_left),
        secs(r.rate_limited_seconds_left),
        r.last_probe ? (r.last_probe.ok ? "ok" : "failed") + ", " + Math.round(r.last_probe.seconds_ago) + " s ago" : "—",
        creds(r.credentials),
      ], "No channels.");
      const rb = h.retry_budget || {};
      const st = h.state || {};
      const pairs = [
        ["Shared state", st.kind === "redis" ? "Redis, " + (st.connected ? "connected" : "NOT connected") : "in memory (this replica)"],
        ["Retry budget", (rb.retries ?? 0) + " of " + (rb.limit ?? 0) + " retries used over " + (rb.window_seconds ?? 0) + " s (" + (rb.requests ?? 0) + " requests)"],
        ["Budgets kept in", h.budgets ? h.budgets.backend + (h.budgets.connected === false ? " (NOT connected)" : "") : "—"],
        ["Events dropped", String((h.events && h.events.dropped) ?? 0)],
        ["Webhook deliveries owed", String((h.events && h.events.outbox_pending) ?? "—")],
      ];
      document.getElementById("shared").replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
      say("Updated " + new Date().toLocaleTimeString());
    } catch (e) { say("Could not load health: " + e.message, true); }
  }

  autoRefresh(document.getElementById("autorefresh"), load, 5000);
  load();
})();
