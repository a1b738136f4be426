// Direct uploads (docs/api.md, "Uploading"): each file goes part by part to
// URLs the API signs (the store's own with object storage: the bytes never
// pass through a web host), then one claim makes the files a batch. Any web
// host answers any of these requests.
//
// Resumable: each upload's id is kept in localStorage under the file's
// fingerprint (name, size, last modified). A page reloaded mid-upload that is
// given the same file again asks the API which parts the store has and sends
// only the others. A failed part is sent again (a lapsed URL is signed anew).
// At most PARALLEL_PARTS PUTs run at once for the whole page.
window.fairlaneUploader = (function () {
  const {csrf} = fairlane;
  const PARALLEL_PARTS = 4;
  const CREATE_BATCH = 500;  // files per create request (FAIRLANE_MAX_FILES_PER_REQUEST)
  const SIGN_BATCH = 32;  // part URLs asked for at a time
  const RETRIES = [0, 1000, 3000, 5000, 10000, 20000];
  const sleep = ms => new Promise(r => setTimeout(r, ms));

  class Refused extends Error {
    constructor(status, body) {
      super(body?.error?.message || `Refused (${status}).`);
      this.status = status; this.body = body;
    }
  }

  // The API, with retries for what may pass: no answer or a 5xx, a few
  // times; a request over the user's API rate (429 `throttled`) after the
  // Retry-After it names, as often as it takes (docs/api.md, "Limits"). Any
  // other 429 is a limit of the user's plan: said at once.
  async function api(method, url, body, headers = {}) {
    for (let attempt = 0; ; attempt++) {
      let resp;
      try {
        resp = await fetch(url, {method, body: body === undefined ? undefined : JSON.stringify(body),
          headers: {"X-CSRFToken": csrf, "Content-Type": "application/json", ...headers}});
      } catch (e) {
        if (attempt + 1 >= RETRIES.length) throw e;
        await sleep(RETRIES[attempt + 1]);
        continue;
      }
      const data = resp.status === 204 ? null : await resp.json().catch(() => null);
      if (resp.ok) return data;
      if (resp.status === 429 && data?.error?.code === "throttled") {
        await sleep(1000 * Math.max(1, Number(resp.headers.get("Retry-After")) || 1));
        attempt--;
        continue;
      }
      if (resp.status >= 500 && attempt + 1 < RETRIES.length) {
        await sleep(RETRIES[attempt + 1]);
        continue;
      }
      throw new Refused(resp.status, data);
    }
  }

  function limiter(n) {
    let active = 0;
    const waiting = [];
    return async fn => {
      while (active >= n) await new Promise(r => waiting.push(r));
      active++;
      try { return await fn(); } finally { active--; waiting.shift()?.(); }
    };
  }
  const slot = limiter(PARALLEL_PARTS);

  // One PUT; resolves when the store took the part. `onProgress(bytes)`.
  function put({url, headers}, blob, onProgress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("PUT", url);
      for (const [name, value] of Object.entries(headers || {})) xhr.setRequestHeader(name, value);
      xhr.upload.onprogress = e => onProgress(e.loaded);
      xhr.onload = () => (xhr.status >= 200 && xhr.status < 300 ? resolve() : reject(new Refused(xhr.status)));
      xhr.onerror = () => reject(new Refused(0));
      xhr.send(blob);
    });
  }

  const fingerprint = file => `fairlane-upload:${file.name}:${file.size}:${file.lastModified}`;

  // Sends the parts the store does not have yet, then completes the upload.
  async function transfer(file, upload, received, onProgress) {
    const urls = new Map((upload.urls || []).map(u => [u.number, u]));
    const count = upload.parts;
    const have = new Set(received.map(p => p.number));
    const sent = new Map(received.map(p => [p.number, p.size]));
    const report = () => onProgress([...sent.values()].reduce((a, b) => a + b, 0));
    report();
    const todo = [];
    for (let n = 1; n <= count; n++) if (!have.has(n)) todo.push(n);
    async function urlFor(n, fresh) {
      if (fresh || !urls.has(n)) {
        const batch = fresh ? [n] : todo.filter(m => m >= n && !urls.has(m)).slice(0, SIGN_BATCH);
        const data = await api("POST", `/api/uploads/direct/${upload.id}/parts/`, {parts: batch});
        for (const u of data.urls) urls.set(u.number, u);
      }
      return urls.get(n);
    }
    await Promise.all(todo.map(n => slot(async () => {
      const start = (n - 1) * upload.part_size;
      const blob = file.slice(start, Math.min(start + upload.part_size, file.size));
      for (let attempt = 0; ; attempt++) {
        try {
          await put(await urlFor(n, attempt > 0), blob, loaded => { sent.set(n, loaded); report(); });
          sent.set(n, blob.size); report();
          return;
        } catch (e) {
          if (e.status === 410 || attempt + 1 >= RETRIES.length) throw e;
          await sleep(RETRIES[attempt + 1]);
        }
      }
    })));
    // A file of one part is completed by the claim, with every other one in
    // a single listing of the store: one request for a 2,000-file drop, not
    // 2,000. A file of several parts is assembled here, once they are in.
    if (count > 1) await api("POST", "/api/uploads/direct/complete/", {uploads: [upload.id]});
  }

  // The uploads of `files` that a reload left unfinished (same fingerprint),
  // with the parts the store has; null for the others.
  async function resumable(files) {
    return Promise.all(files.map(async file => {
      const id = localStorage.getItem(fingerprint(file));
      if (!id) return null;
      try {
        const upload = await api("GET", `/api/uploads/direct/${id}/`);
        return upload.state === "expired" ? null : upload;
      } catch (e) {
        localStorage.removeItem(fingerprint(file));  // gone, expired or never ours: start again
        return null;
      }
    }));
  }

  // Uploads `files` and makes them one batch. `onProgress(i, bytes)` per
  // file. Returns the claim's answer (202 body); throws Refused.
  async function send(files, onProgress) {
    const found = await resumable(files);
    const fresh = files.map((f, i) => [f, i]).filter(([, i]) => !found[i]);
    for (let start = 0; start < fresh.length; start += CREATE_BATCH) {
      const chunk = fresh.slice(start, start + CREATE_BATCH);
      const data = await api("POST", "/api/uploads/direct/", {files: chunk.map(([f]) => (
        {filename: f.name, size: f.size, content_type: f.type}))});
      data.uploads.forEach((upload, k) => {
        const [file, i] = chunk[k];
        found[i] = {...upload, parts_received: []};
        localStorage.setItem(fingerprint(file), upload.id);
      });
    }
    await Promise.all(files.map((file, i) => found[i].state === "complete"
      ? onProgress(i, file.size)
      : transfer(file, found[i], found[i].parts_received, bytes => onProgress(i, bytes))));
    // One key for this batch: a retried claim (a dropped answer) creates nothing twice.
    const claimed = await api("POST", "/api/uploads/", {direct: found.map(u => u.id)},
                              {"Idempotency-Key": crypto.randomUUID()});
    files.forEach(file => localStorage.removeItem(fingerprint(file)));
    return claimed;
  }

  return {send, Refused};
})();
