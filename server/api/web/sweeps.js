// The web UI's sweep pages and the comparison of jobs (app.js has the
// helpers and the router): the sweeps (/ui/sweeps), one sweep
// (/ui/sweeps/<id>: its trials, every trial's metric by step, its
// hyperparameters against the metric, bulk cancel) and jobs side by side
// (/ui/compare?jobs=a,b,c: curves by step, spec differences, final metrics).
"use strict";

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf"];
// Trial i's colour: the palette's ten, then hues a golden angle apart at
// three lightnesses in turn, so that no two trials shown share one.
const colorOf = (i) => (i < PALETTE.length ? PALETTE[i]
  : `hsl(${((i - PALETTE.length) * 137.508 + 20) % 360 | 0}, 70%, ${[38, 52, 66][(i - PALETTE.length) % 3]}%)`);

// A log axis's labels: the powers of ten alone (and 2 and 5 times them when
// the axis spans less than two decades), so that labels never overlap.
function logTicks(axis) {
  return (v) => {
    if (!(v > 0)) return "";
    const span = Math.log10(axis.max / axis.min);
    const m = Math.round(v / 10 ** Math.floor(Math.log10(v) + 1e-9));
    return m === 1 || (span < 2 && (m === 2 || m === 5)) ? fmtNum(v, 3) : "";
  };
}
// An axis as `log` says: its type and its labels.
function setLog(scale, log) {
  scale.type = log ? "logarithmic" : "linear";
  scale.ticks = {autoSkip: true, maxRotation: 0, callback: log ? function (v) { return logTicks(this)(v); } : (v) => fmtNum(v, 3)};
}
// Whether a metric is shown on a log axis: a loss (its values all above 0).
const logMetric = (name, values) => /loss/.test(name) && values.length > 0 && values.every((v) => v > 0);

// A line chart whose x axis is the step: one dataset per line.
function stepChart(canvas, yTitle, logY) {
  return new Chart(canvas, {
    type: "line",
    data: {datasets: []},
    options: {
      animation: false, parsing: false, normalized: true, maintainAspectRatio: false,
      interaction: {mode: "nearest", intersect: false},
      elements: {point: {radius: 0}, line: {borderWidth: 1.5}},
      scales: {x: {type: "linear", title: {display: true, text: "step"}},
        y: {type: logY ? "logarithmic" : "linear", title: {display: true, text: yTitle},
          ticks: {autoSkip: true, callback: logY ? function (v) { return logTicks(this)(v); } : (v) => fmtNum(v, 3)}}},
      plugins: {legend: {display: true, position: "right"},
        tooltip: {callbacks: {label: (c) => `${c.dataset.label}: ${fmtNum(c.parsed.y, 6)} (step ${c.parsed.x})`}}},
    },
  });
}

// The points of one series of a GetJobHistory answer, by step.
function byStep(hist, name) {
  const s = (hist.series || []).find((x) => x.name === name);
  return s ? s.points.map((p) => ({x: num(p.step), y: Number(p.value)})) : [];
}

const trialState = (t) => (t.early_stopped ? "STOPPED" : t.state);

// ---- the sweeps -------------------------------------------------------------

