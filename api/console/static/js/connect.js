// The connect page (/studio/connect-cloud?provider=<key>): a cloud's credential form generated from
// the catalog (GET /providers/catalog), verified by POST /connections before anything is saved; the
// SSH / on-prem card's fleet form (POST/PUT /fleets), then each host's probe answer.
import { all, get, send } from "./api.js";
import { confirmDialog, dot, errorBox, fmt, h, live, replace } from "./dom.js";
import { providerIcon } from "./cloud.js";

const SSH = "ssh"; // providers/future.py SSH_FLEET
const GRID = "/studio/compute/cloud#connect";
const REQUIREMENTS = [
  "Docker pre-installed",
  "CUDA 12.1 + NVIDIA Container Toolkit on GPU hosts",
  "Passwordless sudo for the SSH user",
  "AllowTcpForwarding yes in sshd_config",
  "A firewall allowing SSH from this installation",
];

export function render({ main, params }) {
  const stops = [];
  const stop = () => stops.splice(0).forEach((fn) => fn());
  const fleetId = params.get("fleet_id");
  const key = params.get("provider") || (fleetId ? SSH : null);
  all("/providers/catalog").then(async (catalog) => {
    const card = catalog.find((c) => c.key === key);
    if (!card) return replace(main, chooser(catalog, key));
    if (card.key === SSH) {
      const fleet = fleetId ? await get(`/fleets/${encodeURIComponent(fleetId)}`) : null;
      return replace(main, heading(card), fleetForm(card, fleet, main, stops));
    }
    return replace(main, heading(card), cloudForm(card, main));
  }).catch((err) => replace(main, errorBox(err.message), h("p", {}, h("a", { href: GRID }, "Back to the providers"))));
  return stop;
}

// No (or an unknown) provider: the grid to choose from.
function chooser(catalog, key) {
  return h("section", { class: "card", id: "connect-choose" },
    h("h2", {}, "Connect a provider"),
    key ? h("p", { class: "error", role: "alert" }, `No provider "${key}" here: choose one below.`) : null,
    h("div", { class: "grid" }, catalog.filter((c) => c.available || c.key === SSH).map((c) =>
      h("a", { class: "provider-card", href: `/studio/connect-cloud?provider=${encodeURIComponent(c.key)}`, dataset: { key: c.key } },
        providerIcon(c.name),
        h("div", {}, h("div", { class: "name" }, c.name), h("div", { class: "muted" }, c.tagline))))));
}

function heading(card) {
  return h("section", { class: "card", id: "connect-head", dataset: { provider: card.key } },
    h("div", { class: "connect-title" }, providerIcon(card.name),
      h("div", { class: "grow" }, h("h2", { id: "provider-name" }, card.name), h("div", { class: "muted", id: "provider-tagline" }, card.tagline)),
      h("a", { href: GRID, id: "change-provider" }, "Change")),
    h("details", { id: "how-to-connect" }, h("summary", {}, "How to connect"), h("p", {}, card.how_to_connect)),
    card.billed_note ? h("p", { class: "note-amber", id: "billed-note" }, card.billed_note_text) : null);
}

// One labelled control; returns {row, read()} where read() gives the value to send (undefined: omit).
function control(f, prefix) {
  const id = `${prefix}-${f.name}`;
  const helpId = f.help ? `${id}-help` : undefined;
  const help = f.help ? h("p", { class: "help", id: helpId }, f.help) : null;
  const common = { id, name: f.name, required: f.required || undefined, "aria-describedby": helpId };
  if (f.kind === "toggle") {
    const input = h("input", { ...common, type: "checkbox", required: undefined, checked: Boolean(f.default) });
    return { input, row: h("div", { class: "field toggle-field" },
      h("div", { class: "toggle-row" }, h("label", { class: "switch" }, input, h("span")), h("label", { for: id, class: "inline" }, f.label)), help),
    read: () => input.checked };
  }
  if (f.kind === "file") {
    const input = h("input", { ...common, type: "file" });
    const state = { text: null };
    const shown = h("span", { class: "muted file-state", "aria-live": "polite" });
    input.addEventListener("change", () => {
      const file = input.files[0];
      state.text = null;
      if (!file) return replace(shown);
      replace(shown, `Reading ${file.name}…`);
      state.reading = new Promise((resolve) => {
        const reader = new FileReader();
        reader.onload = () => { state.text = String(reader.result); replace(shown, `${file.name} read`); resolve(state.text); };
        reader.onerror = () => { replace(shown, errorBox(`could not read ${file.name}`)); resolve(null); };
        reader.readAsText(file);
      });
      state.reading.then((text) => input.dispatchEvent(new CustomEvent("fileread", { detail: text })));
    });
    return { input, row: h("div", { class: "field" }, h("label", { for: id }, f.label), input, shown, help),
      read: async () => { if (state.reading) await state.reading; return state.text ?? undefined; } };
  }
  let input;
  if (f.kind === "select" && Array.isArray(f.options)) {
    input = h("select", common, f.options.map((o) => h("option", { value: String(o), selected: o === f.default }, String(o))));
  } else {
    input = h("input", { ...common, type: f.kind === "secret" ? "password" : "text", autocomplete: "off", spellcheck: "false",
      value: f.default === null || f.default === undefined ? "" : String(f.default) });
  }
  return { input, row: h("div", { class: "field" }, h("label", { for: id }, f.label), input, help),
    read: () => (input.value.trim() === "" && !f.required ? undefined : input.value.trim()) };
}

