// The Policies view: one card per policy (switch, name, "Triggered N times · last: …", Edit, When →
// Then, max spend and cooldown) and the form that creates or edits one. Each enabled policy is a
// Temporal Schedule on the server: saving the card saves its Schedule, the switch pauses it.
import { all, send } from "./api.js";
import { confirmDialog, errorBox, fmt, h, live, replace } from "./dom.js";

const GROUPS = [["sft", "SFT"], ["grpo", "GRPO"], ["eval", "EVAL"], ["synthetic", "SYNTHETIC"]];
const GROUP_NAME = Object.fromEntries(GROUPS);
const group = { k: "type", label: "Queue", options: GROUPS };
const pool = { k: "pool", label: "Pool", list: "pf-pools", placeholder: "e.g. training-a100" };

// The form's fields for each kind (messages/policy.py's When and Then unions).
const WHEN = {
  queue_wait: { label: "Queue wait", fields: [group, { k: "minutes", label: "Oldest queued job has waited longer than (minutes)", num: "int", min: 1 }] },
  queue_depth: { label: "Queue depth", fields: [group, { k: "n", label: "At least this many jobs are queued", num: "int", min: 1 }] },
  pool_utilisation: { label: "Pool utilisation", fields: [pool,
    { k: "direction", label: "Utilisation is", options: [["above", "above"], ["below", "below"]] },
    { k: "percent", label: "Percent (busy machines / ready machines)", num: "float", min: 0, max: 100 }] },
  idle: { label: "Idle machine", fields: [{ k: "minutes", label: "A machine has been idle longer than (minutes)", num: "int", min: 1 }] },
  spend: { label: "Spend", fields: [{ k: "window", label: "Over the last (30m, 1h, 24h, 7d …)", placeholder: "1h" },
    { k: "usd", label: "Spend is over ($)", num: "float", min: 0 }] },
  cron: { label: "Cron schedule", fields: [{ k: "expression", label: "Cron expression (minute hour day-of-month month day-of-week, or @daily …)", placeholder: "0 * * * *" }] },
};
const THEN = {
  scale_pool: { label: "Scale a pool", fields: [pool,
    { k: "mode", label: "How", options: [["to", "set its size to"], ["by", "change its size by"]] },
    { k: "amount", label: "Machines", num: "int" }] },
  terminate_idle: { label: "Terminate idle machines", fields: [{ k: "minutes", label: "Idle longer than (minutes)", num: "int", min: 1 },
    { k: "include_manual", label: "Also machines allocated by hand", check: true }] },
  pause_queue: { label: "Pause a queue", fields: [group] },
  webhook: { label: "Call a webhook", fields: [{ k: "url", label: "URL (under the server's webhook allowlist)", placeholder: "https://hooks.example.com/…" }] },
};

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

export function whenWords(w) {
  switch (w.kind) {
    case "queue_wait": return `the oldest queued ${GROUP_NAME[w.type] || w.type} job has waited over ${plural(w.minutes, "minute")}`;
    case "queue_depth": return `at least ${plural(w.n, "job")} are queued in ${GROUP_NAME[w.type] || w.type}`;
    case "pool_utilisation": return `pool ${w.pool} is ${w.direction} ${w.percent}% utilised`;
    case "idle": return `a machine has been idle over ${plural(w.minutes, "minute")}`;
    case "spend": return `spend over the last ${w.window} is over ${fmt.money(w.usd)}`;
    case "cron": return `on the schedule ${w.expression}`;
    default: return w.kind;
  }
}

export function thenWords(t) {
  switch (t.kind) {
    case "scale_pool":
      if (t.to !== null && t.to !== undefined) return `scale pool ${t.pool} to ${plural(t.to, "machine")}`;
      return `${t.by > 0 ? "grow" : "shrink"} pool ${t.pool} by ${plural(Math.abs(t.by), "machine")}`;
    case "terminate_idle": return `terminate machines idle over ${plural(t.minutes, "minute")}${t.include_manual ? ", hand-allocated ones too" : ""}`;
    case "pause_queue": return `pause the ${GROUP_NAME[t.type] || t.type} queue`;
    case "webhook": return `POST to ${t.url}`;
    default: return t.kind;
  }
}

