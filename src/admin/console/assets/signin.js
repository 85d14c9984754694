// The demo's banner URL carries its admin token in the fragment (#token=…), which the browser
// never sends: fill it in, drop it from the address bar and history, and sign in.
"use strict";
(() => {
  const m = /^#token=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!m) return;
  history.replaceState(null, "", location.pathname + location.search);
  const field = document.getElementById("token");
  if (!field) return;
  field.value = m[1];
  field.form.requestSubmit();
})();
