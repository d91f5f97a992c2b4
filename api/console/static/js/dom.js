// Building the page: every string becomes a text node (never HTML), so a name a user typed can
// only ever show as text. Nothing in the console parses a string as markup (tests/api/test_console_pages.py).

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "on") for (const [event, fn] of Object.entries(value)) el.addEventListener(event, fn);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "value" || key === "checked" || key === "disabled") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// A live table's rows, by key: a row that would render the same as it did stays the same element,
// where it was; only new, changed and gone rows are touched. Replacing every row at each refresh lost
// a click whose press came before a refresh and its release after (the pressed row was gone), and
// moved the keyboard's place. Rows are compared as built (isEqualNode), not by their items: an item
// also carries what its row does not show and what changes at every refresh (an instance's uptime).
// `empty()`, if given, makes the row shown when there are no items.
const builtAs = new WeakMap(); // row element -> { key, copy: the row as it was built }
export function keyedRows(el, items, key, build, empty) {
  const old = new Map([...el.children].filter((c) => builtAs.has(c)).map((c) => [builtAs.get(c).key, c]));
  const rows = items.length ? items.map((item) => {
    const k = String(key(item));
    const row = build(item);
    const kept = old.get(k);
    if (kept && builtAs.get(kept).copy.isEqualNode(row)) return kept;
    builtAs.set(row, { key: k, copy: row.cloneNode(true) });
    return row;
  }) : [empty?.()].filter(Boolean);
  const wanted = new Set(rows);
  for (const child of [...el.children]) if (!wanted.has(child)) child.remove();
  rows.forEach((row, i) => { if (el.children[i] !== row) el.insertBefore(row, el.children[i] ?? null); });
  return el;
}

// Times in the viewer's own zone and locale (the browser's), never the server's.
const when = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const day = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", timeZone: "UTC" });

export const fmt = {
  time: (iso) => (iso ? when.format(new Date(iso)) : "—"),
  // a spend day is a UTC calendar date (YYYY-MM-DD): shown as that date, not shifted by the zone
  day: (date) => day.format(new Date(date + "T00:00:00Z")),
  money: (n) => (n === null || n === undefined ? "—" : `$${Number(n).toFixed(2)}`),
  perHour: (n) => (n === null || n === undefined ? "—" : `$${Number(n).toFixed(2)}/hr`),
  duration(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
    return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  },
};

// A status dot with its word beside it (colour is never the only signal).
export function dot(tone, label, title) {
  return h("span", { class: `status status-${tone}`, title },
    h("span", { class: "dot", "aria-hidden": "true" }), label);
}

// A confirmation in a real <dialog>: it says what will happen; Enter/Escape work from the keyboard.
export function confirmDialog(title, text, action) {
  return new Promise((resolve) => {
    const dialog = h("dialog", { class: "confirm", "aria-label": title },
      h("h2", {}, title), h("p", {}, text),
      h("form", { method: "dialog", class: "actions" },
        h("button", { value: "cancel", class: "secondary" }, "Cancel"),
        h("button", { value: "ok", class: "danger", autofocus: true }, action)));
    dialog.addEventListener("close", () => { dialog.remove(); resolve(dialog.returnValue === "ok"); });
    document.body.appendChild(dialog);
    dialog.showModal();
  });
}

// Polls `fn` every `ms` while the tab is visible (and at once when it comes back): the pages stay
// live without a reload. Returns a stop function.
export function live(fn, ms) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    timer = null;
    if (stopped) return;
    if (!document.hidden) {
      try { await fn(); } catch (e) { console.warn("refresh failed:", e.message || e); }
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  const onVisible = () => { if (!document.hidden && timer !== null) { clearTimeout(timer); tick(); } };
  document.addEventListener("visibilitychange", onVisible);
  tick();
  return () => { stopped = true; if (timer) clearTimeout(timer); document.removeEventListener("visibilitychange", onVisible); };
}

// "Show N more" under a live table of a paginated list: the table shows `pages` pages of `size`
// rows (its refresh re-reads those, never the whole list) and each click adds one. After each
// render, `rendered(more, rows)` shows the button while more follow; when the page a click asked
// for was the last, the button goes and the keyboard's place moves to that page's first row
// (`focusRow`). `refresh` must not render a refresh begun before it (a sequence number does).
export function showMore({ id, size, refresh, focusRow, onError, note }) {
  let shown = 1;
  let addedAt = null; // the first row of the page a click asked for, until a render shows it
  const button = h("button", { class: "secondary", type: "button", id, on: { click: async () => {
    addedAt = shown * size;
    shown += 1;
    button.disabled = true;
    try { await refresh(); } catch (err) { onError(err); }
    button.disabled = false;
  } } }, `Show ${size} more`);
  return {
    foot: h("p", { class: "table-foot", hidden: true }, note ? h("span", { class: "muted" }, note) : null, button),
    get pages() { return shown; },
    reset() { shown = 1; addedAt = null; },
    rendered(more, rows) {
      this.foot.hidden = !more;
      if (addedAt !== null && !more && rows[addedAt]) focusRow(rows[addedAt]);
      addedAt = null;
    },
  };
}

export function errorBox(message) {
  return h("p", { class: "error", role: "alert" }, message);
}

// One error at a time in a place a refresh keeps (a row keyedRows keeps): `show(err, put)` replaces
// the one shown before, `put(box)` placing the new one; `clear()` takes it away.
export function latestError() {
  let shown = null;
  return {
    show(err, put) { shown?.remove(); shown = errorBox(err.message); put(shown); },
    clear() { shown?.remove(); shown = null; },
  };
}