// What PUT /policies/{id} takes back: the card as the API showed it (a webhook's hidden query included).
const cardBody = (p, enabled = p.enabled) => ({ name: p.name, enabled, when: p.when, then: p.then,
  max_spend_per_hour: p.max_spend_per_hour, cooldown_minutes: p.cooldown_minutes });

// ------------------------------------------------------------------------------------------ card

function policyCard(p, { onEdit, onSaved }) {
  const nameId = `policy-name-${p.id}`;
  const input = h("input", { type: "checkbox", id: `policy-enabled-${p.id}`, "aria-label": "Enabled",
    "aria-describedby": nameId, dataset: { role: "switch" } });
  const name = h("div", { class: "name", id: nameId });
  const triggered = h("div", { class: "muted", dataset: { role: "triggered" } });
  const when = h("span", { dataset: { role: "when" } });
  const then = h("span", { dataset: { role: "then" } });
  const limits = h("div", { class: "muted policy-limits", dataset: { role: "limits" } });
  const result = h("div", { class: "muted", dataset: { role: "last-result" } });
  const status = h("div", { "aria-live": "polite", dataset: { role: "status" } });
  const edit = h("button", { class: "secondary", dataset: { role: "edit" } }, "Edit");
  const el = h("article", { class: "card policy", dataset: { policy: p.id } },
    h("div", { class: "policy-head" },
      h("label", { class: "switch", title: "Enabled" }, input, h("span", { "aria-hidden": "true" })),
      h("div", { class: "grow" }, name, triggered), edit),
    h("div", { class: "when-then" },
      h("div", {}, h("span", { class: "tag" }, "When"), " ", when),
      h("span", { class: "arrow", "aria-hidden": "true" }, "→"),
      h("div", {}, h("span", { class: "tag" }, "Then"), " ", then)),
    limits, result, status);
  const card = { el, policy: p, pending: false };

  card.update = (q) => {
    card.policy = q;
    if (!card.pending) input.checked = q.enabled;
    el.dataset.enabled = String(q.enabled);
    name.textContent = q.name;
    edit.setAttribute("aria-label", `Edit ${q.name}`);
    triggered.textContent = `Triggered ${plural(q.trigger_count, "time")} · last: ${q.last_triggered_at ? fmt.time(q.last_triggered_at) : "never"}`
      + (q.enabled ? "" : " · disabled (its Schedule is paused)");
    when.textContent = whenWords(q.when);
    then.textContent = thenWords(q.then);
    const parts = [];
    if (q.max_spend_per_hour !== null && q.max_spend_per_hour !== undefined) parts.push(`Max spend ${fmt.perHour(q.max_spend_per_hour)}`);
    if (q.cooldown_minutes !== null && q.cooldown_minutes !== undefined) parts.push(`Cooldown ${plural(q.cooldown_minutes, "minute")}`);
    limits.textContent = parts.join(" · ");
    limits.hidden = parts.length === 0;
    result.textContent = q.last_result ? `Last run ${fmt.time(q.last_evaluated_at)}: ${q.last_result}` : "";
    result.hidden = !q.last_result;
  };

  // The switch: PUT the whole card with `enabled` flipped (the server pauses or resumes its Schedule).
  input.addEventListener("change", async () => {
    if (card.pending) return;
    const wanted = input.checked;
    card.pending = true;
    el.setAttribute("aria-busy", "true");
    replace(status, h("span", { class: "muted" }, wanted ? "Enabling…" : "Disabling…"));
    try {
      const saved = await send("PUT", `/policies/${encodeURIComponent(card.policy.id)}`, cardBody(card.policy, wanted));
      card.pending = false;
      replace(status);
      card.update(saved);
      onSaved();
    } catch (err) {
      card.pending = false;
      input.checked = card.policy.enabled;
      replace(status, errorBox(err.message));
    } finally {
      el.removeAttribute("aria-busy");
    }
  });
  edit.addEventListener("click", () => onEdit(card));
  card.update(p);
  return card;
}

