// Backend offers (/studio/backend-offers?backend=<key>): "{Provider} — Available Instances", the
// offer table fetched on demand, the Spot instances filter, and the offer picked as the backend's
// default echoed above the table. Modal shows its GPU picker instead (GET/POST /backends/modal/...).
//
// The Spot filter works on the fetched list in the page rather than asking the API again with
// `spot=true`: the whole list is in hand once fetched (every page followed), so ticking or unticking
// is instant, does not ask the cloud a second time, and cannot disagree with the rows already shown.
import { all, get, send } from "./api.js";
import { errorBox, fmt, h, replace } from "./dom.js";
import { providerIcon } from "./cloud.js";

const PAGE_SIZE = 200; // the API's largest page: one request for every simulated cloud's list
// A 504 says the cloud has not answered within the API's wait (GPUPROV_OFFERS_TIMEOUT_S) and is still
// asked, its answer the next request's: the page asks again, as `gpuprov offers --wait` does, this long.
const STILL_ASKED_FOR_MS = 60_000;
const ASK_AGAIN_MS = 1_500;
const cloudLink = () => h("a", { href: "/studio/compute/cloud" }, "← Back to Cloud");

const part = (cls, label, ...value) => h("span", { class: cls }, h("span", { class: "muted" }, `${label} `), ...value);

// The picked offer (or Modal spec), echoed: GPU, instance, region, price, and when it was picked.
function echo(box, p, what) {
  if (!p) return replace(box, h("p", { class: "muted", id: "picked-none" }, `No ${what} picked yet.`));
  return replace(box, h("div", { class: "picked-echo", id: "picked", dataset: {
    instance: p.instance_type, region: p.region, spot: String(!!p.spot) } },
  h("span", { class: "picked-label" }, what === "offer" ? "Picked offer" : "Saved default"),
  part("picked-gpu", "GPU", p.gpu_label || "—"),
  part("picked-instance", "Instance", p.instance_type),
  part("picked-region", "Region", p.region),
  part("picked-price", "Price", fmt.perHour(p.price_per_hour), p.spot ? h("span", { class: "badge badge-spot" }, "spot") : null),
  p.picked_at ? h("span", { class: "muted" }, `picked ${fmt.time(p.picked_at)}`) : null));
}

function unknownBackend(main, key) {
  replace(main, h("section", { class: "card", id: "unknown-backend" },
    h("h2", {}, "Unknown backend"),
    h("p", {}, key ? `There is no backend called "${key}".` : "No backend was named (the address needs ?backend=<key>)."),
    h("p", {}, cloudLink(), " and choose one of the connected providers.")));
}

function heading(name) {
  return h("div", { class: "offers-head" }, providerIcon(name),
    h("h2", { id: "offers-title" }, `${name} — Available Instances`),
    h("a", { href: "/studio/compute/cloud", class: "offers-back" }, "← Cloud"));
}

// A 409 (not connected) says so with a way to connect; anything else shows the API's reason.
function problem(err, key) {
  return h("div", {}, errorBox(err.message),
    err.status === 409 ? h("p", {}, h("a", { href: `/studio/connect-cloud?provider=${encodeURIComponent(key)}` }, `Connect ${key}`), " · ", cloudLink()) : null);
}

// `ask()`, asked again while the cloud is still asked (a 504), saying so in `box`; what it answers.
async function askingAgain(ask, box, isStopped) {
  const until = Date.now() + STILL_ASKED_FOR_MS;
  for (;;) {
    try {
      return await ask();
    } catch (err) {
      if (err.status !== 504 || Date.now() >= until || isStopped()) throw err;
      replace(box, h("p", { class: "muted still-asked" }, `${err.message} — asking again…`));
      await new Promise((resolve) => setTimeout(resolve, ASK_AGAIN_MS));
    }
  }
}