function busy(button, on, idle) {
  button.disabled = on;
  button.textContent = on ? "Verifying connection…" : idle;
}

function cloudForm(card, main) {
  if (!card.available) {
    return h("section", { class: "card", id: "connect-form" }, errorBox(card.reason || `${card.name} cannot be connected here.`));
  }
  const controls = card.credentials.map((f) => control(f, "cred"));
  const byName = Object.fromEntries(card.credentials.map((f, i) => [f.name, controls[i]]));
  // A key file that names its project fills the project id when it was left empty (GCP).
  for (const c of controls) {
    c.input.addEventListener("fileread", (e) => {
      let parsed = null;
      try { parsed = JSON.parse(e.detail); } catch { return; }
      const project = byName.project_id;
      if (project && parsed && typeof parsed.project_id === "string" && project.input.value.trim() === "") project.input.value = parsed.project_id;
    });
  }
  const name = h("input", { id: "conn-name", type: "text", autocomplete: "off", placeholder: card.name, maxlength: 100 });
  const endpoint = h("input", { id: "conn-endpoint", type: "text", autocomplete: "off", spellcheck: "false", "aria-describedby": "conn-endpoint-help" });
  const caBundle = h("textarea", { id: "conn-ca", spellcheck: "false", "aria-describedby": "conn-ca-help" });
  const button = h("button", { type: "submit", id: "connect-submit", class: "connect-button" }, "Connect");
  const status = h("div", { id: "connect-status", "aria-live": "polite" });
  const form = h("form", { class: "card", id: "connect-form", on: { submit: async (e) => {
    e.preventDefault();
    busy(button, true);
    replace(status);
    try {
      const credentials = {};
      for (const f of card.credentials) {
        const value = await byName[f.name].read();
        if (value !== undefined) credentials[f.name] = value;
      }
      const body = { provider: card.key, credentials };
      if (name.value.trim()) body.name = name.value.trim();
      if (endpoint.value.trim()) body.endpoint = endpoint.value.trim();
      if (caBundle.value.trim()) body.ca_bundle = caBundle.value;
      const connection = await send("POST", "/connections", body);
      replace(main, heading(card), success(card, connection));
    } catch (err) {
      // Nothing was saved: the form keeps what was typed; the cloud's reason shows by the button.
      busy(button, false, "Connect");
      replace(status, errorBox(err.message));
    }
  } } },
  h("h2", {}, "Credentials"),
  h("div", { class: "field" }, h("label", { for: "conn-name" }, "Connection name"), name,
    h("p", { class: "help" }, `optional; "${card.name}" when empty`)),
  controls.map((c) => c.row),
  h("details", { id: "advanced" }, h("summary", {}, "Advanced"),
    h("label", { for: "conn-endpoint" }, "Endpoint"), endpoint,
    h("p", { class: "help", id: "conn-endpoint-help" }, "optional: the cloud's API base URL (a private or simulated endpoint the administrator allows)"),
    h("label", { for: "conn-ca" }, "CA bundle"), caBundle,
    h("p", { class: "help", id: "conn-ca-help" }, "optional: PEM certificates to trust for that endpoint")),
  h("div", { class: "actions" }, button), status);
  return form;
}

function success(card, c) {
  return h("section", { class: "card", id: "connect-success", dataset: { connection: c.id } },
    h("h2", { class: "result-title" }, dot("green", "Connected")),
    h("p", {}, h("strong", { id: "connected-name" }, c.name), c.account ? h("span", { class: "muted" }, ` · account ${c.account}`) : null),
    h("p", { class: "muted" }, `Verified ${fmt.time(c.created_at)}. Instances can now be launched on ${card.name}.`),
    h("div", { class: "actions start" },
      h("a", { class: "button", href: `/studio/backend-offers?backend=${encodeURIComponent(card.key)}`, id: "to-offers" }, `Browse ${card.name} instances`),
      h("a", { class: "button secondary", href: "/studio/compute/cloud", id: "to-cloud" }, "Back to the Cloud tab")));
}

