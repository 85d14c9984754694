// Keys: the gateway keys with their groups, limits, budget and spend to date; create (the
// secret shown once, with a copy button), edit and revoke the store's keys.
"use strict";
(function () {
  const { api, el, fill, usd, say, isAdmin } = window.SY;
  const form = document.getElementById("key-form");
  let editing = null;

  function limits(k) {
    const parts = [];
    if (k.rpm) parts.push(k.rpm + " rpm");
    if (k.tpm) parts.push(k.tpm + " tpm");
    if (k.max_concurrency) parts.push(k.max_concurrency + " at once");
    return parts.join(", ") || "—";
  }

  function actions(k) {
    if (!isAdmin) return "—";
    if (k.source === "file") return el("span", { class: "muted", text: "from the file" });
    return el("div", { class: "row-actions" },
      el("button", { type: "button", text: "Edit", "aria-label": "Edit " + k.name, onclick: () => edit(k) }),
      el("button", { type: "button", class: "danger", text: "Revoke", "aria-label": "Revoke " + k.name, onclick: () => revoke(k) }));
  }

  async function load() {
    try {
      const [keys, spend] = await Promise.all([
        api("/admin/keys"), api("/admin/usage?group_by=key&from=0"),
      ]);
      const spent = new Map(spend.rows.map((r) => [r.key, r.cost_micros]));
      fill("keys", keys.data, (k) => [
        el("td", {}, el("strong", { text: k.name })),
        (k.groups || []).join(", ") || "every channel",
        limits(k),
        k.budget ? "$" + k.budget.usd + " / " + (k.budget.period || "month") : "—",
        usd(spent.get(k.name) || 0),
        k.expires_at || "never",
        k.source,
        actions(k),
      ], "No keys yet.");
      say("Updated " + new Date().toLocaleTimeString());
    } catch (e) {
      say("Could not load keys: " + e.message, true);
    }
  }

  function edit(k) {
    editing = k.name;
    const f = form.elements;
    f.name.value = k.name;
    f.name.readOnly = true;
    f.groups.value = (k.groups || []).join(", ");
    f.rpm.value = k.rpm || "";
    f.budget.value = k.budget ? k.budget.usd : "";
    document.getElementById("key-form-title").textContent = "Edit " + k.name;
    form.hidden = false;
    f.groups.focus();
  }

  async function revoke(k) {
    if (!window.confirm("Revoke key " + k.name + "? Requests with it are refused at once.")) return;
    try {
      await api("/admin/keys/" + encodeURIComponent(k.name), { method: "DELETE" });
      say("Revoked " + k.name);
      load();
    } catch (e) { say(e.message, true); }
  }

  async function save(ev) {
    ev.preventDefault();
    const f = form.elements;
    const body = { groups: f.groups.value.split(",").map((s) => s.trim()).filter(Boolean) };
    body.rpm = f.rpm.value ? Number(f.rpm.value) : null;
    body.budget = f.budget.value ? { usd: Number(f.budget.value), period: "month" } : null;
    try {
      if (editing) {
        await api("/admin/keys/" + encodeURIComponent(editing), { method: "PATCH", body });
        say("Saved " + editing);
      } else {
        body.name = f.name.value.trim();
        if (body.rpm === null) delete body.rpm;
        if (body.budget === null) delete body.budget;
        const made = await api("/admin/keys", { method: "POST", body });
        const box = document.getElementById("secret");
        document.getElementById("secret-value").value = made.key || "";
        box.hidden = false;
        document.getElementById("secret-value").focus();
        say("Created " + body.name + ": copy its key now, it is not shown again");
      }
      form.hidden = true;
      form.reset();
      editing = null;
      load();
    } catch (e) { say("Not saved: " + e.message, true); }
  }

  async function copy() {
    const input = document.getElementById("secret-value");
    try {
      await navigator.clipboard.writeText(input.value);
      say("Copied");
    } catch (_) {
      input.select();
      say("Selected: press Ctrl+C to copy");
    }
  }

  if (form) {
    form.addEventListener("submit", save);
    document.getElementById("new-key").addEventListener("click", () => {
      editing = null; form.reset(); form.elements.name.readOnly = false;
      document.getElementById("key-form-title").textContent = "New key";
      form.hidden = false; form.elements.name.focus();
    });
    document.getElementById("key-cancel").addEventListener("click", () => { form.hidden = true; editing = null; });
    document.getElementById("copy-secret").addEventListener("click", copy);
  }
  load();
})();