function offerTable(key, main, entry) {
  const titleBox = heading(entry.name);
  const pickedBox = h("div", { id: "picked-box", "aria-live": "polite" }, h("p", { class: "muted" }, "Loading the current pick…"));
  const pickStatus = h("div", { id: "pick-status", "aria-live": "polite" });
  const fetchButton = h("button", { id: "fetch-offers", type: "button" }, "Fetch available instances");
  const spotBox = h("input", { id: "spot-only", type: "checkbox" });
  const count = h("span", { id: "offers-count", class: "muted", "aria-live": "polite" });
  const fetchStatus = h("div", { id: "fetch-status", "aria-live": "polite" });
  const tbody = h("tbody");
  const table = h("div", { class: "table-wrap", id: "offers-table", hidden: true }, h("table", {},
    h("caption", { class: "sr-only" }, "Offers, cheapest first: choose a row to pick it as the default"),
    h("thead", {}, h("tr", {}, ["Instance", "GPU", "vCPUs", "RAM", "Region", "$/hr"].map((t) => h("th", { scope: "col" }, t)))),
    tbody));
  const card = h("section", { class: "card", id: "offers" },
    h("div", { class: "card-head" }, h("h3", {}, "Picked offer"), h("span", { class: "muted" }, "the backend's default when a launch names no GPU")),
    pickedBox, pickStatus,
    h("div", { class: "offers-controls" }, fetchButton,
      h("label", { class: "inline", for: "spot-only" }, spotBox, "Spot instances"), count),
    h("p", { class: "muted offers-hint" }, "Spot instances are cheaper but may be terminated at any time."),
    fetchStatus, table);
  replace(main, titleBox, card);

  let offers = null;
  let picked = null;
  let picking = false;
  let stopped = false;

  const same = (o, p) => p && o.instance_type === p.instance_type && o.region === p.region && o.spot === p.spot;

  function showPicked(p) {
    picked = p;
    echo(pickedBox, p, "offer");
    for (const row of tbody.querySelectorAll("tr[data-index]")) {
      const on = same(offers[Number(row.dataset.index)], p);
      row.classList.toggle("picked", on);
      if (on) row.setAttribute("aria-current", "true"); else row.removeAttribute("aria-current");
    }
  }

  async function pick(o, row) {
    if (picking) return;
    picking = true;
    row.setAttribute("aria-busy", "true");
    replace(pickStatus, h("p", { class: "muted" }, `Picking ${o.instance_type} in ${o.region}…`));
    try {
      // The pick is looked up in the cloud's answer: asked anew once the table's is no longer kept.
      const saved = await askingAgain(() => send("POST", `/backends/${encodeURIComponent(key)}/pick`, {
        instance_type: o.instance_type, region: o.region, spot: o.spot, gpu: o.gpu_label || undefined }),
      pickStatus, () => stopped);
      if (stopped) return;
      replace(pickStatus);
      showPicked(saved);
    } catch (err) {
      replace(pickStatus, errorBox(`Could not pick ${o.instance_type}: ${err.message}`));
    } finally {
      picking = false;
      row.removeAttribute("aria-busy");
    }
  }

  function offerRow(o, index) {
    const choose = () => pick(o, row);
    const row = h("tr", { class: "clickable", tabindex: 0, title: `Pick ${o.instance} in ${o.region} as the default`,
      dataset: { index, instance: o.instance_type, region: o.region, spot: String(o.spot) },
      on: { click: choose, keydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); choose(); } } } },
    h("td", { class: "offer-instance" }, o.instance),
    h("td", { class: "offer-gpu" }, o.gpu_label || "—"),
    h("td", { class: "offer-vcpus" }, String(o.vcpus)),
    h("td", { class: "offer-ram" }, o.ram),
    h("td", { class: "offer-region" }, o.region, o.zone && o.zone !== o.region ? h("span", { class: "muted zone" }, ` ${o.zone}`) : null),
    h("td", { class: "offer-price" }, fmt.money(o.price_per_hour),
      o.spot ? h("span", { class: "badge badge-spot" }, "spot") : null,
      o.available ? null : h("span", { class: "muted" }, " (unavailable)")));
    return row;
  }

  function draw() {
    if (!offers) return;
    const shown = offers.map((o, i) => [o, i]).filter(([o]) => !spotBox.checked || o.spot);
    const spots = offers.filter((o) => o.spot).length;
    count.textContent = spotBox.checked ? `${shown.length} spot of ${offers.length} offers` : `${offers.length} offers · ${spots} spot`;
    replace(tbody, shown.length ? shown.map(([o, i]) => offerRow(o, i))
      : h("tr", {}, h("td", { colspan: 6, class: "muted" }, spotBox.checked ? "No spot offers." : "No offers right now.")));
    table.hidden = false;
    showPicked(picked);
  }

  // Every page of the offers (following next_cursor); the first page also carries title and pick.
  async function fetchOffers() {
    fetchButton.disabled = true;
    fetchButton.textContent = "Fetching…";
    replace(fetchStatus);
    try {
      const path = `/backends/${encodeURIComponent(key)}/offers`;
      const first = await askingAgain(() => get(`${path}?limit=${PAGE_SIZE}`), fetchStatus, () => stopped);
      const items = [...first.items];
      if (first.next_cursor) items.push(...(await all(`${path}?cursor=${encodeURIComponent(first.next_cursor)}`, PAGE_SIZE)));
      if (stopped) return;
      replace(fetchStatus);
      offers = items;
      titleBox.querySelector("#offers-title").textContent = first.title;
      picked = first.picked;
      draw();
    } catch (err) {
      replace(fetchStatus, problem(err, key)); // the rows already shown (if any) stay
    } finally {
      fetchButton.disabled = false;
      fetchButton.textContent = offers ? "Fetch again" : "Fetch available instances";
    }
  }

  fetchButton.addEventListener("click", fetchOffers);
  spotBox.addEventListener("change", draw);

  // The current pick, read without asking the cloud (GET …/pick; 404: none yet): the table itself
  // waits for the button.
  get(`/backends/${encodeURIComponent(key)}/pick`).then((p) => {
    if (!stopped && !offers) showPicked(p);
  }).catch((err) => {
    if (stopped || offers) return;
    if (err.status === 404) showPicked(null);
    else replace(pickedBox, problem(err, key));
  });

  return () => { stopped = true; };
}

