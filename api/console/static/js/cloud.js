// The Cloud tab: connected providers, active cloud instances, cloud spend, the connect grid.
import { all, get, pages, send } from "./api.js";
import { confirmDialog, dot, errorBox, fmt, h, keyedRows, latestError, live, replace, showMore } from "./dom.js";
import { barChart } from "./charts.js";

const PAGE = 50; // rows a page of the instances table: a screenful or two, re-read every 3 s
const TONE = { healthy: "green", degraded: "amber", pending: "grey", removing: "grey" };

function initials(name) {
  return name.replace(/[^A-Za-z0-9 ]/g, " ").split(/\s+/).filter(Boolean).slice(0, 2).map((w) => w[0]).join("").toUpperCase();
}

export function providerIcon(name) {
  return h("span", { class: "icon", "aria-hidden": "true" }, initials(name) || "?");
}

function providerRow(p, refresh) {
  const fleet = p.kind === "ssh_fleet";
  const counts = fleet
    ? [`${p.host_count ?? 0} host${p.host_count === 1 ? "" : "s"}`, `${p.gpu_count ?? 0} GPU${p.gpu_count === 1 ? "" : "s"}`]
    : [`${p.instance_count ?? 0} instance${p.instance_count === 1 ? "" : "s"}`, fmt.perHour(p.cost_per_hour ?? 0)];
  const remove = async () => {
    const what = fleet
      ? `The SSH fleet "${p.label}" is forgotten here. Its hosts are not contacted or changed.`
      : `Every instance of the ${p.name} connection "${p.label}" is terminated (each verified gone), then the connection is deleted.`;
    if (!(await confirmDialog(`Remove ${p.label}?`, what, "Remove"))) return;
    try { await send("DELETE", `/providers/${encodeURIComponent(p.id)}`); } catch (err) { rowError.show(err, (box) => row.append(box)); }
    refresh();
  };
  const rowError = latestError(); // the row stays while the provider does not change (keyedRows)
  const row = h("div", { class: "row", dataset: { provider: p.id } },
    providerIcon(p.name),
    h("div", { class: "grow" }, h("div", { class: "name" }, p.name, p.label && p.label !== p.name ? h("span", { class: "muted label" }, ` · ${p.label}`) : null),
      h("div", { class: "muted" }, p.tagline)),
    dot(TONE[p.status] || "grey", p.status, p.reason || (p.status === "healthy" ? "healthy" : undefined)),
    h("span", {}, counts[0]), h("span", {}, counts[1]),
    p.status === "removing" ? h("span", { class: "muted" }, "removing…")
      : h("button", { class: "link", on: { click: remove }, "aria-label": `Remove ${p.label}` }, "Remove"));
  return row;
}

function instanceRow(i, refresh) {
  const terminate = async (event) => {
    const ok = await confirmDialog(`Terminate ${i.name || i.id}?`,
      `The ${i.instance_type || "instance"} on ${i.cloud} is terminated and verified gone; its billing stops.`, "Terminate");
    if (!ok) return;
    const button = event.target;
    button.disabled = true;
    button.textContent = "Terminating…";
    rowError.clear();
    try {
      await send("POST", `/instances/${encodeURIComponent(i.id)}/terminate`);
    } catch (err) {
      // The row stays while the instance does not change (keyedRows): it must offer the button again.
      button.disabled = false;
      button.textContent = "Terminate";
      rowError.show(err, (box) => button.after(box));
    }
    refresh();
  };
  const rowError = latestError();
  return h("tr", { dataset: { instance: i.id } },
    h("td", {}, i.name || i.id),
    h("td", {}, [i.gpu_label || "CPU", i.instance_type].filter(Boolean).join(" · ")),
    h("td", { class: "hide-narrow" }, fmt.time(i.ready_at || i.created_at)),
    h("td", {}, fmt.perHour(i.price_per_hour)),
    h("td", {}, i.status === "terminating" ? dot("grey", "terminating")
      : h("button", { class: "secondary", on: { click: terminate }, "aria-label": `Terminate ${i.name || i.id}` }, "Terminate")));
}