// ---------------------------------------------------------------- SSH / on-prem fleets

function fleetForm(card, fleet, main, stops) {
  const fields = Object.fromEntries(card.credentials.map((f) => [f.name, f]));
  const label = (n, fallback) => (fields[n] && fields[n].label) || fallback;
  const helpOf = (n) => (fields[n] && fields[n].help) || null;
  const input = (id, props = {}) => h("input", { id, type: "text", autocomplete: "off", spellcheck: "false", ...props });
  const b = fleet && fleet.bastion;
  const els = {
    name: input("fleet-name", { required: true, maxlength: 100, value: fleet ? fleet.name : "" }),
    user: input("fleet-user", { required: true, value: fleet ? fleet.user : (fields.ssh_user?.default ?? "ubuntu") }),
    port: input("fleet-port", { type: "number", min: 1, max: 65535, required: true, value: String(fleet ? fleet.port : (fields.ssh_port?.default ?? 22)) }),
    key: h("textarea", { id: "fleet-key", spellcheck: "false", required: fleet ? undefined : true, "aria-describedby": "fleet-key-help",
      placeholder: fleet ? "leave blank to keep the saved key" : "-----BEGIN OPENSSH PRIVATE KEY-----" }),
    hosts: h("textarea", { id: "fleet-hosts", spellcheck: "false", required: true, "aria-describedby": "fleet-hosts-help" }),
    bHost: input("bastion-host", { value: b ? b.host : "" }),
    bPort: input("bastion-port", { type: "number", min: 1, max: 65535, value: String(b ? b.port : 22) }),
    bUser: input("bastion-user", { value: b && b.user !== fleet.user ? b.user : "", placeholder: "the SSH user when empty" }),
    bKey: h("textarea", { id: "bastion-key", spellcheck: "false", placeholder: "the hosts' key when empty" }),
  };
  els.hosts.value = fleet ? fleet.hosts.map((x) => x.host).join("\n") : "";
  const field = (el, text, help, helpId) => h("div", { class: "field" }, h("label", { for: el.id }, text), el,
    help ? h("p", { class: "help", id: helpId }, help) : null);
  const idle = fleet ? "Save and probe" : "Connect";
  const button = h("button", { type: "submit", id: "connect-submit", class: "connect-button" }, idle);
  const status = h("div", { id: "connect-status", "aria-live": "polite" });
  const form = h("form", { class: "card", id: "fleet-form", dataset: { fleet: fleet ? fleet.id : "" }, on: { submit: async (e) => {
    e.preventDefault();
    busy(button, true);
    replace(status);
    const body = {
      name: els.name.value.trim(), user: els.user.value.trim(), port: Number(els.port.value),
      private_key: els.key.value.trim() ? els.key.value : null,
      hosts: els.hosts.value.split("\n").map((x) => x.trim()).filter(Boolean),
      bastion: els.bHost.value.trim() ? { host: els.bHost.value.trim(), port: Number(els.bPort.value || 22),
        user: els.bUser.value.trim() || null, private_key: els.bKey.value.trim() ? els.bKey.value : null } : null,
    };
    try {
      const saved = fleet ? await send("PUT", `/fleets/${encodeURIComponent(fleet.id)}`, body) : await send("POST", "/fleets", body);
      replace(main, heading(card), probeResult(card, saved, stops));
    } catch (err) {
      busy(button, false, idle);
      replace(status, errorBox(err.message));
    }
  } } },
  h("h2", {}, fleet ? `Edit fleet ${fleet.name}` : "Your hosts"),
  h("div", { id: "ssh-requirements" }, h("h3", {}, "Host requirements"), h("ul", {}, REQUIREMENTS.map((r) => h("li", {}, r)))),
  field(els.name, "Fleet name"),
  h("div", { class: "field-pair" }, field(els.user, label("ssh_user", "SSH user")), field(els.port, label("ssh_port", "SSH port"))),
  field(els.key, label("private_key", "Private key"), fleet ? "Leave blank to keep the saved key." : helpOf("private_key"), "fleet-key-help"),
  field(els.hosts, label("hosts", "Hosts"), helpOf("hosts") || "one hostname or IP address per line", "fleet-hosts-help"),
  h("details", { id: "bastion", open: b ? true : undefined }, h("summary", {}, "Bastion / proxy jump (optional)"),
    field(els.bHost, label("bastion_host", "Bastion host")),
    field(els.bPort, label("bastion_port", "Bastion port")),
    field(els.bUser, label("bastion_user", "Bastion user")),
    field(els.bKey, label("bastion_private_key", "Bastion private key"),
      b && b.own_key ? "This bastion has a key of its own: leave blank to keep it." : helpOf("bastion_private_key"))),
  h("div", { class: "actions" }, button), status);
  return form;
}