function modalPicker(key, main, entry) {
  const titleBox = heading(entry.name);
  const pickedBox = h("div", { id: "picked-box", "aria-live": "polite" });
  const body = h("div", {}, h("p", { class: "muted" }, "Loading Modal's GPU types…"));
  replace(main, titleBox, h("section", { class: "card", id: "modal-picker" },
    h("div", { class: "card-head" }, h("h3", {}, "Modal GPU picker"), h("span", { class: "muted" }, "the spec a launch on Modal gets when it names no GPU")),
    pickedBox, body));
  let stopped = false;

  function form(picker) {
    const gpus = picker.gpus;
    let chosen = gpus.find((g) => g.gpu === picker.picked?.gpu) || gpus[0];
    const count = h("select", { id: "modal-count" });
    const total = h("span", { id: "modal-total", class: "muted" });
    const status = h("div", { id: "modal-status", "aria-live": "polite" });
    const save = h("button", { id: "modal-save", type: "submit" }, "Save as default");
    const fillCounts = (keep) => {
      replace(count, chosen.counts.map((n) => h("option", { value: String(n), selected: n === keep }, `${n} GPU${n === 1 ? "" : "s"}`)));
      if (!chosen.counts.includes(keep)) count.value = String(chosen.counts[0]);
      total.textContent = `${count.value}× ${chosen.gpu} = ${fmt.perHour(chosen.price_per_hour * Number(count.value))}`;
    };
    const radios = gpus.map((g) => h("tr", { dataset: { gpu: g.gpu } },
      h("td", {}, h("input", { type: "radio", name: "modal-gpu", id: `modal-gpu-${g.gpu}`, value: g.gpu, checked: g === chosen,
        on: { change: () => { chosen = g; fillCounts(Number(count.value)); } } })),
      h("td", {}, h("label", { for: `modal-gpu-${g.gpu}`, class: "inline" }, g.gpu)),
      h("td", {}, `${g.memory_gib} GB`),
      h("td", {}, `1–${g.max_count}`),
      h("td", {}, fmt.perHour(g.price_per_hour))));
    count.addEventListener("change", () => fillCounts(Number(count.value)));
    fillCounts(picker.picked?.gpu === chosen.gpu ? picker.picked.gpu_count : 1);
    const submit = async (e) => {
      e.preventDefault();
      save.disabled = true;
      save.textContent = "Saving…";
      replace(status);
      try {
        const saved = await send("POST", `/backends/${encodeURIComponent(key)}/pick`, { gpu: chosen.gpu, gpu_count: Number(count.value) });
        if (stopped) return;
        echo(pickedBox, saved, "GPU spec");
        replace(status, h("p", { class: "ok" }, `Saved: ${saved.gpu_label || saved.instance_type} is Modal's default.`));
      } catch (err) {
        replace(status, errorBox(err.message)); // the choice stays as it was
      } finally {
        save.disabled = false;
        save.textContent = "Save as default";
      }
    };
    return h("form", { id: "modal-form", on: { submit } },
      h("fieldset", {}, h("legend", {}, "GPU type"),
        h("div", { class: "table-wrap" }, h("table", {},
          h("thead", {}, h("tr", {}, ["", "GPU", "Memory", "Per sandbox", "$/hr per GPU"].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, radios)))),
      h("div", { class: "offers-controls" }, h("label", { for: "modal-count", class: "inline" }, "GPUs per sandbox", count), total),
      h("p", { class: "muted" }, `Prices from ${picker.prices_source} (read ${fmt.day(picker.priced_on)}), billed ${picker.billing}; Modal schedules in ${picker.region}.`),
      h("div", { class: "actions" }, save), status);
  }

  get(`/backends/${encodeURIComponent(key)}/offers`).then((picker) => {
    if (stopped) return;
    titleBox.querySelector("#offers-title").textContent = picker.title;
    document.title = `${picker.title} · gpuprov`;
    echo(pickedBox, picker.picked, "GPU spec");
    replace(body, form(picker));
  }).catch((err) => { if (!stopped) replace(body, problem(err, key)); });
  return () => { stopped = true; };
}

export function render({ main, params }) {
  const key = (params.get("backend") || "").trim();
  let stop = () => {};
  let stopped = false;
  all("/providers/catalog").then((catalog) => {
    if (stopped) return;
    const entry = catalog.find((c) => c.key === key);
    if (!entry) return unknownBackend(main, key);
    stop = key === "modal" ? modalPicker(key, main, entry) : offerTable(key, main, entry);
  }).catch((err) => { if (!stopped) replace(main, errorBox(err.message), h("p", {}, cloudLink())); });
  return () => { stopped = true; stop(); };
}
