// The Workload Queue tab: the filter pills with their live counts, the table (active first, then
// newest: the API's order), and a workload's detail — which replaces the header — with its log
// followed live and its GPUs' metrics charted. `?workload=<id>` opens the detail (Back works).
import { api, get, pages, send } from "./api.js";
import { confirmDialog, dot, errorBox, fmt, h, keyedRows, live, replace, showMore } from "./dom.js";
import { lineChart } from "./charts.js";

const PAGE = 50; // rows a page of the table: a screenful or two, re-read every 3 s
const PILLS = ["ALL", "SFT", "GRPO", "SERVING", "EVAL", "TASK", "SYNTHETIC"];
const TONE = { running: "green", provisioning: "blue", queued: "amber", succeeded: "grey", failed: "red", cancelled: "grey" };
const COLUMNS = [["PRI"], ["WORKLOAD"], ["TYPE"], ["STATUS"], ["GPU"], ["LOCATION", "hide-narrow"],
  ["PROGRESS / ETA"], ["REQUESTED BY", "hide-narrow"]];
const LOG_KEEP = 256 * 1024; // characters of a log kept on the page (the oldest are dropped)
const clock = new Intl.DateTimeFormat(undefined, { timeStyle: "medium" });

const statusDot = (w) => dot(TONE[w.status] || "grey", w.status);

function typeText(w) {
  return w.method && w.method !== w.type.toLowerCase() ? `${w.type} · ${w.method}` : w.type;
}

function progressText(w) {
  const parts = [];
  if (w.progress_pct !== null && w.progress_pct !== undefined) parts.push(`${Math.round(w.progress_pct)}%`);
  if (w.eta_at) parts.push(`ETA ${fmt.time(w.eta_at)}`);
  if (!parts.length && w.elapsed_s !== null && w.elapsed_s !== undefined) {
    parts.push(`${w.active ? "running" : "ran"} ${fmt.duration(w.elapsed_s)}`);
  }
  return parts.length ? parts.join(" · ") : "—";
}

// The list's first `count` pages (the table shows them; "Show more" adds one); the counts come
// with the first.
async function workloads(filter, count) {
  const { items, more, first } = await pages(`/workloads?type=${filter}`, count, PAGE);
  return { rows: items, more, counts: first.counts };
}

// A job's output: followed with a streamed fetch from `offset`, resumed where it stopped if the
// stream is lost while the job still runs. Returns a stop function.
function followLog(jobId, offset, onText, stillRunning) {
  const controller = new AbortController();
  let at = offset;
  let stopped = false;
  (async () => {
    while (!stopped) {
      const decoder = new TextDecoder();
      try {
        const response = await api("GET", `/api/compute/jobs/${encodeURIComponent(jobId)}/logs?follow=true&offset=${at}`,
          undefined, { raw: true, signal: controller.signal });
        const reader = response.body.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          at += value.byteLength;
          onText(decoder.decode(value, { stream: true }));
        }
        onText(decoder.decode());
      } catch (err) {
        if (stopped || err.name === "AbortError") return;
        console.warn("log stream lost:", err.message || err);
      }
      if (stopped || !stillRunning()) return;
      await new Promise((resolve) => setTimeout(resolve, 2000)); // lost while it runs: resume
    }
  })();
  return () => { stopped = true; controller.abort(); };
}

function field(label, value) {
  return [h("dt", {}, label), h("dd", {}, value === null || value === undefined || value === "" ? "—" : value)];
}

function detailFields(w) {
  return h("dl", { class: "fields", id: "workload-fields" },
    field("Type", typeText(w)), field("Status", statusDot(w)), field("PRI", w.pri ?? "—"),
    field("GPU", w.gpu), field("Location", w.location), field("Progress / ETA", progressText(w)),
    field("Requested by", w.requested_by), field("Source", w.source), field("Job", w.job_id),
    field("Created", fmt.time(w.created_at)), field("Updated", fmt.time(w.updated_at)));
}

