// fairshare console: plain JavaScript, no build step, no dependencies. Served by the
// service at /ui/ under a strict Content-Security-Policy (no inline script or style:
// every element is built with the DOM API and text goes in as textContent). It reads
// and acts through the /v1 API with the operator's token, polling every 2 s.
"use strict";

const POLL_MS = 2000;
const SHARES_POLL_MS = 5000;
const TOKEN_KEY = "fairshare.token";
const SVG = "http://www.w3.org/2000/svg";

const state = {
  role: null, // "admin" | "submitter" | null (unknown / no valid token)
  users: [],
  scheduler: null,
  sort: { key: "share", desc: true },
  jobsQuery: null,
  jobsNext: null,
  timer: null,
  lastShares: 0,
  lastLogs: 0,
  busy: false,
  again: false,
  jobsAppended: false,
};

// ------------------------------------------------------------------ helpers

function $(id) {
  return document.getElementById(id);
}

/** Builds an element: el("td", {class: "num"}, "text", child, ...). */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function pct(x) {
  return Number.isFinite(x) ? (x * 100).toFixed(1) + "%" : "–";
}

function num(x, digits = 3) {
  if (!Number.isFinite(x)) return "–";
  if (x === 0) return "0";
  return Math.abs(x) >= 1000 || Math.abs(x) < 0.001 ? x.toExponential(2) : String(+x.toPrecision(digits));
}

function bytes(b) {
  if (!b) return "0";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) {
    b /= 1024;
    i++;
  }
  return +b.toFixed(1) + " " + units[i];
}

function resources(r) {
  if (!r) return "–";
  const parts = [num(r.cpu) + " cpu"];
  if (r.gpu) parts.push(num(r.gpu) + " gpu");
  if (r.memory_bytes) parts.push(bytes(r.memory_bytes));
  // Custom resources by name (a pool's slots, QPUs): omitted by the API when none.
  for (const name of Object.keys(r.custom || {}).sort()) parts.push(num(r.custom[name]) + " " + name);
  return parts.join(" · ");
}

function time(t) {
  if (!t) return "–";
  const d = new Date(t);
  return d.toLocaleString(undefined, { hour12: false });
}

/** One URL path segment: encodeURIComponent, plus dots, so that no id can become a
 * `.` or `..` segment that browsers normalise away. */
function seg(s) {
  return encodeURIComponent(s).replace(/\./g, "%2E");
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

/** The service's error, with the field at fault when it names one. */
class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    const field = e.details && e.details.field ? ` (${e.details.field})` : "";
    super((e.message || `HTTP ${status}`) + field);
    this.status = status;
    this.code = e.code;
  }
}

async function api(method, path, body) {
  const headers = { accept: "application/json" };
  const t = token();
  if (t) headers.authorization = "Bearer " + t;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}

function setStatus(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("error", !!isError);
}

// ------------------------------------------------------------------ token and role

async function loadRole() {
  try {
    const who = await api("GET", "/v1/whoami");
    state.role = who.role === "none" ? null : who.role;
    if (!state.role) setStatus(token() ? "That token is not valid here." : "Type a token (admin or submitter) to see the scheduler.", true);
  } catch (e) {
    state.role = null;
    if (e.status === 401) setStatus("The service refused the token (revoked?): type a valid one above.", true);
    else setStatus("Cannot reach the service: " + e.message, true);
  }
  showRole();
}

/** The token stopped working (revoked, or the service's tokens changed): act as with
 * no token, and poll nothing until one is typed (every call would be a 401). */
function tokenRefused() {
  state.role = null;
  showRole();
  if (route().view === "users") renderUsers();
  const cancel = $("job-cancel");
  cancel.disabled = true;
  cancel.title = "needs an admin token";
  setStatus("The service refused the token (revoked?): type a valid one above.", true);
}

function showRole() {
  const r = $("role");
  r.textContent = state.role === "admin" ? "admin" : state.role === "submitter" ? "submitter: read only" : "no token";
  r.className = "role " + (state.role || "none");
  document.body.classList.toggle("read-only", state.role !== "admin");
}

function isAdmin() {
  return state.role === "admin";
}

// ------------------------------------------------------------------ users

/** Weighted fair share as the service computes it (fairshare_user_fair_share): weight
 * over the summed weights of users with queued or outstanding jobs. */
function fairShares(users) {
  const active = users.filter((u) => u.queued > 0 || u.running > 0);
  const total = active.reduce((s, u) => s + u.weight, 0);
  const out = new Map();
  for (const u of users) out.set(u.id, total > 0 && (u.queued > 0 || u.running > 0) ? u.weight / total : 0);
  return out;
}

/** Place of each user in the order the next cycle serves them (1 = next); paused
 * users are in the arbiter's order but skipped, so they get no place. */
function nextPositions(scheduler, users) {
  const paused = new Set(users.filter((u) => u.paused).map((u) => u.id));
  const m = new Map();
  ((scheduler && scheduler.next_users) || []).filter((u) => !paused.has(u.user)).forEach((u, i) => m.set(u.user, i + 1));
  return m;
}

function sortValue(u, key, fair, next) {
  switch (key) {
    case "id":
      return u.id;
    case "paused":
      return u.paused ? 1 : 0;
    case "share":
      return u.share;
    case "next":
      return next.get(u.id) || Infinity;
    default:
      return u[key];
  }
}

