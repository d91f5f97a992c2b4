// The console's entry: sign-in, the Compute header with its tab bar, and which page a path draws.
import { all, currentSession, loadSession, onSignedOut, project, setProject, signIn, signOut } from "./api.js";
import { errorBox, h, replace } from "./dom.js";

// Each page is a module with `render(ctx)` returning a function that stops its refreshes.
const PAGES = {
  "/studio/compute/cloud": { tab: "cloud", title: "Cloud", load: () => import("./cloud.js") },
  "/studio/compute/workload-queue": { tab: "queue", title: "Workload Queue", load: () => import("./queue.js") },
  "/studio/compute/policies": { tab: "policies", title: "Policies", load: () => import("./policies.js") },
  "/studio/connect-cloud": { tab: "cloud", title: "Connect a provider", load: () => import("./connect.js") },
  "/studio/backend-offers": { tab: "cloud", title: "Available Instances", load: () => import("./offers.js") },
};

const top = document.getElementById("top");
const main = document.getElementById("main");
let stopPage = () => {};

function tabs(active) {
  const tab = (key, href, label) => h("a", { href, class: key === active ? "tab active" : "tab",
    "aria-current": key === active ? "page" : undefined }, label);
  return h("nav", { class: "tabs", "aria-label": "Compute" },
    tab("cloud", "/studio/compute/cloud", "Cloud"),
    tab("queue", "/studio/compute/workload-queue", "Workload Queue"),
    tab("policies", "/studio/compute/policies", "Policies"));
}

async function projectPicker() {
  const session = currentSession();
  if (!session.admin) return h("span", { class: "who" }, `project ${session.project}`);
  const select = h("select", { id: "project", "aria-label": "Project",
    on: { change: (e) => { setProject(e.target.value); location.reload(); } } });
  let names = [project()];
  try { names = (await all("/api/projects")).map((p) => p.id); } catch { /* the current one only */ }
  if (!names.includes(project())) names.unshift(project());
  for (const name of names) select.appendChild(h("option", { value: name, selected: name === project() }, name));
  return h("label", { class: "who" }, "admin · project ", select);
}

export function showHeader(page) {
  const signOutButton = h("button", { class: "link", on: { click: async () => { await signOut(); location.reload(); } } }, "Sign out");
  const right = h("div", { class: "header-right" }, signOutButton);
  projectPicker().then((picker) => right.prepend(picker));
  replace(top, h("div", { class: "header-row" },
    h("h1", {}, h("a", { href: "/studio/compute/cloud" }, "Compute")), right), tabs(page.tab));
}

function signInForm(problem) {
  stopPage();
  replace(top, h("div", { class: "header-row" }, h("h1", {}, "Compute")));
  const input = h("input", { id: "token", type: "password", autocomplete: "off", required: true,
    "aria-describedby": "token-help", spellcheck: "false" });
  const status = h("div", { "aria-live": "polite" }, problem ? errorBox(problem) : null);
  const form = h("form", { class: "card signin", on: { submit: async (e) => {
    e.preventDefault();
    replace(status);
    try {
      await signIn(input.value.trim());
      input.value = "";
      start();
    } catch (err) {
      replace(status, errorBox(err.message));
    }
  } } },
  h("h2", {}, "Sign in"),
  h("label", { for: "token" }, "API token"), input,
  h("p", { id: "token-help", class: "muted" }, "Paste the admin token `gpuprov dev` printed, or a project token. It opens a session in this browser and is not kept."),
  h("button", { type: "submit" }, "Sign in"), status);
  replace(main, form);
  input.focus();
}

async function start() {
  const page = PAGES[location.pathname] || PAGES["/studio/compute/cloud"];
  if (!(await loadSession())) return signInForm();
  document.title = `${page.title} · Compute · gpuprov`;
  showHeader(page);
  replace(main, h("p", { class: "muted" }, "Loading…"));
  try {
    const module = await page.load();
    stopPage = module.render({ main, top, params: new URLSearchParams(location.search), restoreHeader: () => showHeader(page) }) || (() => {});
  } catch (err) {
    replace(main, errorBox(err.message));
  }
}

onSignedOut(() => signInForm("Your session ended: sign in again."));
start();
