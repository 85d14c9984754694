// Audit and events: admin changes, routing events, each webhook with its delivery log and a
// "send test" button (admins).
"use strict";
(function () {
  const { api, el, fill, time, say, isAdmin } = window.SY;

  const short = (v) => {
    const s = typeof v === "string" ? v : JSON.stringify(v);
    return s && s.length > 160 ? s.slice(0, 157) + "…" : s;
  };

  // What an event is about: its channel, key or model, whichever it names.
  const subject = (d) => (d && (d.channel || d.key || d.requested_model || d.webhook || d.router)) || "—";

  async function hooks() {
    const box = document.getElementById("webhooks");
    const list = await api("/admin/webhooks");
    if (!list.data.length) { box.replaceChildren(el("p", { class: "empty", text: "No webhooks configured." })); return; }
    const parts = [];
    for (const w of list.data) {
      const id = "deliveries-" + w.name.replace(/[^a-zA-Z0-9_-]/g, "_");
      const head = el("h3", { text: w.name + (w.enabled === false ? " (disabled)" : "") });
      const send = isAdmin ? el("button", { type: "button", text: "Send test", "aria-label": "Send a test event to " + w.name, onclick: () => test(w.name) }) : null;
      const table = el("table", { id },
        el("caption", { text: "Deliveries to " + w.name }),
        el("thead", {}, el("tr", {}, ["Time", "Event", "Attempt", "Status", "Outcome"].map((c) => el("th", { scope: "col", text: c })))),
        el("tbody"));
      parts.push(el("div", { class: "hook" }, head, el("p", { class: "muted", text: w.url || "" }), send, el("div", { class: "scroll" }, table)));
    }
    box.replaceChildren(...parts);
    for (const w of list.data) {
      const id = "deliveries-" + w.name.replace(/[^a-zA-Z0-9_-]/g, "_");
      try {
        const d = await api("/admin/webhooks/" + encodeURIComponent(w.name) + "/deliveries");
        fill(id, d.data, (r) => [time(r.ts_ms), r.event_type, String(r.attempt), r.status ? String(r.status) : (r.error || "—"), r.state], "No deliveries yet.");
      } catch (e) { fill(id, [], () => [], e.message); }
    }
  }

  async function test(name) {
    try {
      await api("/admin/webhooks/" + encodeURIComponent(name) + "/test", { method: "POST" });
      say("Test event queued for " + name);
      setTimeout(load, 1500);
    } catch (e) { say(e.message, true); }
  }

  async function load() {
    try {
      const [audit, events] = await Promise.all([api("/admin/audit"), api("/admin/events")]);
      fill("audit-log", audit.data, (r) => [time(r.ts_ms), r.admin, r.action, r.kind + "/" + r.name, short(r.diff)], "No admin changes yet.");
      fill("events", events.data, (e) => [time(Date.parse(e.timestamp)), e.type, subject(e.data), short(e.data)], "No events yet.");
      await hooks();
      say("Updated " + new Date().toLocaleTimeString());
    } catch (e) { say("Could not load: " + e.message, true); }
  }

  load();
})();