function shareBar(share, fair) {
  const w = 120;
  const h = 14;
  const s = svg("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", class: "bar" });
  s.setAttribute("aria-label", `share ${pct(share)} against fair share ${pct(fair)}`);
  s.append(svg("rect", { x: 0, y: 0, width: w, height: h, class: "bar-bg" }));
  const over = share > fair + 1e-9 && fair > 0;
  s.append(svg("rect", { x: 0, y: 2, width: Math.min(1, share) * w, height: h - 4, class: over ? "bar-over" : "bar-share" }));
  if (fair > 0) {
    const x = Math.min(1, fair) * w;
    s.append(svg("line", { x1: x, x2: x, y1: 0, y2: h, class: "bar-fair" }));
  }
  return s;
}

/** Re-renders rows without losing the keyboard: the focused control carries a stable
 * key (data-focus-key, e.g. user id + action), and the control with the same key in
 * the new rows gets the focus back. */
function keepFocus(render) {
  const a = document.activeElement;
  const key = a && a.dataset ? a.dataset.focusKey : null;
  render();
  if (key && (!a.isConnected || a.dataset.focusKey !== key)) focusKey(key);
}

function focusKey(key) {
  for (const e of document.querySelectorAll("[data-focus-key]")) {
    if (e.dataset.focusKey === key) {
      e.focus({ preventScroll: true });
      return;
    }
  }
}

function renderUsers() {
  keepFocus(renderUsersRows);
}

function renderUsersRows() {
  const users = state.users;
  const fair = fairShares(users);
  const next = nextPositions(state.scheduler, users);
  const { key, desc } = state.sort;
  const rows = [...users].sort((a, b) => {
    const va = sortValue(a, key, fair, next);
    const vb = sortValue(b, key, fair, next);
    let c = va < vb ? -1 : va > vb ? 1 : 0;
    if (desc) c = -c;
    // Ties: the heavier user first, then by id, so the order is stable.
    return c || b.share - a.share || b.queued - a.queued || (a.id < b.id ? -1 : 1);
  });
  for (const th of document.querySelectorAll("#users-table th")) {
    const b = th.querySelector("button[data-sort]");
    if (!b) continue;
    th.setAttribute("aria-sort", b.dataset.sort === key ? (desc ? "descending" : "ascending") : "none");
  }
  const tbody = $("users-table").tBodies[0];
  const admin = isAdmin();
  const why = admin ? null : "needs an admin token";
  tbody.replaceChildren(
    ...rows.map((u) => {
      const f = fair.get(u.id);
      return el(
        "tr",
        { "data-user": u.id, class: u.paused ? "paused" : null },
        el(
          "th",
          { scope: "row", class: "user" },
          el("a", { href: "#jobs?user=" + encodeURIComponent(u.id), class: "id", title: u.display_name ? u.display_name + " (" + u.id + ")" : u.id, "data-focus-key": "user\u0000" + u.id }, u.display_name || u.id),
        ),
        el("td", { class: "num weight" }, num(u.weight, 4)),
        el("td", { class: "paused-cell" }, u.paused ? "paused" : "no"),
        el("td", { class: "num queued" }, u.queued),
        el("td", { class: "num running" }, u.running),
        el("td", { class: "alloc" }, resources(u.allocation)),
        el("td", { class: "share" }, shareBar(u.share, f), el("span", { class: "share-text" }, `${pct(u.share)} / ${pct(f)}`)),
        el("td", { class: "num usage" }, pct(u.usage)),
        el("td", { class: "num key" }, num(u.key)),
        el("td", { class: "num next" }, next.get(u.id) || "–"),
        el(
          "td",
          { class: "actions" },
          el("button", {
            type: "button",
            class: "pause",
            disabled: !admin,
            title: why,
            text: u.paused ? "Resume" : "Pause",
            "aria-label": (u.paused ? "Resume " : "Pause ") + u.id,
            "data-focus-key": "pause\u0000" + u.id,
            onclick: () => confirmPause(u),
          }),
          el("button", {
            type: "button",
            class: "edit",
            disabled: !admin,
            title: why,
            text: "Edit",
            "aria-label": "Edit weight and limits of " + u.id,
            "data-focus-key": "edit\u0000" + u.id,
            onclick: () => editUser(u),
          }),
        ),
      );
    }),
  );
  if (rows.length === 0) tbody.append(el("tr", {}, el("td", { colspan: 11, class: "empty" }, "No users yet.")));
}

async function refreshUsers() {
  const [users, scheduler] = await Promise.all([api("GET", "/v1/users"), api("GET", "/v1/scheduler")]);
  state.users = users;
  state.scheduler = scheduler;
  renderUsers();
}

// ------------------------------------------------------------------ groups

/** The tree of groups from GET /v1/groups (path order: a parent before its children),
 * each node a list item with its share bar against its fair share, its figures and,
 * for an admin, pause or resume. */
function renderGroups(groups) {
  const items = new Map();
  const roots = [];
  for (const g of groups) {
    const name = g.path.split("/").pop();
    const bar = shareBar(g.share, g.fair_share);
    const pause = el(
      "button",
      { type: "button", class: "pause", "data-focus-key": "group:" + g.path, disabled: !isAdmin() },
      g.paused ? "Resume" : "Pause",
    );
    pause.addEventListener("click", () => confirmGroupPause(g));
    const users = g.users.length ? g.users.join(", ") : "no users";
    const li = el(
      "li",
      { "data-group": g.path },
      el(
        "div",
        { class: "group-row" },
        el("span", { class: "group-name", title: g.path }, name),
        el("span", { class: "weight", title: "weight" }, "w " + num(g.weight)),
        bar,
        el("span", { class: "group-figures" }, `${pct(g.share)} of ${pct(g.fair_share)} · ${g.running} running · ${g.queued} queued`),
        el("span", { class: "paused-cell" }, g.paused ? "paused" : ""),
        pause,
      ),
      el("div", { class: "group-users hint" }, users),
    );
    items.set(g.path, li);
    const parent = g.parent && items.get(g.parent);
    if (parent) {
      let ul = parent.querySelector(":scope > ul");
      if (!ul) {
        ul = el("ul", {});
        parent.append(ul);
      }
      ul.append(li);
    } else roots.push(li);
  }
  keepFocus(() => $("groups-tree").replaceChildren(...roots));
  $("groups-empty").hidden = groups.length > 0;
}

