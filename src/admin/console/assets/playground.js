// The route playground: a model, a key and a prompt, and `POST /admin/route/explain`'s answer
// (the chain, each model's strategy and the channel it would try first with why, candidates
// with shares, health and what a measured strategy reads, semantic scores, trimming, the cost
// estimate). No upstream is called.
"use strict";
(function () {
  const { api, el, fill, pct, num, usd, say } = window.SY;
  const form = document.getElementById("explain-form");

  async function keys() {
    try {
      const k = await api("/admin/keys");
      const select = document.getElementById("x-key");
      select.replaceChildren(...k.data.map((x) => el("option", { value: x.name, text: x.name })));
      say(k.data.length ? "Pick a key and a model; nothing is sent upstream." : "No keys: make one first.");
    } catch (e) { say("Could not list keys: " + e.message, true); }
  }

  async function explain(ev) {
    ev.preventDefault();
    const body = {
      key: form.elements.key.value,
      model: form.elements.model.value.trim(),
      messages: [{ role: "user", content: form.elements.prompt.value }],
    };
    try {
      const plan = await api("/admin/route/explain", { method: "POST", body });
      document.getElementById("plan").hidden = false;
      const steps = plan.chain || [];
      const facts = [
        ["Requested", plan.requested_model], ["Chain", steps.map((s) => s.model).join(" → ")],
        ["Chain from", plan.source], ["Balance", plan.balance],
        ["Strategy", steps.map((s) => s.model + ": " + (s.strategy || "weighted") + (s.first_try ? " → " + s.first_try.channel + " (" + s.first_try.reason + ")" : "")).join("; ")],
        ["Worst-case cost", plan.spend ? usd(plan.spend.worst_case_micros) : "—"],
        ["Prompt tokens (estimate)", plan.spend ? String(plan.spend.prompt_tokens_estimate) : "—"],
        ["Trimming", steps.map((s) => s.context ? s.model + ": " + (s.context.action || "refused") + (s.context.prompt_tokens !== undefined ? " (" + s.context.prompt_tokens + " tokens of " + (s.context.context_window ?? "?") + ")" : "") : null).filter(Boolean).join("; ") || "fits as is (not trimmed)"],
      ];
      document.getElementById("plan-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v ?? "—" })]));
      const cands = steps.flatMap((s, i) => (s.candidates || []).map((c) => [i + 1, s.model, c]));
      fill("candidates", cands, ([i, m, c]) => [String(i), m, c.channel, String(c.tier),
        pct(c.first_try_share), num(c.health_score, 0), c.circuit,
        c.latency_ms !== undefined ? num(c.latency_ms, 1) : "—", c.in_flight !== undefined ? String(c.in_flight) : "—",
        c.estimated_cost_micros !== undefined ? usd(c.estimated_cost_micros) : "—"], "No candidate: nothing would serve it.");
      const excl = steps.flatMap((s, i) => (s.excluded || []).map((x) => [i + 1, x]));
      fill("excluded", excl, ([i, x]) => [String(i), x.channel, x.reason], "Nothing left out.");
      const scores = (plan.semantic || []).flatMap((d) => d.scores.map((sc) => [d, sc]));
      fill("scores", scores, ([d, sc]) => [d.router, sc.instance, num(sc.score, 3), d.winner === sc.instance ? "yes" : ""], "No semantic router decided.");
      document.getElementById("plan-json").textContent = JSON.stringify(plan, null, 2);
      say("Explained; no upstream was called.");
    } catch (e) { say("Could not explain: " + e.message, true); }
  }

  form.addEventListener("submit", explain);
  keys();
})();
