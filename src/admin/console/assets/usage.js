// Usage: spend by key, model, channel, team, end user or day over a range, for every team or
// one (chart and table, with what the providers' prompt caches served and saved), every budget
// with its headroom, and one request's charge explained attempt by attempt.
"use strict";
(function () {
  const { api, el, fill, pct, usd, say, chart } = window.SY;
  const form = document.getElementById("usage-form");

  async function load() {
        const p = new URLSearchParams({ group_by: form.elements.group_by.value });
    if (form.elements.team.value) p.set("team", form.elements.team.value);
    if (form.elements.from.value) p.set("from", form.elements.from.value);
    if (form.elements.to.value) p.set("to", form.elements.to.value);
    try {
      const [u, b] = await Promise.all([api("/admin/usage?" + p), api("/admin/budgets")]);
      const by = u.group_by;
      fill("usage", u.rows, (r) => [el("td", {}, el("strong", { text: r[by] ?? "(none)" })), String(r.requests),
        String(r.attempts), String(r.input_tokens), String(r.cached_input_tokens), String(r.cache_write_tokens),
        r.cache_hit_ratio === null ? "—" : pct(r.cache_hit_ratio), String(r.output_tokens), usd(r.cost_micros),
        usd(r.cache_saved_micros)], "No spend in this range.");
      if (by === "day") {
        const days = u.rows.filter((r) => r.day);
        chart("chart-spend", days.map((r) => Date.parse(r.day + "T00:00:00Z")), [{ label: "USD", values: days.map((r) => r.cost_micros / 1e6) }], 86400);
      } else {
        // Not a time series: one bar per group, drawn as an SVG.
        bars(u.rows.slice(0, 12).map((r) => [r[by] ?? "(none)", r.cost_micros / 1e6]));
      }
      fill("budgets", b.data, (r) => [r.scope + " " + r.name, r.period, usd(r.budget_micros), usd(r.spent_micros),
        usd(r.reserved_micros), usd(r.headroom_micros)], "No budgets configured.");
      say("Total " + usd(u.total.cost_micros) + " over " + u.total.requests + " requests");
    } catch (e) { say("Could not load usage: " + e.message, true); }
  }

  const SVG = "http://www.w3.org/2000/svg";
  function bars(items) {
    const box = document.getElementById("chart-spend");
    box.replaceChildren();
    if (!items.length) { box.append(el("p", { class: "empty", text: "No spend in this range." })); return; }
    const max = Math.max(...items.map(([, v]) => v), 1e-9);
    const svg = document.createElementNS(SVG, "svg");
    const rowH = 26, labelW = 160, width = 600;
    svg.setAttribute("viewBox", "0 0 " + width + " " + items.length * rowH);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "Spend by group");
    items.forEach(([name, v], i) => {
      const y = i * rowH;
      const t = document.createElementNS(SVG, "text");
      t.setAttribute("x", "0"); t.setAttribute("y", String(y + 17)); t.textContent = String(name).slice(0, 22);
      const r = document.createElementNS(SVG, "rect");
      r.setAttribute("x", String(labelW)); r.setAttribute("y", String(y + 4)); r.setAttribute("height", "18");
      r.setAttribute("width", String(Math.max(1, (width - labelW - 90) * v / max))); r.setAttribute("class", "barfill");
      const n = document.createElementNS(SVG, "text");
      n.setAttribute("x", String(labelW + Math.max(1, (width - labelW - 90) * v / max) + 6)); n.setAttribute("y", String(y + 17));
      n.textContent = "$" + v.toFixed(4);
      svg.append(t, r, n);
    });
    box.append(svg);
  }

  async function explain(ev) {
    ev.preventDefault();
    const id = document.getElementById("c-id").value.trim();
    try {
      const c = await api("/admin/usage/requests/" + encodeURIComponent(id));
      fill("charge", c.attempts, (a) => [String(a.attempt), a.channel, a.credential ?? "—", a.model + (a.upstream_model !== a.model ? " (" + a.upstream_model + ")" : ""),
        a.tokens.input + " / " + a.tokens.output, a.price ? "$" + a.price.input + " / $" + a.price.output + " per 1M" : "—",
        usd(a.cost_micros) + (a.estimated ? " (estimated)" : ""), a.outcome]);
      say("Request " + id + " cost " + usd(c.cost_micros) + (c.failover ? "; the failover cost " + usd(c.failover.extra_micros) + " more than the first choice" : ""));
    } catch (e) { say(e.message, true); }
  }

  // The teams the admin sees, to filter by (one admin limited to a team sees it and its own).
  async function teams() {
    try {
      const t = await api("/admin/teams");
      const pick = form.elements.team;
      t.data.forEach((team) => pick.append(el("option", { value: team.name, text: team.name })));
    } catch (e) { /* no teams to offer: the filter stays at every team */ }
  }

  form.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  document.getElementById("charge-form").addEventListener("submit", explain);
  teams();
  load();
})();