async function refreshGroups() {
  renderGroups(await api("GET", "/v1/groups"));
}

function confirmGroupPause(g) {
  const verb = g.paused ? "resume" : "pause";
  const text = g.paused
    ? `Resume group ${g.path}? Its users' queued jobs become eligible at the next cycle.`
    : `Pause group ${g.path}? Nothing new of its users (and its subgroups' users) is dispatched; ${g.queued} queued jobs stay and ${g.running} running jobs go on.`;
  openConfirm((g.paused ? "Resume " : "Pause ") + g.path, text, [], () =>
    api("POST", `/v1/groups/${g.path.split("/").map(seg).join("/")}/${verb}`),
  );
}

// ------------------------------------------------------------------ confirmation dialog

let confirmAction = null;
let confirmOpener = null;

function openConfirm(title, text, fields, action) {
  confirmOpener = document.activeElement;
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-fields").replaceChildren(...fields);
  $("confirm-error").textContent = "";
  confirmAction = action;
  $("confirm").showModal();
  // Cancel first when there is nothing to type: Enter right after opening must not act.
  const first = $("confirm-fields").querySelector("input");
  (first || $("confirm-no")).focus();
}

async function onConfirm(ev) {
  ev.preventDefault();
  if (!confirmAction) return;
  const yes = $("confirm-yes");
  yes.disabled = true;
  try {
    await confirmAction();
    confirmAction = null;
    $("confirm").close();
    await refresh();
  } catch (e) {
    $("confirm-error").textContent = e.message;
  } finally {
    yes.disabled = false;
  }
}

function confirmPause(u) {
  const verb = u.paused ? "resume" : "pause";
  const text = u.paused
    ? `Resume ${u.id}? Its queued jobs become eligible at the next cycle.`
    : `Pause ${u.id}? Nothing new of this user is dispatched; its ${u.queued} queued jobs stay and its ${u.running} running jobs go on.`;
  openConfirm((u.paused ? "Resume " : "Pause ") + u.id, text, [], () =>
    api("POST", `/v1/users/${seg(u.id)}/${verb}`),
  );
}

function field(label, id, value, hint) {
  return el(
    "label",
    { class: "field" },
    el("span", {}, label),
    el("input", { id, value: value === null || value === undefined ? "" : value, inputmode: "decimal", spellcheck: "false" }),
    hint ? el("small", {}, hint) : null,
  );
}

/** A number from a form field; "" means null (the default). */
const DECIMAL_RE = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

function numberOrNull(id, name, apiField) {
  const v = $(id).value.trim();
  if (v === "") return null;
  // Decimal only: Number() would also take 0x10, 0b11, 0o7 and Infinity.
  const n = DECIMAL_RE.test(v) ? Number(v) : NaN;
  if (!Number.isFinite(n)) throw new Error(`${name}: not a decimal number (${apiField})`);
  return n;
}

function editUser(u) {
  const lim = u.max_resources || {};
  openConfirm(
    "Weight and limits of " + u.id,
    "Empty limits go back to the configured defaults; an empty cap leaves that resource uncapped.",
    [
      field("Weight", "f-weight", u.weight, "relative, 1e-6 to 1e6"),
      field("Max running jobs", "f-max-running", u.max_running_jobs, `default ${u.effective_max_running_jobs}`),
      field("Max queued jobs", "f-max-queued", u.max_queued_jobs, `default ${u.effective_max_queued_jobs}`),
      field("Cap: cores", "f-cap-cpu", lim.cpu),
      field("Cap: GPUs", "f-cap-gpu", lim.gpu),
    ],
    () => {
      const weight = numberOrNull("f-weight", "weight", "weight");
      const cpu = numberOrNull("f-cap-cpu", "cap on cores", "max_resources.cpu");
      const gpu = numberOrNull("f-cap-gpu", "cap on GPUs", "max_resources.gpu");
      const body = {
        max_running_jobs: numberOrNull("f-max-running", "max running jobs", "max_running_jobs"),
        max_queued_jobs: numberOrNull("f-max-queued", "max queued jobs", "max_queued_jobs"),
        max_resources: cpu === null && gpu === null ? null : { ...(cpu === null ? {} : { cpu }), ...(gpu === null ? {} : { gpu }) },
      };
      if (weight !== null) body.weight = weight;
      return api("PUT", `/v1/users/${seg(u.id)}`, body);
    },
  );
}

// ------------------------------------------------------------------ clusters

/** The rows of a capacity table: cores, GPUs and memory, then each custom resource
 * the capacity names, as [label, data-resource, value of an Amounts]. */
function resourceRows(capacity) {
  const rows = [
    ["cores", "cpu", (a) => num(a.cpu)],
    ["GPUs", "gpu", (a) => num(a.gpu)],
    ["memory", "memory_bytes", (a) => bytes(a.memory_bytes)],
  ];
  for (const name of Object.keys(capacity.custom || {}).sort())
    rows.push([name, "custom." + name, (a) => num((a.custom || {})[name] || 0)]);
  return rows;
}