function sweepsPage() {
  const everyone = h("input", {type: "checkbox", id: "sweeps-all", checked: session.admin});
  const holder = h("div", {id: "sweeps"}, h("p", {class: "muted"}, "Loading…"));
  async function refresh() {
    try {
      const sweeps = (await api("ListSweeps", {all_users: everyone.checked})).sweeps || [];
      put(holder, sweeps.length ? sortableTable([
        {key: "id", title: "ID", value: (w) => w.id, cell: (w) => h("a", {href: "/ui/sweeps/" + encodeURIComponent(w.id)}, w.id)},
        {key: "name", title: "Name", value: (w) => w.name},
        {key: "owner", title: "User", value: (w) => w.owner || "-"},
        {key: "state", title: "State", value: (w) => w.state, cell: (w) => stateBadge(w.state)},
        {key: "searcher", title: "Searcher", value: (w) => w.searcher},
        {key: "trials", title: "Trials", value: (w) => (w.trials || []).length},
        {key: "live", title: "Live", value: (w) => (w.trials || []).filter((t) => t.job_id && !TERMINAL.has(t.state)).length},
        {key: "best", title: "Best", value: (w) => (num(w.best_trial) >= 0 ? Number(w.trials[w.best_trial].best_metric) : Infinity),
          cell: (w) => (num(w.best_trial) >= 0 ? `${w.metric} ${fmtNum(w.trials[w.best_trial].best_metric, 6)}` : "-")},
        {key: "created", title: "Submitted", value: (w) => num(w.created_unix_millis), cell: (w) => fmtTime(w.created_unix_millis)},
      ], sweeps, {id: "sweeps-table", sortKey: "created", sortDir: -1}) : h("p", {class: "muted"}, "No sweeps."));
    } catch (e) {
      showError(holder, e);
    }
  }
  everyone.addEventListener("change", refresh);
  setMain(h("h1", {}, "Sweeps"), h("div", {class: "filters"}, h("label", {}, everyone, " everyone's sweeps")), holder);
  refresh();
  every(POLL_MS * 2, refresh);
}

// ---- one sweep --------------------------------------------------------------

