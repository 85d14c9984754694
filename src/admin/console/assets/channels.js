// Channels: the config's channels joined with live health (score, circuit and time left,
// credentials by label) and the last hour's calls and error rate; create, edit, enable or
// disable and delete the store's channels (the file's are read-only).
"use strict";
(function () {
  const { api, el, fill, pct, say, isAdmin } = window.SY;
  const form = document.getElementById("channel-form");
  let editing = null;

  const modelNames = (c) => (c.models || []).map((m) => (typeof m === "string" ? m : m.name));

  function circuit(h) {
    if (!h) return "closed";
    const left = h.circuit_seconds_left;
    return h.circuit + (left ? " (" + Math.ceil(left) + " s left)" : "");
  }

  function credentials(h) {
    const list = (h && h.credentials) || [];
    if (!list.length) return "—";
    return el("ul", { class: "plain" }, list.map((c) => {
      const state = c.disabled ? "disabled" : c.cooling_seconds_left ? "cooling " + Math.ceil(c.cooling_seconds_left) + " s" : c.in_flight ? c.in_flight + " in flight" : "ready";
      return el("li", {}, el("span", { class: "label", text: c.label }), " ", el("span", { class: "state", text: state }));
    }));
  }

  function actions(c) {
    if (!isAdmin || c.source === "file") return c.source === "file" ? el("span", { class: "muted", text: "from the file" }) : "—";
    return el("div", { class: "row-actions" },
      el("button", { type: "button", text: "Edit", "aria-label": "Edit " + c.name, onclick: () => edit(c) }),
      el("button", { type: "button", text: c.enabled === false ? "Enable" : "Disable", "aria-label": (c.enabled === false ? "Enable " : "Disable ") + c.name, onclick: () => toggle(c) }),
      el("button", { type: "button", class: "danger", text: "Delete", "aria-label": "Delete " + c.name, onclick: () => remove(c) }));
  }

  async function load() {
    try {
      const [channels, health, stats] = await Promise.all([
        api("/admin/channels"), api("/admin/health"), api("/admin/stats?window=3600"),
      ]);
      const byName = new Map(health.data.map((h) => [h.channel, h]));
      const hour = new Map();
      for (const s of stats.series) {
        const t = hour.get(s.channel) || { calls: 0, errors: 0 };
        t.calls += s.total.calls; t.errors += s.total.errors;
        hour.set(s.channel, t);
      }
      const rows = channels.data.slice().sort((a, b) =>
        (modelNames(a)[0] || "").localeCompare(modelNames(b)[0] || "") || (a.priority || 0) - (b.priority || 0) || a.name.localeCompare(b.name));
      fill("channels", rows, (c) => {
        const h = byName.get(c.name);
        const t = hour.get(c.name) || { calls: 0, errors: 0 };
        return [
          el("td", {}, el("strong", { text: c.name }), c.enabled === false ? el("span", { class: "badge", text: "disabled" }) : null),
          modelNames(c).join(", "),
          String(c.priority || 0),
          c.provider,
          String(c.weight || 1),
          c.health ? Number(c.health.score).toFixed(0) : "—",
          el("td", { class: "circuit-" + ((h && h.circuit) || "closed") }, circuit(h)),
          credentials(h),
          String(t.calls),
          t.calls ? pct(t.errors / t.calls) : "—",
          c.source,
          actions(c),
        ];
      }, "No channels yet.");
      say("Updated " + new Date().toLocaleTimeString());
    } catch (e) {
      say("Could not load channels: " + e.message, true);
    }
  }

  function open(title) {
    document.getElementById("channel-form-title").textContent = title;
    form.hidden = false;
    form.querySelector("input,select").focus();
  }

  function edit(c) {
    editing = c.name;
    form.elements.name.value = c.name;
    form.elements.name.readOnly = true;
    form.elements.provider.value = c.provider;
    form.elements.base_url.value = c.base_url || "";
    form.elements.models.value = modelNames(c).join(", ");
    form.elements.api_keys.value = "";
    form.elements.priority.value = c.priority || 0;
    form.elements.weight.value = c.weight || 1;
    form.elements.enabled.checked = c.enabled !== false;
    open("Edit " + c.name);
  }

  async function toggle(c) {
    try {
      await api("/admin/channels/" + encodeURIComponent(c.name), { method: "PATCH", body: { enabled: c.enabled === false } });
      say((c.enabled === false ? "Enabled " : "Disabled ") + c.name);
      load();
    } catch (e) { say(e.message, true); }
  }

  async function remove(c) {
    if (!window.confirm("Delete channel " + c.name + "?")) return;
    try {
      await api("/admin/channels/" + encodeURIComponent(c.name), { method: "DELETE" });
      say("Deleted " + c.name);
      load();
    } catch (e) { say(e.message, true); }
  }

  const list = (v) => v.split(",").map((s) => s.trim()).filter(Boolean);

  async function save(ev) {
    ev.preventDefault();
    const f = form.elements;
    const body = {
      provider: f.provider.value,
      models: list(f.models.value),
      priority: Number(f.priority.value || 0),
      weight: Number(f.weight.value || 1),
      enabled: f.enabled.checked,
    };
    if (f.base_url.value) body.base_url = f.base_url.value;
    if (f.api_keys.value) body.api_keys = list(f.api_keys.value);
    try {
      if (editing) {
        await api("/admin/channels/" + encodeURIComponent(editing), { method: "PATCH", body });
      } else {
        body.name = f.name.value.trim();
        await api("/admin/channels", { method: "POST", body });
      }
      say("Saved " + (editing || body.name));
      form.hidden = true;
      form.reset();
      editing = null;
      load();
    } catch (e) { say("Not saved: " + e.message, true); }
  }

  if (form) {
    form.addEventListener("submit", save);
    document.getElementById("new-channel").addEventListener("click", () => {
      editing = null; form.reset(); form.elements.name.readOnly = false; open("New channel");
    });
    document.getElementById("channel-cancel").addEventListener("click", () => { form.hidden = true; editing = null; });
  }
  load();
  setInterval(load, 10000);
})();
