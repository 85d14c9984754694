// The request log: newest first, filtered, paged by the API's cursor (never an offset), each
// row opening its attempts as a timeline and its charge; optional auto-refresh.
"use strict";
(function () {
  const { api, el, fill, dash, time, ms, num, usd, say, autoRefresh } = window.SY;
  const filters = document.getElementById("filters");
  const older = document.getElementById("older");
  let next = null;
  let rows = [];

  function query(before) {
    const p = new URLSearchParams({ limit: "50" });
    for (const name of ["key", "model", "channel", "status", "outcome", "id"]) {
      const v = filters.elements[name].value.trim();
      if (v) p.set(name, v);
    }
    for (const name of ["since", "until"]) {
      const v = filters.elements[name].value;
      if (v) p.set(name, String(new Date(v).getTime()));
    }
    if (filters.elements.failed_over.checked) p.set("failed_over", "true");
    if (filters.elements.hide_test.checked) p.set("hide_test", "true");
    if (before) p.set("before", before);
    return "/admin/requests?" + p.toString();
  }

  function render() {
    const trs = fill("log", rows, (r) => [
      time(r.ts_ms),
      el("td", {}, el("button", { type: "button", class: "link mono", text: r.id, "aria-label": "Open request " + r.id, onclick: () => open(r) })),
      dash(r.key_name),
      r.served_model && r.served_model !== r.requested_model ? dash(r.requested_model) + " → " + r.served_model : dash(r.requested_model),
      dash(r.channel),
      el("td", { class: r.status >= 400 ? "bad" : "" }, String(r.status)),
      r.outcome,
      el("td", {}, String(r.attempt_count), r.attempt_count > 1 ? el("span", { class: "badge", text: "failed over" }) : null),
      ms(r.ttfb_ms),
      ms(r.total_ms),
      num(r.tokens_per_s),
      usd(r.cost_micros),
      dash(r.translation),
    ], "No requests match.");
    trs.forEach((tr, i) => { tr.dataset.id = rows[i].id; });
    older.disabled = !next;
  }

  async function load() {
    try {
      const page = await api(query(null));
      rows = page.data;
      next = page.next;
      render();
      say(rows.length + " requests · updated " + new Date().toLocaleTimeString());
    } catch (e) { say("Could not load the log: " + e.message, true); }
  }

  async function more() {
    if (!next) return;
    try {
      const page = await api(query(next));
      rows = rows.concat(page.data);
      next = page.next;
      render();
      say(rows.length + " requests shown");
    } catch (e) { say(e.message, true); }
  }

  function timeline(attempts) {
    const list = document.getElementById("timeline");
    const longest = Math.max(1, ...attempts.map((a) => a.latency_ms || 0));
    list.replaceChildren(...attempts.map((a, i) => {
      const bar = el("span", { class: "bar " + (a.reason === "ok" ? "ok" : "failed") });
      bar.style.width = Math.max(2, Math.round(100 * (a.latency_ms || 0) / longest)) + "%";
      return el("li", { class: a.reason === "ok" ? "ok" : "failed" },
        el("span", { class: "step", text: "#" + (i + 1) }),
        el("span", { class: "what", text: (a.channel || "—") + " · " + a.model }),
        el("span", { class: "why", text: a.reason + (a.status ? " (" + a.status + ")" : "") }),
        el("span", { class: "took", text: (a.latency_ms ?? 0) + " ms" }),
        el("span", { class: "track" }, bar));
    }));
  }

  async function open(r) {
    const box = document.getElementById("detail");
    box.hidden = false;
    document.getElementById("detail-title").textContent = "Request " + r.id;
    const facts = document.getElementById("detail-facts");
    const pairs = [
      ["Time", time(r.ts_ms)], ["Endpoint", r.endpoint], ["Key", dash(r.key_name)],
      ["Requested model", dash(r.requested_model)], ["Served model", dash(r.served_model)],
      ["Channel", dash(r.channel)], ["Status", r.status + " " + r.outcome],
      ["Stream", r.stream ? "yes" : "no"], ["TTFB", ms(r.ttfb_ms)], ["Total", ms(r.total_ms)],
      ["Tokens in / out", dash(r.input_tokens) + " / " + dash(r.output_tokens)],
      ["Tokens/s", num(r.tokens_per_s)], ["Cost", usd(r.cost_micros)],
      ["Translation", dash(r.translation)], ["Session", dash(r.session)], ["Affinity", dash(r.affinity)],
      ["Trimmed turns", dash(r.trimmed_turns)], ["Test traffic", r.test ? "yes" : "no"],
    ];
    facts.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
    timeline(r.attempts || []);
    try {
      const charge = await api("/admin/usage/requests/" + encodeURIComponent(r.id));
      fill("charges", charge.attempts, (c) => [String(c.attempt), c.channel, c.model,
        String(c.tokens.input), String(c.tokens.output), usd(c.cost_micros), c.outcome]);
    } catch (e) {
      fill("charges", [], () => [], e.status === 404 ? "No charge: no upstream call was priced." : e.message);
    }
    box.scrollIntoView({ block: "start" });
  }

  filters.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  older.addEventListener("click", more);
  autoRefresh(document.getElementById("autorefresh"), load, 5000);
  const wanted = new URLSearchParams(window.location.search).get("id");
  if (wanted) filters.elements.id.value = wanted;
  load();
})();