function capacityTable(c, columns) {
  return el(
    "table",
    { class: "grid" },
    el("thead", {}, el("tr", {}, ...["resource", ...columns.map(([h]) => h)].map((h) => el("th", { scope: "col" }, h)))),
    el(
      "tbody",
      {},
      ...c.rows.map(([label, k, f]) =>
        el("tr", { "data-resource": k }, el("th", { scope: "row" }, label), ...columns.map(([, field]) => el("td", { class: "num" }, f(c.view[field])))),
      ),
    ),
  );
}

/** Whether the end-of-job notifications of a cluster's jobs arrive (issue 49): the
 * service's own message when they do not, else what it counts. */
function notificationsLine(n) {
  if (!n) return null;
  const text =
    n.message ||
    (n.state === "off"
      ? `end-of-job notifications off: polled every ${n.poll_interval_ms} ms`
      : `end-of-job notifications arriving (${n.received} received, ${n.missed} missed)`);
  return el("p", { class: "notifications " + (n.message ? "warn" : "ok"), "data-state": n.state }, text);
}

/** A Ray cluster: health and, per resource, capacity, this service's use, others' use
 * (as Ray reports it) and free; whether its jobs' notifications arrive. */
function clusterCard(c) {
  const g = c.growth;
  const columns = [
    [g ? "capacity (can grow to)" : "capacity", "capacity"],
    ...(g ? [["alive now", "alive"]] : []),
    ["used by this service", "outstanding"],
    ["used by others", "used_by_others"],
    ["free", "free"],
  ];
  return el(
    "article",
    { class: "cluster", "data-cluster": c.name, "data-kind": "ray" },
    el(
      "h3",
      {},
      c.name + " ",
      el("span", { class: "badge " + (c.healthy ? "ok" : "bad") }, c.healthy ? "healthy" : "unhealthy"),
      ...(g ? [" ", el("span", { class: "badge autoscaling" }, "autoscaling")] : []),
    ),
    capacityTable({ view: g ? { ...c, alive: g.alive } : c, rows: resourceRows(c.capacity) }, columns),
    growthLine(g),
    notificationsLine(c.notifications),
  );
}

/** An autoscaling cluster (issue 44): its node types, the nodes Ray is adding, the
 * jobs this service placed in Ray for them, and which node types are held back after
 * scale-ups that did not come. */
function growthLine(g) {
  if (!g) return null;
  const types = g.node_types
    .map((t) => `${t.name} ×${t.min_count === t.max_count ? t.max_count : `${t.min_count}–${t.max_count}`} (${t.resources.cpu} cpu${t.resources.gpu ? `, ${t.resources.gpu} gpu` : ""})`)
    .join(", ");
  const parts = [
    `node types: ${types}`,
    `${g.nodes_starting} node${g.nodes_starting === 1 ? "" : "s"} starting`,
    `${g.jobs_waiting_in_ray} job${g.jobs_waiting_in_ray === 1 ? "" : "s"} waiting in Ray for capacity (${g.demand_in_ray.cpu} cpu)`,
  ];
  for (const t of g.node_types.filter((t) => t.held_for_seconds != null))
    parts.push(`${t.name} held back for ${Math.ceil(t.held_for_seconds)} s: ${t.failed_scale_ups} scale-up${t.failed_scale_ups === 1 ? "" : "s"} in a row did not come within monitor.scale_up_timeout`);
  return el("p", { class: "growth " + (g.growth_held_for_seconds != null ? "warn" : "ok") }, parts.join(" · "));
}

/** A pool (kind "pool", DESIGN §3 "Admission"): capacity fairshare admits jobs to and
 * a runner runs. Nobody else uses it and nobody reports it, so it has no "used by
 * others"; only the resources it was configured with are shown, and how many of its
 * jobs wait for the runner (ADMITTED) or run (RUNNING), each a link to those jobs. */
function poolCard(c) {
  const cap = c.capacity;
  const rows = resourceRows(cap).filter(([, k]) => (k.startsWith("custom.") ? true : cap[k] > 0));
  const count = (status, n, cls) =>
    el(
      "a",
      { href: "#jobs?" + new URLSearchParams({ status, pool: c.name }).toString(), class: cls, "data-focus-key": `pool\u0000${c.name}\u0000${status}` },
      `${n ?? "–"} ${status}`,
    );
  return el(
    "article",
    { class: "cluster pool", "data-cluster": c.name, "data-kind": "pool" },
    el("h3", {}, c.name + " ", el("span", { class: "badge pool" }, "pool")),
    capacityTable({ view: c, rows }, [
      ["capacity", "capacity"],
      ["used by this service", "outstanding"],
      ["free", "free"],
    ]),
    el("p", { class: "pool-jobs" }, count("ADMITTED", c.admitted_jobs, "admitted-count"), " · ", count("RUNNING", c.running_jobs, "running-count")),
  );
}

async function refreshClusters() {
  const s = await api("GET", "/v1/scheduler");
  state.scheduler = s;
  const pools = s.clusters.filter((c) => c.kind === "pool");
  const cards = s.clusters.filter((c) => c.kind !== "pool").map(clusterCard);
  if (cards.length === 0) {
    const lead = s.leadership && !s.leadership.is_leader;
    cards.push(
      el("p", {}, lead ? `This replica follows; the leader (${s.leadership.leader || "none"}) shows clusters and pools.` : pools.length ? "No Ray cluster." : "No cluster has answered yet."),
    );
  }
  keepFocus(() => {
    $("clusters").replaceChildren(...cards);
    $("pools").replaceChildren(...pools.map(poolCard));
  });
  $("pools-section").hidden = pools.length === 0;
  const c = s.last_cycle;
  $("last-cycle").textContent =
    `${s.cycles} cycles; ${s.queued_jobs} queued, ${s.outstanding_jobs} outstanding jobs.` +
    (c ? ` Last cycle ${time(c.at)}, ${(c.duration_seconds * 1000).toFixed(1)} ms, ${c.grants.length} grants.` : "");
}