function sweepPage(id) {
  const title = h("h1", {id: "sweep-title"}, id);
  const status = h("p", {id: "sweep-status"});
  const summary = h("div", {id: "sweep-summary"});
  const keepBest = h("input", {type: "checkbox", id: "keep-best"});
  const cancel = h("button", {id: "cancel-sweep", type: "button"}, "Cancel sweep");
  const actions = h("div", {class: "actions"}, cancel, h("label", {}, keepBest, " keep the best trial running"));
  const message = h("p", {id: "sweep-message"});
  const lines = h("canvas", {id: "sweep-chart"});
  const dots = h("canvas", {id: "sweep-scatter"});
  const param = h("select", {id: "scatter-parameter"});
  const trials = h("div", {id: "trials"});
  const events = h("div", {id: "sweep-events"});
  const compare = h("a", {id: "compare-trials", href: "#"}, "Compare the selected trials");
  const selected = new Set();
  const histories = new Map();  // job id -> points of the metric (kept once the trial ended)
  let sweep = null;
  let lineChart = null, scatter = null;

  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    try {
      sweep = (await api("CancelSweep", {id, keep_best: keepBest.checked})).sweep;
      put(message, "Cancelled: ", sweep.reason);
      await refresh();
    } catch (e) {
      showError(message, e);
      cancel.disabled = false;
    }
  });
  compare.addEventListener("click", (ev) => {
    ev.preventDefault();
    const ids = [...selected];
    if (ids.length) location.href = "/ui/compare?jobs=" + ids.map(encodeURIComponent).join(",");
  });

  function drawTrials() {
    const ps = sweep.parameters || [];
    const columns = [
      {key: "sel", title: "", value: () => 0, cell: (t) => (t.job_id ? h("input", {type: "checkbox", class: "trial-select",
        "data-job": t.job_id, checked: selected.has(t.job_id), onchange: (ev) => {
          if (ev.target.checked) selected.add(t.job_id); else selected.delete(t.job_id);
        }}) : "")},
      {key: "number", title: "Trial", value: (t) => num(t.number)},
      {key: "job", title: "Job", value: (t) => t.job_id,
        cell: (t) => (t.job_id ? h("a", {href: "/ui/jobs/" + encodeURIComponent(t.job_id)}, t.job_id) : "-")},
      {key: "state", title: "State", value: trialState, cell: (t) => stateBadge(trialState(t))},
      {key: "rungs", title: "Rungs", value: (t) => num(t.rungs_passed)},
      {key: "parent", title: "Copy of", value: (t) => num(t.parent),
        cell: (t) => (num(t.parent) >= 0 ? `trial ${t.parent} @ ${num(t.resumed_from_step)}` : "-")},
      {key: "best", title: `${sweep.metric} (${sweep.metric_scope || "last"})`, value: (t) => (t.has_metric ? Number(t.best_metric) : Infinity),
        cell: (t) => (t.has_metric ? fmtNum(t.best_metric, 6) : "-")},
      {key: "step", title: "Step", value: (t) => num(t.step)},
      {key: "ranks", title: "Rank-s", value: (t) => Number(t.rank_seconds || 0), cell: (t) => Number(t.rank_seconds || 0).toFixed(1)},
      ...ps.map((p, i) => ({key: "p" + i, title: p, value: (t) => {
        const v = Number((t.values || [])[i]);
        return isFinite(v) ? v : (t.values || [])[i] || "";
      }, cell: (t) => (t.values || [])[i] || ""})),
      {key: "reason", title: "Why it ended", value: (t) => t.reason || "", wrap: true},
    ];
    put(trials, sortableTable(columns, sweep.trials || [], {id: "trials-table", rowId: (t) => "trial-" + t.number,
      sortKey: "number"}));
  }

  function drawCharts() {
    if (!lineChart) lineChart = stepChart(lines, sweep.metric, false);
    const ts = (sweep.trials || []).filter((t) => histories.has(t.job_id));
    lineChart.data.datasets = ts.map((t) => ({
      label: `trial ${t.number}`, borderColor: colorOf(t.number), backgroundColor: colorOf(t.number),
      data: histories.get(t.job_id),
    }));
    const logY = logMetric(sweep.metric, ts.flatMap((t) => histories.get(t.job_id).map((p) => p.y)));
    setLog(lineChart.options.scales.y, logY);
    lines.dataset.logY = String(logY);
    lineChart.update("none");
    lines.dataset.lines = String(ts.filter((t) => histories.get(t.job_id).length).length);

    const ps = sweep.parameters || [];
    if (param.options.length !== ps.length) put(param, ps.map((p, i) => h("option", {value: String(i)}, p)));
    const i = Number(param.value || 0);
    const points = (sweep.trials || []).filter((t) => t.has_metric && isFinite(Number((t.values || [])[i])))
      .map((t) => ({x: Number(t.values[i]), y: Number(t.best_metric), trial: t.number}));
    const xs = points.map((p) => p.x).filter((x) => x > 0);
    // Log where the search is (log_uniform), or where positive values span
    // more than two decades.
    const logX = xs.length === points.length && ((sweep.parameter_kinds || [])[i] === "log_uniform" ||
      (xs.length > 1 && Math.max(...xs) / Math.min(...xs) > 100));
    const logV = logMetric(sweep.metric, points.map((p) => p.y));
    if (!scatter) {
      scatter = new Chart(dots, {type: "scatter", data: {datasets: [{label: "trials", data: [], pointRadius: 4,
        backgroundColor: "#1f77b4"}]}, options: {animation: false, maintainAspectRatio: false,
        plugins: {legend: {display: false}, tooltip: {callbacks: {label: (c) => `trial ${c.raw.trial}: ${fmtNum(c.raw.x, 4)} → ${fmtNum(c.raw.y, 6)}`}}},
        scales: {x: {type: "linear", title: {display: true, text: ""}, ticks: {callback: (v) => fmtNum(v, 3)}},
          y: {title: {display: true, text: `${sweep.metric} (${sweep.metric_scope || "last"})`}}}}});
    }
    setLog(scatter.options.scales.x, logX);
    setLog(scatter.options.scales.y, logV);
    scatter.options.scales.x.title.text = ps[i] || "";
    scatter.data.datasets[0].data = points;
    scatter.data.datasets[0].backgroundColor = points.map((p) => colorOf(p.trial));
    scatter.update("none");
    dots.dataset.points = String(points.length);
    dots.dataset.logX = String(logX);
    dots.dataset.logY = String(logV);
  }

  async function refresh() {
    try {
      sweep = (await api("GetSweep", {id})).sweep;
    } catch (e) {
      if (e.status === 404) {
        setMain(h("h1", {}, "Not found"), h("p", {id: "not-found"}, `No sweep ${id} that you may see.`));
        return;
      }
      return showError(status, e);
    }
    put(title, sweep.name + " ", h("span", {class: "muted"}, sweep.id));
    put(status, stateBadge(sweep.state), " ", h("span", {id: "sweep-reason"}, sweep.reason || ""));
    const ts = sweep.trials || [];
    const best = num(sweep.best_trial) >= 0 ? ts[sweep.best_trial] : null;
    put(summary, h("dl", {class: "summary"},
      h("dt", {}, "Searcher"), h("dd", {}, sweep.searcher + ((sweep.rungs || []).length ? ` (rungs at steps ${sweep.rungs.join(", ")})` : "")),
      h("dt", {}, "Metric"), h("dd", {}, `${sweep.metric} (${sweep.maximize ? "maximize" : "minimize"}, ` +
        `${sweep.metric_scope || "last"} value of each trial)`),
      h("dt", {}, "Trials"), h("dd", {id: "sweep-trials"}, `${ts.length} started of ${num(sweep.total_trials) || num(sweep.max_trials)}` +
        `${sweep.searcher === "grid" ? " (grid)" : ""}, ` +
        `${ts.filter((t) => t.job_id && !TERMINAL.has(t.state)).length} live, ${num(sweep.concurrency)} at once` +
        (sweep.searcher === "pbt" ? ` (a population of ${num(sweep.max_trials)})` : "")),
      h("dt", {}, "Best"), h("dd", {id: "sweep-best"}, best ? `trial ${best.number} (${best.job_id}): ${fmtNum(best.best_metric, 6)}` : "-")));
    const over = TERMINAL.has(sweep.state) && ts.every((t) => !t.job_id || TERMINAL.has(t.state));
    cancel.disabled = TERMINAL.has(sweep.state);
    drawTrials();
    put(events, sortableTable([
      {key: "time", title: "Time", value: (e) => num(e.unix_millis), cell: (e) => fmtTime(e.unix_millis)},
      {key: "reason", title: "Event", value: (e) => e.reason, wrap: true},
    ], (sweep.events || []).slice().reverse(), {id: "sweep-events-table"}));
    await Promise.all(ts.filter((t) => t.job_id && (!histories.has(t.job_id) || !TERMINAL.has(t.state))).map(async (t) => {
      try {
        histories.set(t.job_id, byStep(await api("GetJobHistory", {id: t.job_id, series: [sweep.metric]}), sweep.metric));
      } catch (e) {
        histories.set(t.job_id, []);
      }
    }));
    drawCharts();
    return over;
  }
  param.addEventListener("change", () => sweep && drawCharts());
  setMain(title, status, actions, message, summary,
    h("h2", {}, "The metric of every trial, by step"), h("div", {class: "chartbox"}, lines),
    h("h2", {}, "Hyperparameters against the metric"), h("div", {class: "filters"}, "x: ", param),
    h("div", {class: "chartbox"}, dots),
    h("h2", {}, "Trials"), h("p", {}, compare), trials, h("h2", {}, "Events"), events);
  let done = false;
  refresh().then((over) => {
    done = !!over;
    every(POLL_MS * 2, async () => { if (!done) done = !!(await refresh()); });
  });
}

