// What the site's pages share: the CSRF token, table cells, action buttons,
// the one way they ask the API to do something, and how they write times.
window.fairlane = (function () {
  const csrf = document.cookie.split("; ").find(c => c.startsWith("csrftoken="))?.split("=")[1];
  function cell(text, className) {
    const td = document.createElement("td"); td.textContent = text;
    if (className) td.className = className;
    return td;
  }
  // The row a table shows when it has none: what that means, in words.
  function emptyRow(columns, text) {
    const td = cell(text, "empty"); td.colSpan = columns;
    const tr = document.createElement("tr"); tr.appendChild(td);
    return tr;
  }
  function button(label, className, action) {
    const b = document.createElement("button");
    b.type = "button"; b.textContent = label; b.className = className;
    b.addEventListener("click", action);
    return b;
  }
  // A request that changes something (POST, PATCH, DELETE; a JSON body when
  // given); a refusal is shown with the API's message. Returns the answer's
  // JSON body ({} when it has none), or null when refused.
  async function send(method, url, body) {
    const headers = {"X-CSRFToken": csrf};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const resp = await fetch(url, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
    const data = await resp.json().catch(() => ({}));
    if (!resp.ok && resp.status !== 404) {
      alert(data?.error?.message || `Refused (${resp.status}).`);
      return null;
    }
    return data;
  }
  // POST or DELETE on the API. Returns whether it was done.
  async function act(method, url) { return (await send(method, url)) !== null; }
  // A duration as people say it: "850 ms", "4.2 s", "42 s", "3 min 0 s",
  // "1 h 2 min" (uploads/facts.py writes the job page's the same way).
  function duration(ms) {
    if (ms == null) return "";
    if (ms < 1000) return `${Math.round(ms)} ms`;
    if (ms < 10000) return `${(ms / 1000).toFixed(1)} s`;
    const s = Math.round(ms / 1000);
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor(s / 60) % 60} min`;
  }
  const number = n => n.toLocaleString("en");
  // Decimal units, as uploads/facts.py's bytes_text.
  function bytes(n) {
    for (const [unit, scale] of [["GB", 1e9], ["MB", 1e6], ["kB", 1e3]]) if (n >= scale) return `${(n / scale).toFixed(1)} ${unit}`;
    return `${n} bytes`;
  }
  return {csrf, cell, emptyRow, button, send, act, duration, number, bytes};
})();
