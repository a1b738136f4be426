// What the site's pages share: the CSRF token, table cells, action buttons
// and the one way they ask the API to do something.
window.fairlane = (function () {
  const csrf = document.cookie.split("; ").find(c => c.startsWith("csrftoken="))?.split("=")[1];
  function cell(text) { const td = document.createElement("td"); td.textContent = text; return td; }
  function button(label, className, action) {
    const b = document.createElement("button");
    b.type = "button"; b.textContent = label; b.className = className;
    b.addEventListener("click", action);
    return b;
  }
  // POST or DELETE on the API; a refusal is shown with the API's message.
  // Returns whether it was done.
  async function act(method, url) {
    const resp = await fetch(url, {method, headers: {"X-CSRFToken": csrf}});
    if (!resp.ok && resp.status !== 404) {
      const body = await resp.json().catch(() => null);
      alert(body?.error?.message || `Refused (${resp.status}).`);
      return false;
    }
    return true;
  }
  return {csrf, cell, button, act};
})();