// ---- jobs side by side ------------------------------------------------------

// A spec as dotted paths and their values (JSON text), for the differences.
function flatten(value, prefix, out) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out[prefix] = JSON.stringify(value);
  }
  return out;
}

function comparePage(ids) {
  const series = h("select", {id: "compare-series"},
    SERIES.flatMap((s) => [s.name].concat(s.with ? [s.with] : [])).map((n) => h("option", {value: n}, n)));
  const canvas = h("canvas", {id: "compare-chart"});
  const diffs = h("div", {id: "spec-diffs"});
  const finals = h("div", {id: "final-metrics"});
  const message = h("p", {id: "compare-message"});
  let chart = null;
  const jobs = new Map(), hists = new Map();

  function draw() {
    if (!chart) chart = stepChart(canvas, series.value, false);
    chart.options.scales.y.title.text = series.value;
    const shown = ids.filter((id) => hists.has(id));
    chart.data.datasets = shown.map((id, i) => ({label: `${jobs.get(id).name} (${id})`, borderColor: colorOf(i),
      backgroundColor: colorOf(i), data: byStep(hists.get(id), series.value)}));
    chart.update("none");
    canvas.dataset.lines = String(chart.data.datasets.filter((d) => d.data.length).length);
  }

  async function load() {
    const missing = [];
    await Promise.all(ids.map(async (id) => {
      try {
        jobs.set(id, (await api("GetJob", {id})).job);
        hists.set(id, await api("GetJobHistory", {id}));
      } catch (e) {
        missing.push(`${id}: ${e.code || ""} ${e.message}`);
      }
    }));
    put(message, missing.length ? `Not shown: ${missing.join("; ")}` : "");
    const shown = ids.filter((id) => jobs.has(id));
    // Series the jobs' scripts reported under names of their own.
    const listed = new Set([...series.options].map((o) => o.value));
    for (const id of shown) {
      for (const s of hists.get(id).series || []) {
        if (!listed.has(s.name)) series.append(h("option", {value: s.name}, s.name));
        listed.add(s.name);
      }
    }
    const flat = new Map(shown.map((id) => {
      let spec = {};
      try { spec = JSON.parse(jobs.get(id).spec_json || "{}"); } catch (e) { /* shown as empty */ }
      return [id, flatten(spec, "", {})];
    }));
    const keys = [...new Set(shown.flatMap((id) => Object.keys(flat.get(id))))].sort()
      .filter((k) => new Set(shown.map((id) => flat.get(id)[k])).size > 1);
    put(diffs, keys.length ? sortableTable([
      {key: "field", title: "Field", value: (k) => k},
      ...shown.map((id, i) => ({key: "j" + i, title: id, value: (k) => flat.get(id)[k] ?? "-"})),
    ], keys, {id: "diff-table", sortKey: "field"}) : h("p", {class: "muted"}, "The specs are the same."));
    const last = (id, name) => { const p = byStep(hists.get(id), name); return p.length ? p[p.length - 1].y : NaN; };
    const least = (id, name) => Math.min(...byStep(hists.get(id), name).map((p) => p.y));
    put(finals, sortableTable([
      {key: "id", title: "Job", value: (id) => id, cell: (id) => h("a", {href: "/ui/jobs/" + encodeURIComponent(id)}, id)},
      {key: "name", title: "Name", value: (id) => jobs.get(id).name},
      {key: "state", title: "State", value: (id) => jobs.get(id).state, cell: (id) => stateBadge(jobs.get(id).state)},
      {key: "step", title: "Step", value: (id) => num(jobs.get(id).step)},
      {key: "loss", title: "Final loss", value: (id) => last(id, "loss"), cell: (id) => fmtNum(last(id, "loss"), 6)},
      {key: "min", title: "Lowest loss", value: (id) => least(id, "loss"), cell: (id) => fmtNum(least(id, "loss"), 6)},
      {key: "eval", title: "Final eval loss", value: (id) => last(id, "eval_loss"), cell: (id) => fmtNum(last(id, "eval_loss"), 6)},
      {key: "sps", title: "Samples/s", value: (id) => last(id, "samples_per_second"),
        cell: (id) => fmtNum(last(id, "samples_per_second"), 4)},
    ], shown, {id: "finals-table", rowId: (id) => "final-" + id}));
    draw();
  }
  series.addEventListener("change", draw);
  setMain(h("h1", {}, `Comparing ${ids.length} jobs`), message,
    h("div", {class: "filters"}, "series: ", series), h("div", {class: "chartbox"}, canvas),
    h("h2", {}, "Final metrics"), finals, h("h2", {}, "Spec differences"), diffs);
  load();
}
