// MCP: every server with each replica's circuit and the tools it last listed (a tool's
// read-only or idempotent annotation marks it safe to fail over), and the tool calls from the
// request log (`endpoint = mcp.tools/call`), filtered by key, tool, server and outcome.
"use strict";
(function () {
  const { api, el, fill, dash, time, ms, say, autoRefresh } = window.SY;
  const filters = document.getElementById("mcp-filters");

  function replicas(list) {
    return el("td", {}, ...(list || []).map((r) =>
      el("span", { class: "badge circuit-" + r.circuit, text: r.replica + ": " + r.circuit })));
  }

  function tools(list) {
    if (!list || !list.length) return "— (not read yet)";
    return el("td", {}, ...list.map((t) => {
      const a = t.annotations || {};
      const safe = a.readOnlyHint || a.idempotentHint;
      return el("span", { class: "badge", title: t.description || "", text: t.name + (safe ? " (safe to repeat)" : "") });
    }));
  }

  function query() {
    const p = new URLSearchParams({ limit: "50", endpoint: "mcp.tools/call" });
    const map = { key: "key", tool: "model", server: "channel", outcome: "outcome" };
    for (const [field, param] of Object.entries(map)) {
      const v = filters.elements[field].value.trim();
      if (v) p.set(param, v);
    }
    return "/admin/requests?" + p.toString();
  }

  const bytes = (n) => (n === null || n === undefined ? "—" : n + " B");

  async function load() {
    try {
      const servers = await api("/admin/mcp_servers");
      fill("mcp-servers", servers.data, (s) => [
        el("td", {}, el("strong", { text: s.name })),
        s.source,
        replicas(s.health),
        tools(s.tools),
      ], "No MCP servers.");
      const calls = await api(query());
      fill("mcp-calls", calls.data, (r) => [
        time(r.ts_ms),
        dash(r.key_name),
        el("td", { class: "mono" }, dash(r.requested_model)),
        dash(r.channel),
        el("td", { class: r.status >= 400 ? "bad" : "" }, String(r.status)),
        r.outcome,
        String(r.attempt_count),
        ms(r.total_ms),
        bytes(r.request_bytes),
        bytes(r.response_bytes),
      ], "No tool calls match.");
      say(calls.data.length + " tool calls · updated " + new Date().toLocaleTimeString());
    } catch (e) { say("Could not load MCP: " + e.message, true); }
  }

  filters.addEventListener("submit", (e) => { e.preventDefault(); load(); });
  autoRefresh(document.getElementById("autorefresh"), load, 5000);
  load();
})();