// ------------------------------------------------------------------------------------------ form

function fieldControl(side, kind, f) {
  const id = `pf-${side}-${kind}-${f.k}`;
  if (f.check) {
    return h("label", { class: "inline", for: id }, h("input", { type: "checkbox", id, dataset: { field: f.k } }), f.label);
  }
  const control = f.options
    ? h("select", { id, dataset: { field: f.k } }, f.options.map(([v, label]) => h("option", { value: v }, label)))
    : h("input", { id, dataset: { field: f.k }, type: f.num ? "number" : "text", autocomplete: "off", spellcheck: "false",
      step: f.num === "float" ? "any" : f.num ? "1" : undefined, min: f.min, max: f.max, inputmode: f.num === "int" ? "numeric" : undefined,
      list: f.list, placeholder: f.placeholder, required: true });
  return h("div", { class: "field" }, h("label", { for: id }, f.label), control);
}

// One side (When or Then): a kind <select> and a fieldset per kind; only the picked one is shown and
// enabled, the others keep what was typed in them.
function side(name, title, kinds, current) {
  const select = h("select", { id: `pf-${name}-kind` },
    Object.entries(kinds).map(([k, spec]) => h("option", { value: k }, spec.label)));
  const sets = Object.fromEntries(Object.entries(kinds).map(([k, spec]) => [k,
    h("fieldset", { id: `pf-${name}-${k}`, class: "kind-fields", dataset: { kind: k } },
      h("legend", { class: "muted" }, spec.label), spec.fields.map((f) => fieldControl(name, k, f)))]));
  const show = () => Object.entries(sets).forEach(([k, set]) => { set.hidden = k !== select.value; set.disabled = k !== select.value; });
  select.addEventListener("change", show);
  if (current) {
    select.value = current.kind;
    const set = sets[current.kind];
    const values = { ...current };
    if (current.kind === "scale_pool") Object.assign(values, current.to !== null && current.to !== undefined
      ? { mode: "to", amount: current.to } : { mode: "by", amount: current.by });
    for (const control of set.querySelectorAll("[data-field]")) {
      const v = values[control.dataset.field];
      if (control.type === "checkbox") control.checked = Boolean(v);
      else if (v !== null && v !== undefined) control.value = String(v);
    }
  }
  show();
  const read = () => {
    const kind = select.value;
    const out = { kind };
    for (const control of sets[kind].querySelectorAll("[data-field]")) {
      const f = kinds[kind].fields.find((x) => x.k === control.dataset.field);
      if (f.check) out[f.k] = control.checked;
      else if (f.num) { if (control.value.trim() !== "") out[f.k] = Number(control.value); }
      else out[f.k] = control.value.trim();
    }
    if (kind === "scale_pool") { out[out.mode] = out.amount; delete out.mode; delete out.amount; }
    return out;
  };
  return { el: h("div", { class: "side" }, h("label", { for: `pf-${name}-kind` }, title), select, Object.values(sets)), read };
}

// Where a 422's field error belongs: ["body","when","cron","expression"] → #pf-when-cron-expression.
function controlFor(form, loc) {
  const parts = (loc || []).filter((p) => p !== "body");
  const top = { name: "pf-name", max_spend_per_hour: "pf-max-spend", cooldown_minutes: "pf-cooldown", enabled: null };
  if (parts.length === 1 && top[parts[0]]) return form.querySelector(`#${top[parts[0]]}`);
  const [which, kind, field] = parts;
  if ((which === "when" || which === "then") && kind && field) {
    const key = which === "then" && kind === "scale_pool" && (field === "to" || field === "by") ? "amount" : field;
    return form.querySelector(`#pf-${which}-${kind}-${key}`);
  }
  if ((which === "when" || which === "then") && kind) return form.querySelector(`#pf-${which}-${kind}`);
  if (which === "when" || which === "then") return form.querySelector(`#pf-${which}-kind`);
  return null;
}

