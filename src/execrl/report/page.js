// execrl report: draws the charts (plotly.js, inlined above) and runs the rollout browser. No network.
// The URL hash can preset the browser's filters: #run=NAME&step=N&verdict=pass&rmin=0&rmax=1&text=...&open=N (the
// first N rollouts shown unfolded), and check=export makes each chart's PNG and SVG once (their sizes land in the
// page's body, for tests)
"use strict";
const DATA = JSON.parse(document.getElementById("report-data").textContent);
const $ = (id) => document.getElementById(id);
// a run's entry in one of DATA's maps (its own key only: a run named "toString" is no method of Object's)
const of = (map, run) => (map && Object.prototype.hasOwnProperty.call(map, run) ? map[run] : undefined);
// text as written: markup escaped, and bidirectional controls (U+202E turns the code after it around on screen) shown
const attr = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
// shown text: bidirectional controls as their code points (they reorder what follows); an attribute's value keeps
// them (an option's value is the run's or verdict's own name: shown as code points, it matched no run's rows)
const esc = (s) => attr(s)
  .replace(/[\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]/g, (c) => `&lt;U+${c.charCodeAt(0).toString(16).toUpperCase()}&gt;`);

// ---- charts ----------------------------------------------------------------------------------------------------
function drawCharts() {
  const holder = $("charts");
  const drawn = DATA.charts.map((chart) => {
    const box = document.createElement("div");
    box.className = "chart";
    box.id = `chart-${chart.id}`;
    // a chart's notes (a metric not active in the run, and why) above its plot; a chart of such metrics only: no plot
    const notes = (chart.notes || []).map((n) => `<p class="note">${esc(n)}</p>`).join("");
    if (!chart.figure) {
      box.innerHTML = `<h3 class="chart-title">${esc(chart.title)}</h3>${notes}`;
      holder.appendChild(box);
      return null;
    }
    box.innerHTML = `${notes}<div class="plot" id="plot-${esc(chart.id)}"></div><div class="export">` +
      `<button data-format="png">PNG</button><button data-format="svg">SVG</button></div>`;
    holder.appendChild(box);
    const plot = box.querySelector(".plot");
    box.querySelectorAll("button").forEach((b) => b.addEventListener("click", () =>
      Plotly.downloadImage(plot, {format: b.dataset.format, filename: chart.id, width: 900, height: 500})));
    return Plotly.newPlot(plot, chart.figure.data, chart.figure.layout, {responsive: true, displaylogo: false})
      .then(() => plot);
  });
  return Promise.all(drawn.filter((d) => d !== null)).then((plots) => {
    // what a test reads: how many charts were drawn, and how many show no line at all
    const blank = plots.filter((p) => !Array.from(p.querySelectorAll(".scatterlayer path.js-line, .scatterlayer path.js-fill"))
      .some((path) => (path.getAttribute("d") || "").length > 10)).length;
    document.body.dataset.chartsRendered = String(plots.length);
    document.body.dataset.chartsBlank = String(blank);
  });
}

// ---- rollout browser ---------------------------------------------------------------------------------------------
const KEYWORDS = new Set(("and as assert async await break class continue def del elif else except False finally for from " +
  "global if import in is lambda None nonlocal not or pass raise return True try while with yield print").split(" "));

