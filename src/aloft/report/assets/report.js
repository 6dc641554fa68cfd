"use strict";
// aloft report: draws the curves, the eval and config tables, and the trajectory browser from the
// data embedded in the page (aloft.report.content builds it). window.aloftReport exposes the state
// for tests and for the served page's refresh.
(function () {
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  const state = { data: null, xAxis: "step", drawn: new Set(), run: 0, step: null, shown: [], selected: null };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }
  const fmt = (v) => (v === null || v === undefined ? "" : typeof v === "number" ? String(+v.toPrecision(4)) : String(v));

  // ---------------------------------------------------------------- curves
  function series(run, key) {
    const table = key.startsWith("eval/") ? run.evals : run.steps;
    const ys = table[key];
    const xs = table[state.xAxis] || table.step;
    if (!ys || !xs) return null;
    const x = [], y = [];
    ys.forEach((value, i) => { if (value !== null && xs[i] !== null) { x.push(xs[i]); y.push(value); } });
    return x.length ? { x, y } : null;
  }

  function drawChart(div) {
    const key = div.dataset.key;
    const traces = [];
    state.data.runs.forEach((run, i) => {
      const s = series(run, key);
      if (s) traces.push({ x: s.x, y: s.y, name: run.name, type: "scatter", mode: s.x.length > 1 ? "lines+markers" : "markers",
                           line: { color: COLORS[i % COLORS.length], width: 1.5 }, marker: { size: 4 } });
    });
    const layout = { title: { text: key, font: { size: 13 } }, height: 240, margin: { l: 50, r: 10, t: 30, b: 40 },
                     showlegend: false,  // the runs' colours are listed at the top of the page
                     xaxis: { title: { text: state.xAxis === "step" ? "step" : "minutes" } } };
    Plotly.react(div, traces, layout, { displayModeBar: false, responsive: true });
    state.drawn.add(key);
  }

  function drawSection(details) {
    for (const div of details.querySelectorAll(".chart")) drawChart(div);
  }

  function buildCurves() {
    const root = document.getElementById("curves");
    // A redraw (the served page's refresh) keeps the sections the reader opened or closed.
    const wasOpen = new Map([...root.querySelectorAll("details.section")].map((d) => [d.dataset.title, d.open]));
    root.querySelectorAll("details.section").forEach((node) => node.remove());
    state.drawn.clear();
    state.data.sections.forEach((section, index) => {
      const grid = el("div", { class: "grid" });
      for (const key of section.keys) grid.append(el("div", { class: "chart", id: "chart:" + key, "data-key": key }));
      // Closed sections draw when opened: a page with a hundred metrics still opens at once.
      const details = el("details", { class: "section", "data-title": section.title },
                         el("summary", { text: `${section.title} (${section.keys.length})` }), grid);
      details.open = wasOpen.has(section.title) ? wasOpen.get(section.title) : index === 0;
      details.addEventListener("toggle", () => { if (details.open) drawSection(details); });
      root.append(details);
      if (details.open) drawSection(details);
    });
  }

  // ---------------------------------------------------------------- tables
  function table(headers, rows) {
    return el("table", {}, el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { text: h })))),
              el("tbody", {}, ...rows.map((row) => el("tr", {}, ...row.map((cell) =>
                el("td", { class: typeof cell === "number" ? "num" : null, text: fmt(cell) }))))));
  }

  function buildEvalTable() {
    const root = document.getElementById("eval-table");
    root.replaceChildren();
    const rows = state.data.runs.flatMap((run) => run.eval_table.map((row) => ({ run: run.name, ...row })));
    if (!rows.length) { root.append(el("p", { class: "empty", text: "No eval yet." })); return; }
    const metrics = [...new Set(rows.flatMap((row) => Object.keys(row)))]
      .filter((key) => !["run", "step", "label"].includes(key))
      .sort((a, b) => (a === "reward/mean" ? -1 : b === "reward/mean" ? 1 : a.localeCompare(b, "en", { numeric: true })));
    root.append(table(["run", "step", "eval set", ...metrics],
                      rows.map((row) => [row.run, row.step, row.label, ...metrics.map((m) => row[m] ?? null)])));
    root.firstChild.id = "eval-table-grid";
  }

  function buildConfig() {
    const runs = state.data.runs;
    const diff = document.getElementById("config-diff");
    diff.replaceChildren();
    if (runs.length > 1) {
      diff.append(el("h3", { text: "Differences" }));
      diff.append(state.data.config_diff.length
        ? table(["key", ...runs.map((r) => r.name)], state.data.config_diff.map((d) => [d.key, ...d.values.map((v) => JSON.stringify(v))]))
        : el("p", { class: "empty", text: "The configs are the same." }));
      diff.lastChild.id = "config-diff-table";
    }
    const keys = [...new Set(runs.flatMap((r) => Object.keys(r.config)))].sort();
    const full = document.getElementById("config-table");
    full.replaceChildren(table(["key", ...runs.map((r) => r.name)], keys.map((k) => [k, ...runs.map((r) => JSON.stringify(r.config[k]))])));
  }

  // ---------------------------------------------------------------- trajectory browser
  function option(value, text) { return el("option", { value, text: text ?? value }); }

  function currentRecords() {
    const run = state.data.runs[state.run];
    return (run && run.trajectories[state.step]) || [];
  }

  function fillSteps() {
    const run = state.data.runs[state.run];
    const steps = Object.keys(run ? run.trajectories : {}).sort((a, b) => +a - +b);
    const select = document.getElementById("f-step");
    select.replaceChildren(...steps.map((s) => option(s, "step " + s)));
    if (!steps.includes(state.step)) state.step = steps.length ? steps[steps.length - 1] : null;
    if (state.step !== null) select.value = state.step;
    const records = currentRecords();
    const statuses = [...new Set(records.map((r) => r.status))].sort();
    const envs = [...new Set(records.map((r) => r.env))].sort();
    const keep = (id, values) => {
      const node = document.getElementById(id), before = node.value;
      node.replaceChildren(option("", "all"), ...values.map((v) => option(v)));
      node.value = values.includes(before) ? before : "";
    };
    keep("f-status", statuses);
    keep("f-env", envs);
  }

  function applyFilters() {
    const status = document.getElementById("f-status").value;
    const env = document.getElementById("f-env").value;
    const min = document.getElementById("f-min").value, max = document.getElementById("f-max").value;
    const text = document.getElementById("f-text").value.toLowerCase();
    const records = currentRecords(), run = state.data.runs[state.run];
    state.shown = records.map((r, i) => i).filter((i) => {
      const r = records[i];
      if (status && r.status !== status) return false;
      if (env && r.env !== env) return false;
      if (min !== "" && !(r.reward !== null && r.reward >= +min)) return false;
      if (max !== "" && !(r.reward !== null && r.reward <= +max)) return false;
      if (text && !(completionText(run, r).toLowerCase().includes(text) || r.prompt.toLowerCase().includes(text))) return false;
      return true;
    });
    const list = document.getElementById("traj-list");
    list.replaceChildren(...state.shown.map((i) => {
      const r = records[i];
      const turns = r.turn_rewards.length;
      return el("li", { "data-index": i, class: "status-" + r.status, onclick: () => select(i) },
                `${r.group} #${r.sample} · reward ${fmt(r.reward)} · ${r.status} · ${turns} turn${turns === 1 ? "" : "s"}`);
    }));
    document.getElementById("f-count").textContent = `${state.shown.length} of ${records.length} shown`;
    if (!state.shown.includes(state.selected)) state.selected = null;
    select(state.selected ?? (state.shown.length ? state.shown[0] : null));
  }

  function tokenSpan(run, r, i) {
    const trained = r.mask[i] === "1";
    const id = r.ids[i];
    const tlp = trainerLogprob(r, i);
    const tip = [`token ${id}`, `sampler logprob ${fmt(r.lp[i])}`, `trainer logprob ${tlp === null ? "not recorded" : fmt(tlp)}`];
    return el("span", { class: "tok " + (trained ? "trained" : "env"), title: tip.join(" · "), "data-i": i },
              run.tokens[id] ?? `⟨${id}⟩`);
  }

  // Tool calls in a reply: the gym's tag calls (<sql>, <search>, <python>, <calculator>, <code>) and
  // Hermes/Qwen <tool_call> JSON. Their tokens get the "call" class; returns the tools' names.
  const CALL = /<(sql|search|python|calculator|code|tool_call)>([\s\S]*?)<\/\1>/g;
  function markToolCalls(spans) {
    const starts = [];
    let text = "";
    for (const span of spans) { starts.push(text.length); text += span.textContent; }
    const names = [];
    for (const match of text.matchAll(CALL)) {
      let name = match[1];
      if (name === "tool_call") { try { name = JSON.parse(match[2]).name || name; } catch (e) { /* not JSON: keep the tag */ } }
      names.push(name);
      const from = match.index, to = match.index + match[0].length;
      spans.forEach((span, k) => {
        const a = starts[k], b = a + span.textContent.length;
        if (b > from && a < to) span.classList.add("call");
      });
    }
    return names;
  }

  function select(index) {
    state.selected = index;
    for (const li of document.querySelectorAll("#traj-list li")) li.classList.toggle("selected", +li.dataset.index === index);
    const view = document.getElementById("traj-view");
    if (index === null) { view.replaceChildren(el("p", { class: "empty", text: "No trajectory matches." })); return; }
    const run = state.data.runs[state.run], r = currentRecords()[index];
    const advantage = r.adv === null || r.adv === undefined ? "not recorded" : Array.isArray(r.adv) ? `${fmt(r.adv[0])} … (per token)` : fmt(r.adv);
    const parts = [
      el("div", { class: "meta" },
         el("span", { text: `group ${r.group} · sample ${r.sample}` }),
         el("span", { class: "badge status-" + r.status, text: "status " + r.status }),
         el("span", { text: "reward " + fmt(r.reward) }),
         el("span", { text: "advantage " + advantage }),
         el("span", { text: "env " + r.env }),
         el("span", { text: "policy version " + fmt(r.version) })),
      r.error ? el("p", { class: "error", text: r.error }) : null,
      el("details", {}, el("summary", { text: "prompt" }), el("div", { class: "prompt", text: r.prompt })),
    ];
    // Turns are the runs of the loss mask: trained runs are the policy's replies, the rest env observations.
    let start = 0, turn = 0;
    while (start < r.ids.length) {
      const trained = r.mask[start] === "1";
      let end = start;
      while (end < r.ids.length && (r.mask[end] === "1") === trained) end++;
      const spans = [];
      for (let i = start; i < end; i++) spans.push(tokenSpan(run, r, i));
      const calls = trained ? markToolCalls(spans) : [];
      const called = calls.length ? ` · tool call${calls.length > 1 ? "s" : ""}: ${calls.join(", ")}` : "";
      const title = trained ? `policy turn ${turn + 1} · reward ${fmt(r.turn_rewards[turn])} · ${end - start} tokens trained${called}`
                            : `env observation · ${end - start} tokens, not trained`;
      parts.push(el("div", { class: "turn " + (trained ? "policy" : "env") }, el("h4", { text: title }), el("div", { class: "tokens" }, ...spans)));
      if (trained) turn++;
      start = end;
    }
    if (Object.keys(r.metrics || {}).length) parts.push(el("p", { class: "meta", text: "env metrics: " + Object.entries(r.metrics).map(([k, v]) => `${k} ${fmt(v)}`).join(", ") }));
    view.replaceChildren(...parts.filter((part) => part !== null));
  }

  function buildBrowser() {
    const runSelect = document.getElementById("f-run");
    runSelect.replaceChildren(...state.data.runs.map((run, i) => option(String(i), run.name)));
    runSelect.value = String(state.run);
    fillSteps();
    applyFilters();
  }

  // ---------------------------------------------------------------- page
  function render(data) {
    state.data = data;
    state.run = Math.min(state.run, data.runs.length - 1);
    document.getElementById("run-list").replaceChildren(...data.runs.map((run, i) =>
      el("li", { style: `color:${COLORS[i % COLORS.length]}`, text: `${run.name} (${run.path}): ${run.steps.step ? run.steps.step.length : 0} steps, ${run.eval_table.length} eval rows` })));
    document.getElementById("notes").replaceChildren(...data.runs.flatMap((run) => run.notes.map((n) => el("div", { text: `${run.name}: ${n}` }))));
    buildCurves();
    buildEvalTable();
    buildConfig();
    buildBrowser();
  }

  document.getElementById("x-axis").addEventListener("change", (event) => {
    state.xAxis = event.target.value;
    document.querySelectorAll("details.section[open]").forEach(drawSection);
  });
  document.getElementById("f-run").addEventListener("change", (e) => { state.run = +e.target.value; state.selected = null; fillSteps(); applyFilters(); });
  document.getElementById("f-step").addEventListener("change", (e) => { state.step = e.target.value; state.selected = null; fillSteps(); applyFilters(); });
  for (const id of ["f-status", "f-env", "f-min", "f-max", "f-text"]) document.getElementById(id).addEventListener("input", applyFilters);

  async function inflate(base64) {
    const binary = atob(base64);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }

  // The trainer's logprobs travel as differences from the sampler's (see aloft.report.content).
  function trainerLogprob(r, i) { return r.tlp_diff ? +(r.lp[i] + r.tlp_diff[i]).toFixed(4) : null; }

  // A trajectory's completion text, joined from its token texts when first searched.
  function completionText(run, r) {
    if (r.text === undefined) r.text = r.ids.map((id) => run.tokens[id] ?? "").join("");
    return r.text;
  }

  window.aloftReport = { state, render, select, applyFilters, inflate };
  // Served (aloft report --serve): fetch the data again every few seconds; redraw when it changed.
  async function refresh(etag) {
    const response = await fetch("data", { headers: etag ? { "If-None-Match": etag } : {}, cache: "no-store" });
    if (response.status === 200) {
      render(await inflate(await response.text()));
      document.body.dataset.refreshes = String(+(document.body.dataset.refreshes || 0) + 1);
      return response.headers.get("ETag");
    }
    return etag;
  }

  inflate(document.getElementById("report-data").textContent.trim()).then((data) => {
    render(data);
    document.body.dataset.ready = "true";
    const every = +document.body.dataset.refresh;
    if (every > 0 && location.protocol.startsWith("http")) {
      let etag = null;
      const tick = async () => { try { etag = await refresh(etag); } finally { setTimeout(tick, every * 1000); } };
      setTimeout(tick, every * 1000);
    }
  });
})();