function hostRow(x, fresh, trust) {
  let state;
  if (!fresh) state = dot("grey", "probing…");
  else if (x.reachable) state = dot("green", "reachable");
  else state = dot("red", "unreachable", x.reason || undefined);
  const missing = fresh && x.reachable ? [x.docker === false && "no Docker", x.sudo === false && "no passwordless sudo",
    x.tcp_forwarding === false && "TCP forwarding off"].filter(Boolean) : [];
  const changed = fresh && !x.reachable && /host key changed/i.test(x.reason || "");
  return h("div", { class: "row", dataset: { host: x.host, reachable: fresh ? String(Boolean(x.reachable)) : "" } },
    h("div", { class: "grow" }, h("div", { class: "name" }, x.host),
      x.host_key_fingerprint ? h("div", { class: "muted fingerprint" }, `host key ${x.host_key_fingerprint}`) : null),
    state,
    fresh && x.reachable ? h("span", { class: "gpus" }, x.gpu_summary || "no GPU found") : null,
    fresh && !x.reachable && x.reason ? h("span", { class: "reason" }, x.reason) : null,
    missing.length ? h("span", { class: "note-amber" }, missing.join(" · ")) : null,
    changed ? h("button", { class: "secondary", "aria-label": `Trust the new host key of ${x.host}`, on: { click: (e) => trust(x.host, e.target) } }, "Trust new host key") : null);
}

// After a save: each host's answer, polled until every host was probed again (its probed_at moved).
function probeResult(card, saved, stops) {
  let before = Object.fromEntries(saved.hosts.map((x) => [x.host, x.probed_at]));
  const list = h("div", { class: "rows", id: "fleet-hosts-result" });
  const summary = h("p", { class: "muted", id: "probe-summary", "aria-live": "polite" }, "Probing each host…");
  const problem = h("div", { "aria-live": "polite" });
  let stopLive = null;
  const edit = `/studio/connect-cloud?provider=${encodeURIComponent(card.key)}&fleet_id=${encodeURIComponent(saved.id)}`;
  const trust = async (host, button) => {
    const ok = await confirmDialog(`Trust the new host key of ${host}?`,
      "Only if you know why it changed (a reinstalled host): a changed key is also what a machine in the middle shows. The key it presents now is pinned.", "Trust");
    if (!ok) return;
    button.disabled = true;
    button.textContent = "Trusting…";
    try {
      const out = await send("POST", `/fleets/${encodeURIComponent(saved.id)}/trust`, { hosts: [host] });
      before = Object.fromEntries(out.hosts.map((x) => [x.host, x.probed_at]));
      draw(out);
      start();
    } catch (err) { button.after(errorBox(err.message)); button.disabled = false; button.textContent = "Trust new host key"; }
  };
  const draw = (fleet) => {
    const fresh = (x) => x.probed_at !== null && x.probed_at !== before[x.host];
    replace(list, fleet.hosts.map((x) => hostRow(x, fresh(x), trust)));
    const done = fleet.hosts.every(fresh);
    if (done) {
      const up = fleet.hosts.filter((x) => x.reachable).length;
      replace(summary, `${up} of ${fleet.hosts.length} host${fleet.hosts.length === 1 ? "" : "s"} reachable · probed ${fmt.time(fleet.hosts[0]?.probed_at)}`);
    }
    return done;
  };
  const start = () => {
    if (stopLive) stopLive();
    replace(summary, "Probing each host…");
    stopLive = live(async () => {
      try {
        const fleet = await get(`/fleets/${encodeURIComponent(saved.id)}`);
        replace(problem);
        if (draw(fleet) && stopLive) { stopLive(); stopLive = null; }
      } catch (err) { replace(problem, errorBox(err.message)); }
    }, 1500);
  };
  stops.push(() => { if (stopLive) stopLive(); });
  draw(saved);
  start();
  return h("section", { class: "card", id: "fleet-result", dataset: { fleet: saved.id } },
    h("h2", { class: "result-title" }, dot("green", "Saved"), h("span", { id: "connected-name" }, saved.name)),
    summary, list, problem,
    h("div", { class: "actions start" },
      h("a", { class: "button secondary", href: edit, id: "edit-fleet" }, "Edit this fleet"),
      h("a", { class: "button", href: "/studio/compute/cloud", id: "to-cloud" }, "Back to the Cloud tab")));
}