function showErrors(form, status, err) {
  form.querySelectorAll(".field-error").forEach((e) => e.remove());
  form.querySelectorAll("[aria-invalid]").forEach((e) => { e.removeAttribute("aria-invalid"); e.removeAttribute("aria-errormessage"); });
  const fields = (err.errors || []).map((e) => ({ where: (e.loc || []).filter((p) => p !== "body").join("."), msg: e.msg, loc: e.loc }));
  replace(status, errorBox(fields.length ? `Not saved: ${fields.map((f) => (f.where ? `${f.where}: ${f.msg}` : f.msg)).join("; ")}` : `Not saved: ${err.message}`));
  let first = null;
  fields.forEach((f, i) => {
    const control = controlFor(form, f.loc);
    if (!control) return;
    const id = `pf-error-${i}`;
    const note = h("p", { class: "error field-error", id }, f.msg);
    if (control.tagName === "FIELDSET") control.appendChild(note);
    else {
      control.setAttribute("aria-invalid", "true");
      control.setAttribute("aria-errormessage", id);
      (control.closest(".field") || control.parentElement).appendChild(note);
      first = first || control;
    }
  });
  if (first) first.focus();
}

function policyForm(policy, { pools, onClose, onDeleted }) {
  const editing = Boolean(policy);
  const when = side("when", "When", WHEN, policy && policy.when);
  const then = side("then", "Then", THEN, policy && policy.then);
  const name = h("input", { id: "pf-name", required: true, autocomplete: "off", value: policy ? policy.name : "" });
  const number = (id, value, step, min) => h("input", { id, type: "number", step, min, value: value === null || value === undefined ? "" : String(value) });
  const maxSpend = number("pf-max-spend", policy && policy.max_spend_per_hour, "any", "0");
  const cooldown = number("pf-cooldown", policy && policy.cooldown_minutes, "1", "1");
  const status = h("div", { id: "pf-status", "aria-live": "polite" });
  const save = h("button", { type: "submit", id: "pf-save" }, "Save");
  const cancel = h("button", { type: "button", class: "secondary", id: "pf-cancel", on: { click: () => onClose(false) } }, "Cancel");
  const optional = (control) => (control.value.trim() === "" ? null : Number(control.value));

  const del = editing ? h("button", { type: "button", class: "danger", id: "pf-delete", on: { click: async () => {
    const ok = await confirmDialog(`Delete ${policy.name}?`,
      `The policy "${policy.name}" is deleted, and its Temporal Schedule (${policy.schedule_id}) is deleted too: it will not run again.`, "Delete");
    if (!ok) return;
    del.disabled = true; save.disabled = true;
    del.textContent = "Deleting…";
    try {
      await send("DELETE", `/policies/${encodeURIComponent(policy.id)}`);
      onDeleted(policy.id);
    } catch (err) {
      replace(status, errorBox(`Not deleted: ${err.message}`));
      del.disabled = false; save.disabled = false;
      del.textContent = "Delete";
    }
  } } }, "Delete") : null;

  const form = h("form", { class: "card policy-form", id: "policy-form", dataset: { editing: editing ? policy.id : "" },
    "aria-labelledby": "pf-title", novalidate: true, on: { submit: async (e) => {
      e.preventDefault();
      const body = { name: name.value.trim(), enabled: editing ? policy.enabled : true, when: when.read(), then: then.read(),
        max_spend_per_hour: optional(maxSpend), cooldown_minutes: optional(cooldown) };
      save.disabled = true;
      save.textContent = "Saving…";
      replace(status, h("span", { class: "muted" }, editing ? "Saving the policy and its Schedule…" : "Creating the policy and its Schedule…"));
      try {
        const saved = editing
          ? await send("PUT", `/policies/${encodeURIComponent(policy.id)}`, body)
          : await send("POST", "/policies", body);
        onClose(true, saved);
      } catch (err) {
        showErrors(form, status, err);
      } finally {
        save.disabled = false;
        save.textContent = "Save";
      }
    } } },
  h("h2", { id: "pf-title" }, editing ? `Edit ${policy.name}` : "New policy"),
  h("div", { class: "field" }, h("label", { for: "pf-name" }, "Name"), name),
  h("div", { class: "when-then-form" }, when.el, then.el),
  h("div", { class: "limits-form" },
    h("div", { class: "field" }, h("label", { for: "pf-max-spend" }, "Max spend ($/hr, optional)"), maxSpend,
      h("p", { class: "help" }, "An action that would take the project's running cost over this does not run.")),
    h("div", { class: "field" }, h("label", { for: "pf-cooldown" }, "Cooldown (minutes, optional)"), cooldown,
      h("p", { class: "help" }, "After acting, the policy does not act again for this long."))),
  h("datalist", { id: "pf-pools" }, pools.map((p) => h("option", { value: p }))),
  status,
  h("div", { class: "actions" }, del, cancel, save));
  form.addEventListener("keydown", (e) => { if (e.key === "Escape") onClose(false); });
  return form;
}

