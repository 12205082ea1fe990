// Trainyard's web UI: one script over the coordinator's JSON API
// (/ui/api/v1/<JobService method>, server/web_ui.h). Pages: the jobs
// (/ui/), a job (/ui/jobs/<id>) and the queue with quotas (/ui/queue);
// sweeps.js has the sweeps (/ui/sweeps, /ui/sweeps/<id>) and the
// comparison of jobs (/ui/compare?jobs=a,b).
// Everything shown is set as text (no HTML from data).
"use strict";

const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
const STATES = ["QUEUED", "STARTING", "RUNNING", "RECOVERING", "SUCCEEDED", "FAILED", "CANCELLED"];
const POLL_MS = 2000;
let session = null;  // {user, admin, open, csrf}
let timers = [];

// ---- helpers ----------------------------------------------------------------

// Replaces el's children with these (null, undefined and false left out).
function put(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function post(path, body) {
  const headers = {"Content-Type": "application/json"};
  if (session) headers["X-CSRF-Token"] = session.csrf;
  const r = await fetch(path, {method: "POST", headers, body: JSON.stringify(body || {}), credentials: "same-origin"});
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new ApiError(r.status, j.code || "UNKNOWN", j.message || r.statusText);
  return j;
}

const api = (method, body) => post("/ui/api/v1/" + method, body);
const num = (v) => (v === undefined || v === null || v === "" ? 0 : Number(v));

function fmtTime(ms) {
  ms = num(ms);
  if (!ms) return "-";
  const d = new Date(ms);
  const p = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// As C's %.<digits>g (trainctl's FormatMetric): 1.801e-05, 0.2341, 1.235e+04.
function fmtNum(v, digits = 4) {
  v = Number(v);
  if (!isFinite(v)) return "-";
  if (v === 0) return "0";
  const [m, x] = v.toExponential(digits - 1).split("e");
  const e = Number(x);
  if (e < -4 || e >= digits) return `${Number(m)}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  return String(Number(v.toPrecision(digits)));
}

function fmtBytes(v) {
  v = num(v);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) v /= 1024, i++;
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

const stateBadge = (s) => h("span", {class: "state " + s}, s);

function every(ms, f) {
  const t = setInterval(f, ms);
  timers.push(t);
}

function showError(where, e) {
  put(where, h("p", {class: "error"}, e instanceof ApiError ? `${e.code}: ${e.message}` : String(e)));
}

function setMain(...children) {
  return put(document.getElementById("main"), ...children);
}

// A table whose columns sort by a click on their header.
function sortableTable(columns, rows, opts = {}) {
  let key = opts.sortKey || null;
  let dir = opts.sortDir || 1;
  const thead = h("thead");
  const tbody = h("tbody");
  const table = h("table", {id: opts.id}, thead, tbody);
  function draw() {
    const sorted = rows.slice();
    if (key) {
      const col = columns.find((c) => c.key === key);
      sorted.sort((a, b) => {
        const x = col.sort ? col.sort(a) : col.value(a);
        const y = col.sort ? col.sort(b) : col.value(b);
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
    }
    put(thead, h("tr", {}, columns.map((c) => {
      const cls = "sortable" + (c.key === key ? (dir > 0 ? " sorted-asc" : " sorted-desc") : "");
      return h("th", {class: cls, "data-key": c.key, onclick: () => {
        dir = key === c.key ? -dir : 1;
        key = c.key;
        draw();
      }}, c.title);
    })));
    put(tbody, ...sorted.map((r) => h("tr", {id: opts.rowId ? opts.rowId(r) : null},
      columns.map((c) => h("td", {class: c.wrap ? "wrap" : null}, c.cell ? c.cell(r) : c.value(r))))));
  }
  draw();
  return table;
}

// ---- sign-in ----------------------------------------------------------------

async function loadSession() {
  const r = await fetch("/ui/api/session", {credentials: "same-origin"});
  if (r.status === 401) return null;
  if (!r.ok) throw new ApiError(r.status, "UNKNOWN", r.statusText);
  return r.json();
}

function renderWho() {
  const who = document.getElementById("who");
  if (!session) return put(who, );
  const name = session.open ? "anyone (a server without users)" : session.user || "admin";
  put(who, "Signed in as ", h("b", {id: "signed-in-as"}, name),
    session.open ? null : h("button", {id: "sign-out", onclick: async () => {
      await post("/ui/api/logout").catch(() => {});
      session = null;
      location.href = "/ui/";
    }}, "Sign out"));
}

function loginPage(message) {
  const token = h("input", {type: "password", id: "token", autocomplete: "current-password",
    placeholder: "your Trainyard token"});
  const err = h("p", {class: "error", id: "login-error"}, message || "");
  const form = h("form", {class: "login", id: "login", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      session = null;
      await post("/ui/api/login", {token: token.value});
      session = await loadSession();
      renderWho();
      route();
    } catch (e) {
      err.textContent = e.message;
    }
  }}, h("h1", {}, "Sign in to Trainyard"),
  h("label", {for: "token"}, "Token (as trainctl's --token-file)"), token,
  h("button", {class: "primary", type: "submit"}, "Sign in"), err);
  setMain(form);
  token.focus();
}

// ---- jobs -------------------------------------------------------------------

async function listJobs(allUsers, states) {
  const jobs = [];
  let token = "";
  for (let page = 0; page < 10; page++) {
    const r = await api("ListJobs", {page_size: 1000, page_token: token, all_users: allUsers, states});
    jobs.push(...(r.jobs || []));
    token = r.next_page_token;
    if (!token) break;
  }
  return jobs;
}

function jobsPage() {
  const params = new URLSearchParams(location.search);
  const state = h("select", {id: "filter-state"}, h("option", {value: ""}, "any state"),
    STATES.map((s) => h("option", {value: s, selected: params.get("state") === s}, s)));
  const user = h("input", {id: "filter-user", placeholder: "user", value: params.get("user") || ""});
  const name = h("input", {id: "filter-name", placeholder: "name contains", value: params.get("name") || ""});
  const everyone = h("input", {type: "checkbox", id: "filter-all", checked: session.admin || params.get("all") === "1"});
  const holder = h("div", {id: "jobs"}, h("p", {class: "muted"}, "Loading…"));
  let sort = {sortKey: "created", sortDir: -1};
  const selected = new Set();
  const compare = h("button", {id: "compare-jobs", type: "button", disabled: true}, "Compare selected");
  compare.addEventListener("click", () => {
    location.href = "/ui/compare?jobs=" + [...selected].map(encodeURIComponent).join(",");
  });
  const columns = [
    {key: "sel", title: "", value: (j) => (selected.has(j.id) ? 0 : 1), cell: (j) => h("input", {type: "checkbox",
      class: "job-select", "data-job": j.id, checked: selected.has(j.id), onchange: (ev) => {
        if (ev.target.checked) selected.add(j.id); else selected.delete(j.id);
        compare.disabled = selected.size < 2;
      }})},
    {key: "id", title: "ID", value: (j) => j.id, cell: (j) => h("a", {href: "/ui/jobs/" + encodeURIComponent(j.id)}, j.id)},
    {key: "name", title: "Name", value: (j) => j.name},
    {key: "owner", title: "User", value: (j) => j.owner || "-"},
    {key: "state", title: "State", value: (j) => j.state, cell: (j) => stateBadge(j.state)},
    {key: "step", title: "Step", value: (j) => num(j.step),
      cell: (j) => num(j.max_steps) ? `${num(j.step)} / ${num(j.max_steps)}` : String(num(j.step))},
    {key: "loss", title: "Loss", value: (j) => num(j.loss), cell: (j) => (num(j.step) ? fmtNum(j.loss) : "-")},
    {key: "ranks", title: "Ranks", value: (j) => num(j.num_processes)},
    {key: "attempt", title: "Attempt", value: (j) => num(j.attempt)},
    {key: "created", title: "Submitted", value: (j) => num(j.created_unix_millis), cell: (j) => fmtTime(j.created_unix_millis)},
    {key: "reason", title: "Reason", value: (j) => j.reason, wrap: true},
  ];
  async function refresh() {
    try {
      const jobs = await listJobs(everyone.checked, state.value ? [state.value] : []);
      const u = user.value.trim(), n = name.value.trim().toLowerCase();
      const shown = jobs.filter((j) => (!u || j.owner === u) && (!n || j.name.toLowerCase().includes(n)));
      const table = sortableTable(columns, shown, {id: "jobs-table", rowId: (j) => "job-" + j.id, ...sort});
      table.addEventListener("click", (ev) => {
        const th = ev.target.closest("th");
        if (th) sort = {sortKey: th.dataset.key, sortDir: th.classList.contains("sorted-asc") ? 1 : -1};
      });
      put(holder, shown.length ? table : h("p", {class: "muted", id: "no-jobs"}, "No jobs."));
    } catch (e) {
      showError(holder, e);
    }
  }
  for (const el of [state, everyone]) el.addEventListener("change", refresh);
  for (const el of [user, name]) el.addEventListener("input", refresh);
  setMain(h("h1", {}, "Jobs"), h("div", {class: "filters"}, state, user, name,
    h("label", {}, everyone, " everyone's jobs"), compare), holder);
  refresh();
  every(POLL_MS * 2, refresh);
}

// ---- one job ----------------------------------------------------------------

const SERIES = [
  {name: "loss", title: "Loss", with: "eval_loss"},
  {name: "samples_per_second", title: "Samples/s (all ranks)"},
  {name: "step_seconds", title: "Step time (s)"},
  {name: "learning_rate", title: "Learning rate"},
  {name: "grad_norm", title: "Gradient norm"},
  {name: "memory_bytes", title: "Memory per rank", bytes: true},
  {name: "mfu", title: "MFU"},
  {name: "world_size", title: "World size (ranks training)"},
];

function eventKind(e) {
  const r = e.reason;
  if (e.state === "FAILED" || /restart|requeue|failed|lost|exited|killed|hung/i.test(r)) return "#c0392b";
  if (/preempt|shr[ae]nk|scal/i.test(r)) return "#8e44ad";
  if (/heal|replica|membership|joined|left/i.test(r)) return "#d68910";
  return "#7f8c8d";
}

// Vertical lines at the job's events and checkpoints, on the charts' time axis.
const eventLines = {
  id: "trainyardEvents",
  afterDatasetsDraw(chart, args, opts) {
    const xs = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
    for (const m of opts.marks || []) {
      const x = xs.getPixelForValue(m.x);
      if (x < area.left || x > area.right) continue;
      ctx.save();
      ctx.strokeStyle = m.color;
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(x, area.top);
      ctx.lineTo(x, area.bottom);
      ctx.stroke();
      ctx.restore();
    }
  },
};

// A break in the line where the steps go back (a restart from a checkpoint).
function withGaps(points) {
  const out = [];
  for (const p of points) {
    const prev = out[out.length - 1];
    if (prev && p.step <= prev.step) out.push({x: (prev.x + p.x) / 2, y: null, step: p.step});
    out.push(p);
  }
  return out;
}

function makeChart(canvas, spec) {
  return new Chart(canvas, {
    type: "line",
    data: {datasets: []},
    options: {
      animation: false, parsing: false, normalized: true, maintainAspectRatio: false,
      interaction: {mode: "nearest", intersect: false},
      elements: {point: {radius: 0}, line: {borderWidth: 1.5}}, spanGaps: false,
      scales: {
        x: {type: "linear", title: {display: true, text: "seconds since submitted"}},
        y: {ticks: {callback: (v) => (spec.bytes ? fmtBytes(v) : fmtNum(v, 3))}},
      },
      plugins: {legend: {display: !!spec.with}, trainyardEvents: {marks: []},
        tooltip: {callbacks: {label: (c) => `${c.dataset.label}: ${spec.bytes ? fmtBytes(c.parsed.y) : fmtNum(c.parsed.y, 6)} (step ${c.raw.step})`}}},
    },
    plugins: [eventLines],
  });
}

function jobPage(id) {
  const title = h("h1", {id: "job-title"}, id);
  const status = h("div", {id: "job-status"});
  const actions = h("div", {class: "actions"});
  const summary = h("div", {class: "summary", id: "job-summary"});
  const specText = h("pre", {class: "spec", id: "job-spec"});
  const spec = h("details", {}, h("summary", {}, "Spec (normalized)"), specText);
  const chartsBox = h("div", {class: "charts", id: "charts"});
  const ranks = h("div", {id: "ranks"});
  const events = h("div", {id: "events"});
  const checkpoints = h("div", {id: "checkpoints"});
  const rankSel = h("select", {id: "log-rank"}, h("option", {value: "0"}, "rank 0"));
  const logs = h("pre", {class: "logs", id: "logs"}, "");
  const message = h("p", {class: "error", id: "action-message"});
  const charts = {};
  const addChart = (s) => {
    const canvas = h("canvas", {id: "chart-" + s.name, "data-points": "0"});
    const box = h("div", {class: "chart", id: "chart-box-" + s.name, hidden: true}, h("h3", {}, s.title),
      h("div", {class: "box"}, canvas));
    chartsBox.append(box);
    charts[s.name] = {spec: s, canvas, box, chart: makeChart(canvas, s)};
  };
  SERIES.forEach(addChart);
  // The numbers a script reports by names of its own: a chart each, as they come.
  const builtIn = new Set(SERIES.flatMap((s) => [s.name].concat(s.with ? [s.with] : [])));
  setMain(title, status, actions, message, summary, spec, h("h2", {}, "Charts"), chartsBox, h("h2", {}, "Ranks"), ranks,
    h("h2", {}, "Events"), events, h("h2", {}, "Checkpoints"), checkpoints,
    h("h2", {}, "Logs ", rankSel), logs);
  window.trainyardCharts = charts;

  let job = null;
  let done = false;

  async function act(label, method, body) {
    message.textContent = "";
    try {
      await api(method, body);
      message.textContent = "";
      await refresh();
    } catch (e) {
      message.textContent = `${label}: ${e.code}: ${e.message}`;
    }
  }

  function drawActions() {
    const running = job && ["RUNNING", "STARTING", "RECOVERING"].includes(job.state);
    const ended = job && TERMINAL.has(job.state);
    put(actions, 
      h("button", {id: "btn-cancel", class: "danger", disabled: !job || ended,
        onclick: () => confirm(`Cancel ${id}?`) && act("cancel", "CancelJob", {id})}, "Cancel"),
      h("button", {id: "btn-stop-checkpoint", disabled: !running,
        onclick: () => act("checkpoint and stop", "CancelJob", {id, checkpoint: true})}, "Checkpoint and stop"),
      h("button", {id: "btn-checkpoint", disabled: !running,
        onclick: () => act("checkpoint", "CheckpointJob", {id})}, "Checkpoint"),
      h("button", {id: "btn-resume", class: "primary", disabled: !ended,
        onclick: () => act("resume", "ResumeJob", {id})}, "Resume"));
  }

  // The pages of the queue up to the one with job `id` (everyone's where
  // the user may see them, else their own), as one.
  async function queueWith(id) {
    let all_users = true, page_token = "", entries = [];
    for (;;) {
      let q;
      try {
        q = await api("GetQueue", {all_users, page_size: 10000, page_token});
      } catch (e) {
        if (!all_users || page_token) throw e;
        all_users = false;
        continue;
      }
      entries = entries.concat(q.entries || []);
      if (!q.next_page_token || (q.entries || []).some((e) => e.id === id)) return {...q, entries};
      page_token = q.next_page_token;
    }
  }

  function drawSummary(queue) {
    const spec = (() => { try { return JSON.parse(job.spec_json || "{}"); } catch (e) { return {}; } })();
    const item = (k, v) => h("div", {}, h("span", {}, k), v);
    const entry = queue && (queue.entries || []).find((e) => e.id === id);
    put(summary, 
      job.sweep_id
        ? item("sweep", h("a", {id: "job-sweep", href: "/ui/sweeps/" + encodeURIComponent(job.sweep_id)},
            `${job.sweep_id}, trial ${num(job.sweep_trial)}`))
        : null,
      item("user", job.owner || "-"), item("group", job.group || "-"),
      item("step", num(job.max_steps) ? `${num(job.step)} / ${num(job.max_steps)}` : String(num(job.step))),
      item("loss", num(job.step) ? fmtNum(job.loss) : "-"), item("first loss", num(job.step) ? fmtNum(job.first_loss) : "-"),
      item("samples/s", fmtNum(job.samples_per_second)), item("ranks", num(job.num_processes)),
      item("attempt", num(job.attempt)), item("model", spec.script ? "script" : spec.model ? String(spec.model.name || spec.model.kind || spec.model.path || "-") : "-"),
      item("launcher", spec.launcher || "local"), item("submitted", fmtTime(job.created_unix_millis)),
      item("started", fmtTime(job.started_unix_millis)), item("ended", fmtTime(job.ended_unix_millis)),
      job.slurm_job_id ? item("Slurm job", job.slurm_job_id) : null,
      job.replicas && job.replicas.live && job.replicas.live.length
        ? item("replicas", `epoch ${num(job.replicas.epoch)}: ${job.replicas.live.join(", ")}` +
          (job.replicas.healing && job.replicas.healing.length ? ` (healing ${job.replicas.healing.join(", ")})` : ""))
        : null,
      entry ? item("queue", h("span", {id: "queue-position"}, `#${entry.position}: ${entry.reason}`)) : null);
  }

  function drawRanks() {
    const places = new Map((job.places || []).map((p) => [p.rank, p.node]));
    const rows = job.ranks || [];
    if (!rows.length) {
      put(ranks, h("p", {class: "muted"}, TERMINAL.has(job.state) ? "The job has ended." : "No rank has reported a step yet."));
      return;
    }
    put(ranks, sortableTable([
      {key: "rank", title: "Rank", value: (r) => num(r.rank)},
      {key: "node", title: "Node", value: (r) => places.get(num(r.rank)) || "-"},
      {key: "step", title: "Last step", value: (r) => num(r.step)},
      {key: "loss", title: "Loss", value: (r) => num(r.loss), cell: (r) => fmtNum(r.loss)},
      {key: "sps", title: "Samples/s", value: (r) => num(r.samples_per_second), cell: (r) => fmtNum(r.samples_per_second)},
      {key: "time", title: "Step time (s)", value: (r) => num(r.step_seconds), cell: (r) => fmtNum(r.step_seconds)},
      {key: "mem", title: "Memory", value: (r) => num(r.param_bytes) + num(r.grad_bytes) + num(r.optimizer_bytes),
        cell: (r) => fmtBytes(num(r.param_bytes) + num(r.grad_bytes) + num(r.optimizer_bytes))},
    ], rows, {id: "ranks-table", sortKey: "rank"}));
    const have = new Set([...rankSel.options].map((o) => o.value));
    for (const r of rows) {
      if (!have.has(String(num(r.rank)))) rankSel.append(h("option", {value: String(num(r.rank))}, "rank " + num(r.rank)));
    }
  }

  function drawHistory(hist) {
    const t0 = num(job.created_unix_millis);
    const x = (ms) => (num(ms) - t0) / 1000;
    const marks = (hist.events || []).filter((e) => e.reason !== "submitted")
      .map((e) => ({x: x(e.unix_millis), color: eventKind(e)}))
      .concat((hist.checkpoints || []).filter((c) => c.ok).map((c) => ({x: x(c.unix_millis), color: "#27ae60"})));
    const byName = new Map((hist.series || []).map((s) => [s.name, s]));
    for (const name of byName.keys()) {
      if (!builtIn.has(name) && !charts[name]) addChart({name, title: name + " (reported by the script)"});
    }
    for (const c of Object.values(charts)) {
      const names = [c.spec.name].concat(c.spec.with ? [c.spec.with] : []);
      const datasets = names.filter((n) => byName.has(n)).map((n, i) => ({
        label: n, borderColor: i ? "#ff7f0e" : "#1f77b4", backgroundColor: i ? "#ff7f0e" : "#1f77b4",
        data: withGaps(byName.get(n).points.map((p) => ({x: x(p.unix_millis), y: Number(p.value), step: num(p.step)}))),
      }));
      // A flat series: a range around its value (Chart.js would centre it in -1..1).
      const ys = datasets.flatMap((d) => d.data.map((p) => p.y)).filter((y) => y !== null);
      const lo = Math.min(...ys), hi = Math.max(...ys);
      c.chart.options.scales.y.suggestedMin = lo === hi ? lo - Math.abs(lo) * 0.1 - 1e-12 : undefined;
      c.chart.options.scales.y.suggestedMax = lo === hi ? hi + Math.abs(hi) * 0.1 + 1e-12 : undefined;
      c.box.hidden = !datasets.length;
      if (!datasets.length) continue;
      c.chart.data.datasets = datasets;
      c.chart.options.plugins.trainyardEvents.marks = marks;
      c.chart.update("none");
      c.canvas.dataset.points = String(datasets[0].data.filter((p) => p.y !== null).length);
    }
    const rows = (hist.events || []).slice().reverse();
    put(events, sortableTable([
      {key: "time", title: "Time", value: (e) => num(e.unix_millis), cell: (e) => fmtTime(e.unix_millis)},
      {key: "state", title: "State", value: (e) => e.state, cell: (e) => stateBadge(e.state)},
      {key: "reason", title: "Event", value: (e) => e.reason, wrap: true},
    ], rows, {id: "events-table"}));
    const cks = hist.checkpoints || [];
    put(checkpoints, cks.length ? sortableTable([
      {key: "n", title: "N", value: (c) => num(c.index)},
      {key: "step", title: "Step", value: (c) => num(c.step)},
      {key: "type", title: "Type", value: (c) => c.type},
      {key: "ok", title: "Result", value: (c) => (c.ok ? "ok" : "FAILED")},
      {key: "bytes", title: "Size", value: (c) => num(c.bytes), cell: (c) => fmtBytes(c.bytes)},
      {key: "time", title: "Time", value: (c) => num(c.unix_millis), cell: (c) => fmtTime(c.unix_millis)},
      {key: "path", title: "Path / error", value: (c) => (c.ok ? c.path : c.error), wrap: true},
    ], cks, {id: "checkpoints-table"}) : h("p", {class: "muted"}, "No checkpoints."));
  }

  async function refreshLogs() {
    try {
      const r = await api("GetLogs", {id, rank: Number(rankSel.value), tail_bytes: 32768});
      const bytes = Uint8Array.from(atob(r.content || ""), (c) => c.charCodeAt(0));
      const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
      logs.textContent = new TextDecoder().decode(bytes) || "(empty)";
      if (atEnd) logs.scrollTop = logs.scrollHeight;
    } catch (e) {
      logs.textContent = e.code === "NOT_FOUND" ? "(no log yet)" : `${e.code}: ${e.message}`;
    }
  }
  rankSel.addEventListener("change", refreshLogs);

  async function refresh() {
    if (done) return;
    try {
      job = (await api("GetJob", {id})).job;
    } catch (e) {
      if (e.status === 404) {
        setMain(h("h1", {}, "Not found"), h("p", {id: "not-found"}, `No job ${id} that you may see.`));
        done = true;
        return;
      }
      return showError(status, e);
    }
    put(title, job.name + " ", h("span", {class: "muted"}, job.id));
    put(status, stateBadge(job.state), " ", h("span", {id: "job-reason"}, job.reason || ""));
    drawActions();
    const queue = job.state === "QUEUED" ? await queueWith(id) : null;
    drawSummary(queue);
    try {
      specText.textContent = JSON.stringify(JSON.parse(job.spec_json || "{}"), null, 2);
    } catch (e) {
      specText.textContent = job.spec_json || "";
    }
    drawRanks();
    drawHistory(await api("GetJobHistory", {id}));
    // When the page first showed the charts (ms since navigation; bench/web_ui.py reads it).
    if (!window.trainyardFirstDraw) window.trainyardFirstDraw = performance.now();
    await refreshLogs();
    if (TERMINAL.has(job.state)) done = true;
  }
  refresh().then(() => {
    every(POLL_MS, () => { if (!done) refresh(); });
  });
}

// ---- queue and quotas -------------------------------------------------------

function queuePage() {
  const everyone = h("input", {type: "checkbox", id: "queue-all", checked: session.admin});
  const holder = h("div", {id: "queue"});
  const usage = h("div", {id: "usage"});
  const more = h("p", {id: "queue-more", class: "muted"});
  const bar = (used, quota) => {
    if (num(quota) < 0) return `${used} (no limit)`;
    const w = Math.min(100, (100 * used) / Math.max(1, num(quota)));
    return h("span", {}, h("span", {class: "bartrack"}, h("span", {class: "bar", style: `width:${w}%`})), `${used} / ${num(quota)}`);
  };
  async function refresh() {
    try {
      const q = await api("GetQueue", {all_users: everyone.checked});
      const entries = q.entries || [];
      put(holder, entries.length ? sortableTable([
        {key: "pos", title: "#", value: (e) => num(e.position)},
        {key: "id", title: "ID", value: (e) => e.id, cell: (e) => h("a", {href: "/ui/jobs/" + encodeURIComponent(e.id)}, e.id)},
        {key: "name", title: "Name", value: (e) => e.name},
        {key: "owner", title: "User", value: (e) => e.owner || "-"},
        {key: "class", title: "Class", value: (e) => e.priority_class || "-"},
        {key: "ranks", title: "Ranks", value: (e) => num(e.num_processes)},
        {key: "resource", title: "Needs", value: (e) => e.resource},
        {key: "start", title: "Expected start", value: (e) => num(e.estimated_start_unix_millis), cell: (e) => fmtTime(e.estimated_start_unix_millis)},
        {key: "reason", title: "Why it waits", value: (e) => e.reason, wrap: true},
      ], entries, {id: "queue-table", sortKey: "pos"}) : h("p", {class: "muted"}, "Nothing waits."));
      if (q.next_page_token) put(more, `The first ${entries.length} of ${num(q.total_size)} waiting jobs.`);
      else put(more);
      const rows = q.usage || [];
      put(usage, rows.length ? sortableTable([
        {key: "name", title: "User or group", value: (u) => (u.group ? "group " : "") + u.name},
        {key: "slots", title: "Slots in use", value: (u) => num(u.slots), cell: (u) => bar(num(u.slots), u.slots_quota)},
        {key: "gpus", title: "GPUs in use", value: (u) => num(u.gpus), cell: (u) => bar(num(u.gpus), u.gpus_quota)},
        {key: "queued", title: "Queued jobs", value: (u) => num(u.queued_jobs),
          cell: (u) => (u.group ? "-" : bar(num(u.queued_jobs), u.queued_jobs_quota))},
      ], rows, {id: "usage-table", sortKey: "name"}) : h("p", {class: "muted"}, "No quotas on this server."));
    } catch (e) {
      showError(holder, e);
    }
  }
  everyone.addEventListener("change", refresh);
  setMain(h("h1", {}, "Queue"), h("div", {class: "filters"}, h("label", {}, everyone, " everyone's jobs")), holder, more,
    h("h2", {}, "In use against quotas"), usage);
  refresh();
  every(POLL_MS * 2, refresh);
}

// ---- routing ----------------------------------------------------------------

function route() {
  for (const t of timers) clearInterval(t);
  timers = [];
  const path = location.pathname;
  if (path.startsWith("/ui/jobs/")) return jobPage(decodeURIComponent(path.slice(9)));
  if (path === "/ui/queue") return queuePage();
  if (path === "/ui/sweeps") return sweepsPage();
  if (path.startsWith("/ui/sweeps/")) return sweepPage(decodeURIComponent(path.slice(11)));
  if (path === "/ui/compare") {
    const ids = (new URLSearchParams(location.search).get("jobs") || "").split(",").filter(Boolean);
    return comparePage(ids);
  }
  return jobsPage();
}

async function boot() {
  try {
    session = await loadSession();
  } catch (e) {
    return setMain(h("p", {class: "error"}, String(e)));
  }
  renderWho();
  if (!session) return loginPage();
  route();
}

boot();