// The workload opened. Returns a stop function (its timers and its log stream).
function showDetail(ctx, id, onBack) {
  const { main, top } = ctx;
  const back = h("button", { class: "secondary", id: "queue-back", on: { click: onBack } }, "← Workload Queue");
  const title = h("h1", { id: "workload-title" }, "…");
  const headStatus = h("span", { id: "workload-status" });
  replace(top, h("div", { class: "header-row detail-head" },
    h("div", { class: "detail-title" }, back, title, headStatus)));
  back.focus();
  document.title = "Workload · Compute · gpuprov";

  const problem = h("div", { "aria-live": "polite" });
  const fieldsCard = h("section", { class: "card", id: "workload-detail" }, h("h2", {}, "Workload"), h("p", { class: "muted" }, "Loading…"));
  const pre = h("pre", { class: "log", id: "workload-log", tabindex: 0, "aria-label": "Log" });
  const logCard = h("section", { class: "card", id: "workload-logs", hidden: true },
    h("div", { class: "card-head" }, h("h2", {}, "Logs"), h("span", { class: "muted", id: "log-state" })), pre);
  const metricsNote = h("p", { class: "muted" }, "No GPU samples yet.");
  const latest = h("p", { class: "muted", id: "gpu-latest" });
  const canvas = (cid, label) => h("div", { class: "chart" }, h("canvas", { id: cid, role: "img", "aria-label": label }));
  const chartsBox = h("div", { class: "charts metrics-charts", hidden: true },
    h("div", {}, h("h3", {}, "GPU utilisation"), canvas("gpu-util", "GPU utilisation over time")),
    h("div", {}, h("h3", {}, "GPU memory used"), canvas("gpu-mem", "GPU memory used over time")));
  const metricsCard = h("section", { class: "card", id: "workload-metrics", hidden: true },
    h("h2", {}, "GPU metrics"), metricsNote, chartsBox, latest);
  const otherNote = h("p", { class: "muted", id: "reported-note", hidden: true },
    "Reported by the system that runs it: gpuprov keeps no logs or GPU metrics of it.");
  replace(main, problem, fieldsCard, otherNote, logCard, metricsCard);

  let current = null;
  let stopLog = null;
  const charts = {};

  function appendLog(text) {
    if (!text) return;
    const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
    let all = pre.textContent + text;
    if (all.length > LOG_KEEP) all = all.slice(all.length - LOG_KEEP);
    pre.textContent = all;
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }

  const gib = (mib) => (mib / 1024).toFixed(1);

  function drawMetrics(metrics) {
    metricsCard.hidden = false;
    if (!metrics.length) { metricsNote.hidden = false; chartsBox.hidden = true; return; }
    metricsNote.hidden = true;
    chartsBox.hidden = false;
    const labels = metrics.map((m) => clock.format(new Date(m.at)));
    const gpus = [...new Set(metrics.flatMap((m) => m.gpus.map((g) => g.gpu)))].sort((a, b) => a - b);
    const series = (value) => gpus.map((n) => ({ label: `GPU ${n}`, values: metrics.map((m) => {
      const g = m.gpus.find((x) => x.gpu === n);
      return g ? value(g) : null;
    }) }));
    charts.util = lineChart(charts.util, chartsBox.querySelector("#gpu-util"), labels, series((g) => g.utilization_pct));
    charts.mem = lineChart(charts.mem, chartsBox.querySelector("#gpu-mem"), labels,
      series((g) => (g.memory_total_mib ? Math.round((1000 * g.memory_used_mib) / g.memory_total_mib) / 10 : 0)));
    const last = metrics[metrics.length - 1];
    latest.textContent = `Latest sample, ${clock.format(new Date(last.at))}: ` + last.gpus.map((g) =>
      `GPU ${g.gpu} ${Math.round(g.utilization_pct)}% · ${gib(g.memory_used_mib)} of ${gib(g.memory_total_mib)} GiB`).join("; ");
  }

  // One Cancel button for a managed job while it is active (kept across refreshes: focus stays).
  const cancel = h("button", { class: "danger", id: "cancel-job", type: "button", hidden: true, on: { click: async () => {
    const w = current;
    const ok = await confirmDialog(`Cancel ${w.workload}?`,
      "The job is stopped (or leaves the queue) and its machine is terminated.", "Cancel job");
    if (!ok) return;
    cancel.disabled = true;
    cancel.textContent = "Cancelling…";
    replace(cancelProblem);
    try {
      await send("POST", `/jobs/${encodeURIComponent(w.job_id)}/cancel`);
    } catch (err) {
      cancel.disabled = false;
      cancel.textContent = "Cancel job";
      replace(cancelProblem, errorBox(err.message));
    }
  } } }, "Cancel job");
  const cancelProblem = h("div", { "aria-live": "polite" });
  const actions = h("div", { class: "actions start" }, cancel, cancelProblem);

  async function refresh() {
    const w = await get(`/workloads/${encodeURIComponent(id)}`);
    replace(problem);
    const first = current === null;
    current = w;
    title.textContent = w.workload;
    replace(headStatus, statusDot(w));
    document.title = `${w.workload} · Workload Queue · gpuprov`;
    if (first) replace(fieldsCard, h("h2", {}, "Workload"), h("dl"), actions);
    fieldsCard.querySelector("dl").replaceWith(detailFields(w));
    cancel.hidden = !(w.job_id && w.active);
    if (!w.job_id) { otherNote.hidden = false; return; }
    logCard.hidden = false;
    if (first) {
      appendLog(w.log_lines.length ? `${w.log_lines.join("\n")}\n` : "");
      pre.scrollTop = pre.scrollHeight;
      stopLog = followLog(w.job_id, w.log_offset || 0, appendLog, () => current && current.active);
    }
    pre.dataset.state = w.active ? "following" : "ended";
    logCard.querySelector("#log-state").textContent = w.active ? "following live…" : `ended (${w.status})`;
    drawMetrics(w.metrics || []);
  }

  const stopLive = live(() => refresh().catch((err) => {
    replace(problem, errorBox(err.message));
    if (current !== null) return;
    title.textContent = id;
    replace(fieldsCard, h("h2", {}, "Workload"), h("p", { class: "muted" }, "Not available."));
  }), 3000);
  return () => {
    stopLive();
    if (stopLog) stopLog();
    for (const chart of Object.values(charts)) chart.destroy();
  };
}