// ------------------------------------------------------------------------------------------ page

export function render({ main }) {
  const list = h("div", { class: "policies", id: "policies" });
  const empty = h("p", { class: "muted empty", hidden: true }, "No policies yet. + New Policy adds one: a When (a condition or a cron schedule) and the Then it runs.");
  const problem = h("div", { "aria-live": "polite" });
  const newButton = h("button", { id: "new-policy", on: { click: () => openForm(null) } }, "+ New Policy");
  const formSlot = h("div", { id: "policy-form-slot" });
  replace(main, h("div", { class: "card-head policies-head" },
    h("div", {}, h("h2", {}, "Policies"), h("p", { class: "muted" }, "Auto-scaling & resource policies: each runs on its own Temporal Schedule.")),
    newButton), problem, formSlot, empty, list);

  const cards = new Map();
  let open = null; // { form, id, from }
  let pools = null;

  function closeForm(saved, policy) {
    if (!open) return;
    const { form, id, from } = open;
    open = null;
    form.remove();
    const card = id && cards.get(id);
    if (card) card.el.hidden = false;
    if (saved && policy) {
      if (card) card.update(policy);
      else place(policy);
    }
    refresh().catch(() => {});
    const back = saved && policy && cards.get(policy.id) ? cards.get(policy.id).el.querySelector("[data-role=edit]") : from;
    if (back && back.isConnected) back.focus();
  }

  async function openForm(card) {
    if (open) closeForm(false);
    if (pools === null) {
      try { pools = (await all("/pools")).map((p) => p.name); } catch { pools = []; }
    }
    const form = policyForm(card ? card.policy : null, {
      pools, onClose: closeForm,
      onDeleted: (id) => { const c = cards.get(id); if (c) { c.el.remove(); cards.delete(id); } open = null; form.remove(); newButton.focus(); refresh().catch(() => {}); },
    });
    open = { form, id: card ? card.policy.id : null, from: card ? card.el.querySelector("[data-role=edit]") : newButton };
    if (card) { card.el.before(form); card.el.hidden = true; } else formSlot.appendChild(form);
    form.querySelector("#pf-name").focus();
  }

  function place(p) {
    let card = cards.get(p.id);
    if (card) { card.update(p); return card; }
    card = policyCard(p, { onEdit: openForm, onSaved: () => refresh().catch(() => {}) });
    cards.set(p.id, card);
    list.appendChild(card.el);
    return card;
  }

  async function refresh() {
    const policies = await all("/policies");
    replace(problem);
    const seen = new Set(policies.map((p) => p.id));
    for (const [id, card] of cards) {
      if (!seen.has(id) && !(open && open.id === id)) { card.el.remove(); cards.delete(id); }
    }
    policies.forEach(place);
    // Keep the API's order (oldest first) without moving elements that are already in place: a moved
    // element loses keyboard focus.
    const wanted = policies.map((p) => cards.get(p.id).el);
    const actual = [...list.children].filter((el) => el.matches("article"));
    if (wanted.some((el, i) => actual[i] !== el)) {
      wanted.forEach((el) => list.appendChild(el));
      if (open && open.id && cards.get(open.id)) cards.get(open.id).el.before(open.form);
    }
    empty.hidden = policies.length > 0;
  }

  return live(() => refresh().catch((err) => { replace(problem, errorBox(err.message)); }), 3000);
}