function highlight(code) {  // Python, roughly: comments, strings, numbers, keywords
  const out = [];
  // (a string left open runs to its line's end, a triple-quoted one to the code's: an open string scanned again
  // from each quote after it took seconds on a line of escaped quotes)
  const re = /(#[^\n]*)|("""[\s\S]*?(?:"""|$(?![\s\S]))|'''[\s\S]*?(?:'''|$(?![\s\S]))|"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?)|(\b\d+(?:\.\d+)?\b)|([A-Za-z_]\w*)|([\s\S])/g;
  let m;
  while ((m = re.exec(code)) !== null) {
    if (m[1]) out.push(`<span class="com">${esc(m[1])}</span>`);
    else if (m[2]) out.push(`<span class="str">${esc(m[2])}</span>`);
    else if (m[3]) out.push(`<span class="num">${esc(m[3])}</span>`);
    else if (m[4]) out.push(KEYWORDS.has(m[4]) ? `<span class="kw">${esc(m[4])}</span>` : esc(m[4]));
    else out.push(esc(m[5]));
  }
  return out.join("");
}

function rowsOf(run, step) {
  return of(of(DATA.rollouts, run), step) || [];
}

function fillSelect(select, values, keep) {
  select.innerHTML = values.map((v) => `<option value="${attr(v)}">${esc(v)}</option>`).join("");
  if (keep !== undefined && values.includes(keep)) select.value = keep;
}

function refreshSteps(keep) {
  const steps = Object.keys(of(DATA.rollouts, $("run").value) || {}).sort((a, b) => Number(a) - Number(b));
  fillSelect($("step"), steps, keep);
  if (keep === undefined && steps.length) $("step").value = steps[steps.length - 1];
  const verdicts = new Set();
  Object.values(of(DATA.rollouts, $("run").value) || {}).forEach((rows) => rows.forEach((r) => verdicts.add(r.verdict)));
  const chosen = $("verdict").value;
  $("verdict").innerHTML = `<option value="">all</option>` +
    Array.from(verdicts).sort().map((v) => `<option value="${attr(v)}">${esc(v)}</option>`).join("");
  if (verdicts.has(chosen)) $("verdict").value = chosen;
}

function matches(r) {
  const verdict = $("verdict").value, text = $("text").value.toLowerCase();
  const lo = $("rmin").value === "" ? -Infinity : Number($("rmin").value);
  const hi = $("rmax").value === "" ? Infinity : Number($("rmax").value);
  const reward = r.reward === null ? NaN : r.reward;
  if (verdict && r.verdict !== verdict) return false;
  if ((lo > -Infinity || hi < Infinity) && !(reward >= lo && reward <= hi)) return false;
  if (text && !(String(r.prompt) + String(r.completion)).toLowerCase().includes(text)) return false;
  return true;
}

function cutHtml(r) {
  // the row's `truncated`: the episode ended at a length limit, named by its `cut_by` (a model turn reached
  // max_new_tokens, or the context's end, before an EOS token or a stop string; or the environment's answer had no
  // room), since its answer may still be whole (and pass); a run before cut_by: the likely limit
  if (!r.truncated) return "";
  const lim = of(DATA.limits, $("run").value) || {};
  const context = `policy.max_total_sequence_length = ${lim.max_total_sequence_length}`;
  const [label, why] = {
    max_new_tokens: [`cut at max_new_tokens (${lim.max_new_tokens})`, "no EOS token or stop string within " +
      `policy.generation.max_new_tokens = ${lim.max_new_tokens} tokens: graded as it stands`],
    context: [`cut at the context (${lim.max_total_sequence_length})`, "no EOS token or stop string before the " +
      `episode reached ${context} tokens: graded as it stands`],
    answer: [`ended: no room for the environment's answer (context ${lim.max_total_sequence_length})`,
      `the environment's answer and the model's next turn had no room within ${context} tokens: the episode was ` +
      "scored as it stood"],
  }[r.cut_by] || [r.turns > 1 ? `cut at the length limit (max_new_tokens ${lim.max_new_tokens}, context ` +
    `${lim.max_total_sequence_length})` : `cut at max_new_tokens (${lim.max_new_tokens})`, "no EOS token or stop " +
    `string within policy.generation.max_new_tokens = ${lim.max_new_tokens} tokens (or ${context} for the episode): ` +
    "graded as it stands"];
  return `<span class="cut" title="${esc(why)}">${esc(label)}</span>`;
}

function untrainedWhy(r) {
  return r.seat === undefined ? "a group dynamic sampling left out of the loss"
    : "the frozen opponent's seat (self-play): not trained on";
}

function rowHtml(r, i) {
  const reward = r.reward === null ? "invalid" : Number(r.reward).toFixed(3);
  const turns = (r.messages || []).map((m) =>
    `<div class="turn"><div class="role">${esc(m.role)}</div><pre>${esc(m.content)}</pre></div>`).join("");
  const tests = (r.tests || []).map((t, j) => `<span class="verdict ${esc(t)}" title="test ${j + 1}">${j + 1}: ${esc(t)}</span>`).join("");
  const parts = Object.entries(r.parts || {}).map(([k, v]) => `<tr><td>${esc(k)}</td><td>${Number(v).toFixed(4)}</td></tr>`).join("");
  return `<details class="row" data-verdict="${esc(r.verdict)}" data-reward="${esc(reward)}">` +
    `<summary><span class="verdict ${esc(r.verdict)}">${esc(r.verdict)}</span><span>reward ${reward}</span>` +
    `<span>${esc(r.problem)}</span>${r.turns > 1 ? `<span>${esc(r.turns)} turns</span>` : ""}${cutHtml(r)}` +
    (r.trained === false ? `<span class="untrained" title="${esc(untrainedWhy(r))}">not trained</span>` : "") +
    `</summary>` +
    `<div class="body"><h4>Conversation${r.turns > 1 ? " (turn by turn)" : ""}</h4>${turns}` +
    (r.code ? `<h4>Extracted code</h4><pre class="code">${highlight(r.code)}</pre>` : "<h4>No code extracted</h4>") +
    (tests ? `<h4>Tests</h4><div class="tests">${tests}</div>` : "") +
    (parts ? `<h4>Reward breakdown</h4><table class="parts"><tr><th>component</th><th>value</th></tr>${parts}</table>` : "") +
    `<h4>Completion as the trainer saw it</h4><pre>${esc(r.completion)}</pre></div></details>`;
}

function refreshRows() {
  const all = rowsOf($("run").value, $("step").value);
  const shown = all.filter(matches);
  $("rows").innerHTML = shown.map((r, i) => {  // (a row the page cannot show: a line saying so, the others shown)
    try { return rowHtml(r, i); } catch (e) { return `<p class="note">rollout ${i + 1}: cannot be shown (${esc(e)})</p>`; }
  }).join("");
  const none = of(DATA.no_rollouts, $("run").value);  // (a run that wrote none: why, and the key to set)
  $("count").textContent = none !== undefined ? none : `${shown.length} of ${all.length} rollouts`;
  document.body.dataset.rowsShown = String(shown.length);
}

function startBrowser() {
  const preset = Object.fromEntries(new URLSearchParams(location.hash.slice(1)));
  fillSelect($("run"), DATA.runs, preset.run);
  refreshSteps(preset.step);
  for (const key of ["verdict", "rmin", "rmax", "text"]) if (preset[key] !== undefined) $(key).value = preset[key];
  $("run").addEventListener("change", () => { refreshSteps(); refreshRows(); });
  for (const key of ["step", "verdict"]) $(key).addEventListener("change", refreshRows);
  for (const key of ["rmin", "rmax", "text"]) $(key).addEventListener("input", refreshRows);
  refreshRows();
  document.querySelectorAll("#rows details").forEach((d, i) => { if (i < Number(preset.open || 0)) d.open = true; });
}

function checkExport() {
  const plots = Array.from(document.querySelectorAll("#charts .plot"));
  const sizes = (format) => Promise.all(plots.map((p) => Plotly.toImage(p, {format: format, width: 900, height: 500})
    .then((url) => url.length)));
  return Promise.all([sizes("png"), sizes("svg")]).then(([png, svg]) => {
    document.body.dataset.exportPng = String(Math.min(...png));
    document.body.dataset.exportSvg = String(Math.min(...svg));
  });
}

try { startBrowser(); } catch (e) { document.body.dataset.browserError = String(e); console.error(e); }  // (the charts
drawCharts()  // are drawn whatever the browser's data holds)
  .then(() => (new URLSearchParams(location.hash.slice(1)).get("check") === "export" ? checkExport() : null))
  .catch((e) => { document.body.dataset.chartsError = String(e); console.error(e); });
