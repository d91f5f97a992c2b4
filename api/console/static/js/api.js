// The console's one way to the JSON API. The session is a cookie the page cannot read (HttpOnly);
// the CSRF token that every write carries lives in this module's memory only — never in web
// storage, never in a URL. The project an admin works in is a preference (no secret): kept in
// sessionStorage so it survives moving between pages of one tab.

export const COMPUTE = "/api/compute";
const PROJECT_KEY = "gpuprov.console.project";
let session = null;
const signedOutListeners = [];

export class ApiError extends Error {
  constructor(status, detail, errors) {
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.errors = errors || [];
  }
}

export function currentSession() { return session; }

export function project() {
  if (!session) return null;
  return session.admin ? (sessionStorage.getItem(PROJECT_KEY) || "default") : session.project;
}

export function setProject(name) { sessionStorage.setItem(PROJECT_KEY, name); }

export function onSignedOut(fn) { signedOutListeners.push(fn); }

async function reason(response) {
  try {
    const body = await response.json();  // ErrorOut: `detail` says why (a 422's sums up its fields)
    return new ApiError(response.status, body.detail, body.errors);
  } catch {
    return new ApiError(response.status, `HTTP ${response.status}`);
  }
}

// `path` is the API path (/api/compute/...); `body` is sent as JSON. Resolves to the parsed JSON
// (or null for 204); rejects with an ApiError that carries the API's `detail`.
export async function api(method, path, body, { raw = false, signal } = {}) {
  const headers = { Accept: raw ? "text/plain" : "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (session && method !== "GET") headers["X-CSRF-Token"] = session.csrf_token;
  if (session && session.admin) headers["X-Project"] = project();
  const response = await fetch(path, {
    method, headers, credentials: "same-origin", signal,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401 && session) {
    session = null;
    signedOutListeners.forEach((fn) => fn());
  }
  if (!response.ok) throw await reason(response);
  if (raw) return response;
  return response.status === 204 ? null : response.json();
}

// A path under /api/compute (or any /api/ path given whole).
const url = (path) => (path.startsWith("/api/") ? path : COMPUTE + path);
export const get = (path) => api("GET", url(path));
export const send = (method, path, body) => api(method, url(path), body);

// The first `count` pages of a paginated list (the API answers {items, next_cursor}): their items,
// whether more follow, and the first page as answered (a list's extras, e.g. the queue's counts).
export async function pages(path, count = Infinity, limit = 200) {
  const items = [];
  let cursor = null;
  let first = null;
  let read = 0;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const page = await get(`${path}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    first = first || page;
    items.push(...page.items);
    cursor = page.next_cursor;
    read += 1;
  } while (cursor && read < count);
  return { items, more: Boolean(cursor), first };
}

// Every page of a short list (connections, the catalog). A list that grows with the fleet is read
// a page at a time instead (`pages`): a live view re-reads what it shows every few seconds.
export async function all(path, limit = 200) {
  return (await pages(path, Infinity, limit)).items;
}

export async function loadSession() {
  const response = await fetch("/api/console/session", { credentials: "same-origin", headers: { Accept: "application/json" } });
  session = response.ok ? await response.json() : null;
  return session;
}

// The token goes once, in the Authorization header of this one request; the page keeps nothing of it.
export async function signIn(token) {
  const response = await fetch("/api/console/session", {
    method: "POST", credentials: "same-origin",
    headers: { Accept: "application/json", Authorization: `Bearer ${token}` },
  });
  if (!response.ok) throw await reason(response);
  session = await response.json();
  return session;
}

export async function signOut() {
  await fetch("/api/console/session", { method: "DELETE", credentials: "same-origin" });
  session = null;
  sessionStorage.removeItem(PROJECT_KEY);
}