export function render(ctx) {
  const { main } = ctx;
  let filter = "ALL";
  let seq = 0;
  let stopList = null;
  let stopDetail = null;
  let lastOpened = null;

  const pillButtons = PILLS.map((key) => h("button", { class: "pill", type: "button", dataset: { filter: key },
    "aria-pressed": String(key === filter), on: { click: () => setFilter(key) } },
  key, h("span", { class: "count" }, "")));
  const tbody = h("tbody");
  const problem = h("div", { "aria-live": "polite" });
  // The filter's first page; Show more adds one (a refresh re-reads those, never the whole queue).
  const pager = showMore({ id: "workloads-more", size: PAGE, refresh: () => refreshList(),
    focusRow: (row) => row.focus(), onError: (err) => replace(problem, errorBox(err.message)) });
  const listView = [
    h("section", { class: "card", id: "queue" },
      h("div", { class: "card-head" }, h("h2", {}, "Workload Queue"),
        h("div", { class: "pills", role: "group", "aria-label": "Filter by type", id: "queue-pills" }, pillButtons)),
      problem,
      h("div", { class: "table-wrap" }, h("table", { id: "workloads" },
        h("thead", {}, h("tr", {}, COLUMNS.map(([t, cls]) => h("th", { scope: "col", class: cls }, t)))),
        tbody)),
      pager.foot),
  ];

  function row(w) {
    const open = () => openDetail(w.id, true);
    return h("tr", { class: "clickable", tabindex: 0, dataset: { workload: w.id, status: w.status },
      "aria-label": `${w.workload}, ${w.type}, ${w.status}: open`,
      on: { click: open, keydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } } } },
    h("td", { class: "pri" }, w.pri ?? "—"),
    h("td", { class: "workload-name" }, w.workload),
    h("td", {}, typeText(w)),
    h("td", {}, statusDot(w)),
    h("td", {}, w.gpu ?? "—"),
    h("td", { class: "hide-narrow" }, w.location ?? "—"),
    h("td", {}, progressText(w)),
    h("td", { class: "hide-narrow" }, w.requested_by ?? "—"));
  }

  async function refreshList() {
    const mine = ++seq;
    const { rows, more, counts } = await workloads(filter, pager.pages);
    if (mine !== seq || stopList === null) return; // a newer refresh (another pill) or the list closed
    replace(problem);
    for (const b of pillButtons) {
      b.querySelector(".count").textContent = String(counts[b.dataset.filter] ?? 0);
      b.setAttribute("aria-pressed", String(b.dataset.filter === filter));
    }
    const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest("tr[data-workload]");
    const focusId = focused && tbody.contains(focused) ? focused.dataset.workload : null;
    keyedRows(tbody, rows, (w) => w.id, row, () => h("tr", {}, h("td", { colspan: COLUMNS.length, class: "muted empty" },
      filter === "ALL" ? "Nothing is running or queued in this project." : `No ${filter} workloads.`)));
    if (focusId) [...tbody.rows].find((r) => r.dataset.workload === focusId)?.focus();
    pager.rendered(more, tbody.rows);
  }


  function setFilter(key) {
    filter = key;
    pager.reset();
    for (const b of pillButtons) b.setAttribute("aria-pressed", String(b.dataset.filter === filter));
    refreshList().catch((err) => replace(problem, errorBox(err.message)));
  }

  function showList() {
    if (stopDetail) { stopDetail(); stopDetail = null; }
    ctx.restoreHeader();
    document.title = "Workload Queue · Compute · gpuprov";
    replace(main, ...listView);
    if (stopList === null) {
      stopList = () => {}; // set before the first refresh: it checks the list is still open
      stopList = live(() => refreshList().catch((err) => replace(problem, errorBox(err.message))), 3000);
    }
    if (lastOpened) {
      const again = [...tbody.rows].find((r) => r.dataset.workload === lastOpened);
      if (again) again.focus();
    }
  }

  function openDetail(id, push) {
    if (stopList) { stopList(); stopList = null; }
    if (stopDetail) stopDetail();
    lastOpened = id;
    if (push) history.pushState({ workload: id }, "", `${location.pathname}?workload=${encodeURIComponent(id)}`);
    stopDetail = showDetail(ctx, id, goBack);
  }

  function goBack() {
    // Opened from the table (our pushState): the list is the entry behind it, and popstate shows it.
    if (history.state && history.state.workload) { history.back(); return; }
    history.replaceState(null, "", location.pathname); // opened by its URL: the list takes its place
    showList();
  }

  function onPop() {
    const id = new URLSearchParams(location.search).get("workload");
    if (id) openDetail(id, false);
    else showList();
  }

  window.addEventListener("popstate", onPop);
  const initial = ctx.params.get("workload");
  if (initial) openDetail(initial, false);
  else showList();
  return () => {
    window.removeEventListener("popstate", onPop);
    if (stopList) stopList();
    if (stopDetail) stopDetail();
  };
}