function connectGrid(catalog, connectedAny) {
  return h("section", { class: "card", id: "connect" },
    h("h2", {}, "Connect a provider"),
    connectedAny ? null : h("p", { class: "muted empty" }, "No providers connected yet. Connect one to provision GPUs on your own account."),
    // SSH / On-prem is no cloud connection (the catalog says so) but is connected here all the same.
    h("div", { class: "grid" }, catalog.filter((c) => c.available || c.key === "ssh").map((c) =>
      h("a", { class: "provider-card", href: `/studio/connect-cloud?provider=${encodeURIComponent(c.key)}` },
        providerIcon(c.name),
        h("div", {}, h("div", { class: "name" }, c.name), h("div", { class: "muted" }, c.tagline),
          c.support ? h("div", { class: "muted", title: c.support.detail }, c.support.status) : null)))));
}

export function render({ main }) {
  const providersBox = h("div", { class: "rows" });
  const instancesBody = h("tbody");
  const problem = h("div", { "aria-live": "polite" });
  // The newest page of active instances; Show more adds one. A refresh re-reads only the pages
  // shown, so a tab's cost every 3 s does not grow with the fleet.
  const pager = showMore({ id: "instances-more", size: PAGE, refresh: () => refresh(), note: "Newest first. ",
    focusRow: (row) => row.querySelector("button")?.focus(), onError: (err) => replace(problem, errorBox(err.message)) });
  let seq = 0;
  const spendCard = h("section", { class: "card", id: "spend", hidden: true });
  const grid = h("div");
  const providersCard = h("section", { class: "card", id: "providers" }, h("h2", {}, "Connected providers"), providersBox);
  const instancesCard = h("section", { class: "card", id: "instances" }, h("h2", {}, "Active cloud instances"),
    h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Workload", "GPU · Instance", "Started", "$/hr", ""].map((t) => h("th", { scope: "col", class: t === "Started" ? "hide-narrow" : undefined }, t)))),
      instancesBody)), pager.foot);
  replace(main, problem, providersCard, instancesCard, spendCard, grid);
  let catalog = null;
  const charts = {};

  async function refresh() {
    const mine = ++seq;
    const [providers, instances, spend] = await Promise.all([
      all("/providers"), pages("/instances?status=active", pager.pages, PAGE), get("/spend?days=30"),
      catalog ? null : all("/providers/catalog").then((c) => { catalog = c; })]);
    if (mine !== seq) return; // a newer refresh (Show more, a removal) renders instead
    replace(problem);
    const connected = providers.length > 0;
    providersCard.hidden = !connected;
    instancesCard.hidden = !connected;
    keyedRows(providersBox, providers, (p) => p.id, (p) => providerRow(p, refresh));
    keyedRows(instancesBody, instances.items, (i) => i.id, (i) => instanceRow(i, refresh),
      () => h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No active instances.")));
    pager.rendered(instances.more, instancesBody.rows);
    spendCard.hidden = !connected || spend.empty;
    if (!spendCard.hidden) drawSpend(spend);
    if (!grid.firstChild || grid.dataset.connected !== String(connected)) {
      grid.dataset.connected = String(connected);
      replace(grid, connectGrid(catalog, connected));
    }
  }

  function drawSpend(spend) {
    if (!spendCard.firstChild) {
      const canvas = (id, label) => h("div", { class: "chart" }, h("canvas", { id, role: "img", "aria-label": label }));
      replace(spendCard, h("div", { class: "card-head" }, h("h2", {}, "Cloud spend"), h("span", { class: "muted total" })),
        h("div", { class: "charts" },
          h("div", {}, h("h3", {}, "Daily cloud spend"), canvas("spend-daily", "Daily cloud spend, last 30 days")),
          h("div", {}, h("h3", {}, "By job type"), canvas("spend-type", "Spend by job type")),
          h("div", {}, h("h3", {}, "By project"), canvas("spend-project", "Spend by project"))));
    }
    spendCard.querySelector(".total").textContent = `${fmt.money(spend.total)} over ${spend.days} days`;
    charts.daily = barChart(charts.daily, spendCard.querySelector("#spend-daily"), spend.daily.map((d) => fmt.day(d.date)), spend.daily.map((d) => d.cost));
    charts.type = barChart(charts.type, spendCard.querySelector("#spend-type"), spend.by_job_type.map((d) => d.job_type), spend.by_job_type.map((d) => d.cost), { horizontal: true });
    charts.project = barChart(charts.project, spendCard.querySelector("#spend-project"), spend.by_project.map((d) => d.project), spend.by_project.map((d) => d.cost), { horizontal: true });
  }

  return live(() => refresh().catch((err) => { replace(problem, errorBox(err.message)); }), 3000);
}