// ------------------------------------------------------------------ jobs

const STATUSES = ["QUEUED", "DISPATCHING", "ADMITTED", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"];

function jobsQueryFromHash(q) {
  const p = new URLSearchParams(q || "");
  let status = (p.get("status") || "").toUpperCase();
  // An unknown status from a hand-typed URL would only earn a 422: search without it.
  if (status && !STATUSES.includes(status)) {
    setStatus(`Unknown status ${status}: showing all statuses`, true);
    status = "";
  }
  return { user: p.get("user") || "", status, pool: p.get("pool") || "", external_id: p.get("external_id") || "" };
}

function jobsUrl(q, after) {
  const p = new URLSearchParams();
  for (const k of ["user", "status", "pool", "external_id"]) if (q[k]) p.set(k, q[k]);
  p.set("limit", "50");
  if (after) p.set("after", after);
  return "/v1/jobs?" + p.toString();
}

function jobRow(j) {
  return el(
    "tr",
    { "data-job": j.id },
    el("td", {}, el("a", { href: "#job/" + j.id, class: "mono", title: j.id, "data-focus-key": "job\u0000" + j.id }, j.id.slice(0, 8) + "…" + j.id.slice(-4))),
    el("td", {}, el("span", { class: "id", title: j.user }, j.user)),
    el("td", {}, el("span", { class: "id", title: j.external_id || null }, j.external_id || "–")),
    el("td", {}, el("span", { class: "st st-" + j.status.toLowerCase() }, j.status)),
    el("td", { class: "resources" }, resources(j.resources)),
    el("td", {}, time(j.submitted_at)),
    el("td", { class: "pool" }, j.pool ? el("a", { href: "#jobs?pool=" + encodeURIComponent(j.pool), class: "id", title: j.pool }, j.pool) : "–"),
    el("td", {}, j.cluster || "–"),
    // DESIGN §2 "Estimates": a QUEUED job's estimated start and its place among all
    // waiting jobs for the same capacity.
    // A job the forward run did not reach: the instant it starts no sooner than.
    el("td", { class: "estimate" }, j.estimated_start ? `${time(j.estimated_start)} (#${j.position})` : j.estimated_after ? `after ${time(j.estimated_after)}` : "–"),
  );
}

async function refreshJobs(append) {
  const q = state.jobsQuery || { user: "", status: "", pool: "", external_id: "" };
  const page = await api("GET", jobsUrl(q, append ? state.jobsNext : null));
  const tbody = $("jobs-table").tBodies[0];
  const rows = page.jobs.map(jobRow);
  state.jobsAppended = append;
  if (append) tbody.append(...rows);
  else
    keepFocus(() => {
      tbody.replaceChildren(...rows);
      if (rows.length === 0) tbody.append(el("tr", {}, el("td", { colspan: 9, class: "empty" }, "No jobs match.")));
    });
  state.jobsNext = page.next_after;
  $("jobs-more").hidden = !page.next_after;
}

let currentJob = null;

async function refreshJob(id) {
  // The id goes into API paths: only a UUID, never `../users` or the like.
  if (!UUID_RE.test(id)) {
    currentJob = null;
    $("h-job").textContent = "No such job";
    $("job-fields").replaceChildren(el("dt", {}, "Id"), el("dd", {}, id));
    $("job-timeline").replaceChildren();
    $("job-logs").textContent = "";
    $("job-cancel").disabled = true;
    setStatus("No such job: " + id, true);
    throw Object.assign(new Error("no such job"), { quiet: true });
  }
  const [j, ev] = await Promise.all([api("GET", "/v1/jobs/" + id), api("GET", `/v1/jobs/${id}/events`)]);
  currentJob = j;
  $("h-job").textContent = "Job " + j.id;
  const rows = [
    ["Status", el("span", { class: "st st-" + j.status.toLowerCase(), id: "job-status" }, j.status)],
    ["User", el("a", { href: "#jobs?user=" + encodeURIComponent(j.user) }, j.user)],
    ["External id", j.external_id || "–"],
    ["Pending reason", j.pending_reason || "–"],
    ["Queue position", j.queue_position || "–"],
    ...(j.status === "QUEUED"
      ? [
          ["Expected start", el("span", { id: "job-estimate" }, j.estimated_start ? time(j.estimated_start) : j.estimated_after ? `not before ${time(j.estimated_after)} (the estimates stopped before this job: their horizon, or past the jobs they read)` : "– (not estimated: it cannot start as things stand, or it is past the jobs the estimates read)")],
          ["Position among waiting jobs", j.position || "–"],
          ["Run time expected from", j.estimate_basis ? { max_runtime: "its max_runtime_s", learned: "its user's past runs of this entrypoint", default: "the configured default" }[j.estimate_basis] : "–"],
        ]
      : []),
    ["Resources", resources(j.resources)],
    ["Priority", j.priority],
    ["Max runtime", j.max_runtime_s ? j.max_runtime_s + " s" : "default"],
    // A pool job (DESIGN §3 "Admission"): its runner, not Ray, runs it; its lease
    // says until when the runner's last report holds the job's capacity.
    ...(j.pool
      ? [
          ["Pool", el("a", { href: "#jobs?pool=" + encodeURIComponent(j.pool), id: "job-pool" }, j.pool)],
          ["Runner's lease until", el("span", { id: "job-lease" }, j.lease_expires_at ? time(j.lease_expires_at) : "– (no runner holds it)")],
          ["Stop requested", el("span", { id: "job-stop-requested" }, j.stop_requested ? "yes: waiting for the runner to stop it" : "no")],
        ]
      : [["Ray cluster", j.cluster || "–"]]),
    ["Message", j.message || "–"],
    ["Submitted", time(j.submitted_at)],
    [j.pool ? "Admitted" : "Dispatched", time(j.dispatched_at)],
    ["Started", time(j.started_at)],
    ["Finished", time(j.finished_at)],
    ["Entrypoint", el("code", {}, j.entrypoint)],
  ];
  $("job-fields").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  $("job-timeline").replaceChildren(
    ...ev.events.map((e) =>
      el(
        "li",
        { "data-to": e.to },
        el("time", { datetime: e.at }, time(e.at)),
        " ",
        el("strong", {}, (e.from ? e.from + " → " : "") + e.to),
        e.detail ? el("span", { class: "detail" }, " — " + e.detail) : null,
      ),
    ),
    // The timeline goes on with what is expected: the estimated start.
    ...(j.status === "QUEUED" && j.estimated_start
      ? [
          el(
            "li",
            { "data-to": "expected", class: "expected", id: "job-expected" },
            el("time", { datetime: j.estimated_start }, time(j.estimated_start)),
            " ",
            el("strong", {}, "expected to start"),
            el("span", { class: "detail" }, ` — position ${j.position} among the waiting jobs`),
          ),
        ]
      : []),
  );
  const finished = ["SUCCEEDED", "FAILED", "STOPPED"].includes(j.status);
  const cancel = $("job-cancel");
  cancel.disabled = finished || !isAdmin();
  cancel.title = finished ? "the job has ended" : isAdmin() ? "" : "needs an admin token";
  if (j.pool) $("job-logs").textContent = `(a job of pool ${j.pool}: its runner has its logs, not Ray)`;
  else if (!j.dispatched_at) $("job-logs").textContent = "(not dispatched to Ray yet)";
  const now = Date.now();
  // Ray has logs only for a job it was given (409 otherwise), never for a pool's.
  if (!j.pool && j.dispatched_at && now - state.lastLogs >= 5000) {
    state.lastLogs = now;
    try {
      const logs = await api("GET", `/v1/jobs/${id}/logs`);
      $("job-logs").textContent = logs.logs || "(empty)";
    } catch (e) {
      $("job-logs").textContent = e.message;
    }
  }
}

function confirmCancel() {
  const j = currentJob;
  if (!j) return;
  openConfirm(
    "Cancel job",
    j.pool
      ? `Cancel ${j.id} of ${j.user} (${j.status}, pool ${j.pool})? A queued job stops at once; an admitted or running one is asked of its runner, and stops when the runner reports it.`
      : `Cancel ${j.id} of ${j.user} (${j.status})? A queued job stops at once; a running one is stopped in Ray.`,
    [],
    () => api("POST", `/v1/jobs/${j.id}/cancel`),
  );
}

// ------------------------------------------------------------------ shares over time

function sharesPanel(user, points, t0, t1) {
  const w = 560;
  const h = 110;
  const pad = { l: 36, r: 8, t: 18, b: 18 };
  const max = Math.max(0.05, ...points.flatMap((p) => [p.share, p.fair]));
  const x = (t) => pad.l + ((t - t0) / (t1 - t0)) * (w - pad.l - pad.r);
  const y = (v) => h - pad.b - (v / max) * (h - pad.t - pad.b);
  const last = points[points.length - 1];
  const s = svg("svg", { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: "img", class: "panel" });
  s.setAttribute("aria-label", `${user}: share now ${pct(last.share)}, fair share ${pct(last.fair)}`);
  const title = svg("text", { x: pad.l, y: 12, class: "panel-title" });
  // A long id is cut to fit the panel; the tooltip has it whole.
  const shown = user.length > 48 ? user.slice(0, 47) + "…" : user;
  title.textContent = `${shown} — now ${pct(last.share)} of ${pct(last.fair)} fair`;
  const tip = svg("title", {});
  tip.textContent = user;
  title.append(tip);
  s.append(title);
  for (const v of [0, max]) {
    s.append(svg("line", { x1: pad.l, x2: w - pad.r, y1: y(v), y2: y(v), class: "axis" }));
    const t = svg("text", { x: pad.l - 4, y: y(v) + 4, class: "tick", "text-anchor": "end" });
    t.textContent = pct(v).replace(".0%", "%");
    s.append(t);
  }
  const span = Math.round((t1 - t0) / 60000);
  for (const [label, at] of [[`−${span} min`, t0], ["now", t1]]) {
    const t = svg("text", { x: x(at), y: h - 4, class: "tick", "text-anchor": at === t0 ? "start" : "end" });
    t.textContent = label;
    s.append(t);
  }
  const line = (k, cls) =>
    svg("polyline", { points: points.map((p) => `${x(p.t).toFixed(1)},${y(p[k]).toFixed(1)}`).join(" "), class: cls });
  s.append(line("fair", "fair-line"), line("share", "share-line"));
  return s;
}

async function refreshShares() {
  const h = await api("GET", "/v1/shares");
  // The hour, or less while the service has not kept an hour yet (at least 2 min).
  const t1 = Date.now();
  const first = h.samples.length ? Date.parse(h.samples[0].at) : t1;
  const t0 = Math.max(t1 - h.history_seconds * 1000, Math.min(first, t1 - 120000));
  const series = new Map();
  for (const sample of h.samples) {
    const t = Date.parse(sample.at);
    const seen = new Set();
    for (const u of sample.users) {
      if (!series.has(u.user)) series.set(u.user, []);
      series.get(u.user).push({ t, share: u.share, fair: u.fair_share });
      seen.add(u.user);
    }
    // A user absent from a sample had nothing queued or running: 0 and 0.
    for (const [user, pts] of series) if (!seen.has(user)) pts.push({ t, share: 0, fair: 0 });
  }
  // The users with the most share over the hour first; at most 8 panels.
  const ranked = [...series.entries()]
    .map(([user, pts]) => ({ user, pts, weight: pts.reduce((s, p) => s + p.share, 0) }))
    .sort((a, b) => b.weight - a.weight || (a.user < b.user ? -1 : 1))
    .slice(0, 8);
  const box = $("shares-chart");
  if (ranked.length === 0) {
    box.replaceChildren(el("p", {}, `No samples with active users yet (one every ${h.sample_every_seconds} s while this replica leads).`));
    return;
  }
  box.replaceChildren(...ranked.map((r) => sharesPanel(r.user, r.pts, t0, t1)));
}

// ------------------------------------------------------------------ usage

const USAGE_COLORS = ["#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5", "#9c6b4e", "#9498a0"];

/** The group's label: the root for "". */
function groupLabel(g) {
  return g === "" ? "(root)" : g;
}

/** A stacked bar per day: each group's core-hours, in the order of `groups`. */
function usageChart(report, groups) {
  const days = [];
  for (let t = Date.parse(report.from); t < Date.parse(report.to); t += 86400000) days.push(t);
  const perDay = new Map(days.map((d) => [d, new Map()]));
  for (const r of report.rows) {
    const d = perDay.get(Date.parse(r.start));
    if (d) d.set(r.key, (d.get(r.key) || 0) + r.core_seconds / 3600);
  }
  const totals = days.map((d) => [...perDay.get(d).values()].reduce((a, b) => a + b, 0));
  const max = Math.max(1e-9, ...totals);
  const w = 640;
  const h = 180;
  const pad = { l: 48, r: 8, t: 12, b: 20 };
  const bw = (w - pad.l - pad.r) / Math.max(1, days.length);
  const y = (v) => h - pad.b - (v / max) * (h - pad.t - pad.b);
  const s = svg("svg", { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: "img", class: "panel usage" });
  s.setAttribute("aria-label", `core-hours per day by group, at most ${num(max)} in a day`);
  for (const v of [0, max]) {
    s.append(svg("line", { x1: pad.l, x2: w - pad.r, y1: y(v), y2: y(v), class: "axis" }));
    const t = svg("text", { x: pad.l - 4, y: y(v) + 4, class: "tick", "text-anchor": "end" });
    t.textContent = num(v);
    s.append(t);
  }
  days.forEach((d, i) => {
    let base = 0;
    groups.forEach((g, k) => {
      const v = perDay.get(d).get(g) || 0;
      if (v <= 0) return;
      const rect = svg("rect", {
        x: (pad.l + i * bw + 1).toFixed(1),
        y: y(base + v).toFixed(1),
        width: Math.max(1, bw - 2).toFixed(1),
        height: Math.max(0.5, y(base) - y(base + v)).toFixed(1),
        fill: USAGE_COLORS[k % USAGE_COLORS.length],
        "data-group": g,
        "data-day": new Date(d).toISOString().slice(0, 10),
        "data-core-hours": String(v),
      });
      const tip = svg("title", {});
      tip.textContent = `${groupLabel(g)}, ${new Date(d).toISOString().slice(0, 10)}: ${num(v)} core-hours`;
      rect.append(tip);
      s.append(rect);
      base += v;
    });
  });
  for (const [label, at] of [[new Date(days[0]).toISOString().slice(0, 10), 0], ["today", days.length - 1]]) {
    const t = svg("text", { x: pad.l + at * bw + (at ? bw : 0), y: h - 4, class: "tick", "text-anchor": at ? "end" : "start" });
    t.textContent = label;
    s.append(t);
  }
  return s;
}

async function refreshUsage() {
  const report = await api("GET", "/v1/usage?by=group&step=day");
  const sums = new Map();
  for (const r of report.rows) {
    const g = sums.get(r.key) || { core: 0, gpu: 0, mem: 0, ok: 0, failed: 0, stopped: 0, p90: null };
    g.core += r.core_seconds / 3600;
    g.gpu += r.gpu_seconds / 3600;
    g.mem += r.memory_byte_seconds / 3600 / 1073741824;
    g.ok += r.jobs.succeeded;
    g.failed += r.jobs.failed;
    g.stopped += r.jobs.stopped;
    // The largest daily p90: an upper bound for the 30 days.
    if (r.wait_seconds.p90 !== null) g.p90 = Math.max(g.p90 ?? 0, r.wait_seconds.p90);
    sums.set(r.key, g);
  }
  // Heaviest first; the colors follow this order.
  const groups = [...sums.keys()].sort((a, b) => sums.get(b).core - sums.get(a).core || (a < b ? -1 : 1));
  const box = $("usage-chart");
  if (groups.length === 0) box.replaceChildren(el("p", {}, "No usage in the last 30 days."));
  else box.replaceChildren(usageChart(report, groups));
  $("usage-table").tBodies[0].replaceChildren(
    ...groups.map((g, k) => {
      const x = sums.get(g);
      const swatch = svg("svg", { width: 10, height: 10, class: "swatch" });
      swatch.append(svg("rect", { width: 10, height: 10, fill: USAGE_COLORS[k % USAGE_COLORS.length] }));
      return el(
        "tr",
        { "data-group": g },
        el("th", { scope: "row" }, swatch, " " + groupLabel(g)),
        el("td", { class: "core-hours" }, num(x.core)),
        el("td", {}, num(x.gpu)),
        el("td", {}, num(x.mem)),
        el("td", { class: "ended" }, `${x.ok} / ${x.failed} / ${x.stopped}`),
        el("td", {}, x.p90 === null ? "—" : `≤ ${x.p90} s`),
      );
    }),
  );
}

// ------------------------------------------------------------------ routing and polling

function route() {
  const h = location.hash.replace(/^#/, "") || "users";
  if (h.startsWith("job/")) return { view: "job", id: h.slice(4) };
  const [view, q] = h.split("?");
  return { view: ["users", "groups", "clusters", "jobs", "shares", "usage"].includes(view) ? view : "users", q };
}

function show(view) {
  for (const v of ["users", "groups", "clusters", "jobs", "job", "shares", "usage"]) $("view-" + v).hidden = v !== view;
  for (const a of document.querySelectorAll("nav a")) {
    const on = a.id === "nav-" + (view === "job" ? "jobs" : view);
    if (on) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function refresh() {
  // Without a valid token every call would be a 401: wait for one.
  if (!state.role) return;
  // One refresh at a time; one asked for meanwhile (a new search, a new view) runs
  // right after, so its answer replaces the one in flight.
  if (state.busy) {
    state.again = true;
    return;
  }
  state.busy = true;
  state.again = false;
  try {
    const r = route();
    if (r.view === "users") await refreshUsers();
    else if (r.view === "groups") await refreshGroups();
    else if (r.view === "clusters") await refreshClusters();
    // Once "More" has added pages, polling would drop them: it stops until the next search.
    else if (r.view === "jobs" && !state.jobsAppended) await refreshJobs(false);
    else if (r.view === "job") await refreshJob(r.id);
    else if (r.view === "shares") {
      if (Date.now() - state.lastShares >= SHARES_POLL_MS) {
        state.lastShares = Date.now();
        await refreshShares();
      }
    } else if (r.view === "usage") {
      // The report changes as holds end: every 5 s is plenty.
      if (Date.now() - state.lastShares >= SHARES_POLL_MS) {
        state.lastShares = Date.now();
        await refreshUsage();
      }
    }
    setStatus("Updated " + new Date().toLocaleTimeString(undefined, { hour12: false }), false);
  } catch (e) {
    if (e.status === 401) tokenRefused();
    else if (e.quiet) {
      /* already shown */
    } else setStatus("Cannot update: " + e.message, true);
  } finally {
    state.busy = false;
  }
  if (state.again) await refresh();
}

function schedule() {
  clearTimeout(state.timer);
  state.timer = setTimeout(async () => {
    if (!document.hidden && !$("confirm").open) await refresh();
    schedule();
  }, POLL_MS);
}

async function onRoute() {
  const r = route();
  show(r.view);
  state.lastShares = 0;
  state.lastLogs = 0;
  if (r.view === "jobs") {
    state.jobsAppended = false;
    state.jobsQuery = jobsQueryFromHash(r.q);
    $("q-user").value = state.jobsQuery.user;
    $("q-status").value = state.jobsQuery.status;
    $("q-pool").value = state.jobsQuery.pool;
    $("q-external").value = state.jobsQuery.external_id;
  }
  if (r.view === "job") {
    $("job-timeline").replaceChildren();
    $("job-fields").replaceChildren();
    $("job-logs").textContent = "";
  }
  await refresh();
  schedule();
}

function init() {
  $("token").value = token();
  $("token-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    await loadRole();
    await refresh();
  });
  $("token-forget").addEventListener("click", async () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    await loadRole();
    await refresh();
  });
  for (const b of document.querySelectorAll("#users-table button[data-sort]")) {
    b.addEventListener("click", () => {
      const k = b.dataset.sort;
      state.sort = state.sort.key === k ? { key: k, desc: !state.sort.desc } : { key: k, desc: k !== "id" && k !== "next" };
      renderUsers();
    });
  }
  $("job-search").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    const q = { user: $("q-user").value.trim(), status: $("q-status").value, pool: $("q-pool").value.trim(), external_id: $("q-external").value.trim() };
    // Only the statuses the service knows: anything else would be a predictable 422.
    const known = [...$("q-status").options].map((o) => o.value);
    if (!known.includes(q.status.toUpperCase())) {
      setStatus(`Cannot search: status must be one of ${known.filter(Boolean).join(", ")} (status)`, true);
      return;
    }
    for (const [k, v] of Object.entries(q)) if (v) p.set(k, v);
    const h = "#jobs" + (p.toString() ? "?" + p.toString() : "");
    if (location.hash === h) onRoute();
    else location.hash = h;
  });
  $("jobs-more").addEventListener("click", () => refreshJobs(true).catch((e) => setStatus(e.message, true)));
  $("job-cancel").addEventListener("click", confirmCancel);
  $("confirm-form").addEventListener("submit", onConfirm);
  $("confirm-no").addEventListener("click", () => {
    confirmAction = null;
    $("confirm").close();
  });
  $("confirm").addEventListener("close", () => {
    confirmAction = null;
    // Back to the button that opened the dialog (or its row's rebuilt twin).
    const o = confirmOpener;
    confirmOpener = null;
    if (o && o.isConnected) o.focus();
    else if (o && o.dataset && o.dataset.focusKey) focusKey(o.dataset.focusKey);
  });
  window.addEventListener("hashchange", () => {
    onRoute().then(() => $("main").focus({ preventScroll: true }));
  });
  loadRole().then(onRoute);
}

document.addEventListener("DOMContentLoaded", init);
