// The page: controls → `--set` overrides → the simulator (servesim.js) →
// hand-drawn SVG plots, tables and explain's sentences. The state lives in
// the query string, so a link reproduces the page.
'use strict';

const $ = (id) => document.getElementById(id);
const SVGNS = 'http://www.w3.org/2000/svg';
const COLORS = { vllm: '#0b57d0', sglang: '#a04000' };
const MARKS = { knee: '#b3261e', kv: '#6a1b9a', you: '#1f1f1f' };
// The sweep's concurrencies when the box is blank: explain's own grid around the limit that
// binds first (web/src/lib.rs `explain_grid`, sim::explain::plan), each point with explain's
// prompts, so the table's knee is explain's; this one only where that grid is unknown.
const FALLBACK_GRID = '1,16,32,42,64,128';
// explain's prompts a slot at each point of its knee's sweep, and its cap (sim/src/explain.rs).
const EXPLAIN_PROMPTS_PER_SLOT = 8;
const MAX_EXPLAIN_PROMPTS = 50000;
// A pool pinned in tokens (the other sizing sources derive it from a memory fraction).
const PINNED_SOURCES = ['kv_cache_tokens', 'num_gpu_blocks_override', 'kv_cache_memory_bytes', 'max_total_num_tokens'];
const NAMES = { vllm: 'vLLM', sglang: 'SGLang' };

// Engine-neutral knobs and each engine's flag for them. How the two engines' flags differ in
// meaning is the core's note (sim::config::KNOBS, docs/parameter-mapping.md), shown under the
// knob. A slider's range is where it is handy; a value outside it (typed in the box) widens it,
// so the slider never shows another value than the one sent.
const KNOBS = [
  { key: 'mrun', label: 'Running cap', flags: { vllm: 'max_num_seqs', sglang: 'max_running_requests' }, min: 1, max: 1024, step: 1 },
  { key: 'budget', label: 'Token budget per step', flags: { vllm: 'max_num_batched_tokens', sglang: 'chunked_prefill_size' }, min: 256, max: 16384, step: 256, hint: 'The alignment table\'s "per-step token cap". vLLM needs at least max_num_seqs (the slider starts there). SGLang alone: -1 turns chunking off (the slider then has no position); vLLM has no such value, so side by side -1 is refused on max_num_batched_tokens' },
  { key: 'mem', label: 'Memory fraction', flags: { vllm: 'gpu_memory_utilization', sglang: 'mem_fraction_static' }, min: 0.05, max: 1, step: 0.01, hint: 'blank: the scenario pins the pool in tokens, and no fraction applies (the KV pool choice above derives it from memory; SGLang\'s max_total_tokens only bounds a derived pool)' },
  // fp8 is vLLM's name for an e4m3 cache; SGLang's --kv-cache-dtype calls it fp8_e4m3.
  { key: 'dtype', label: 'KV cache dtype', flags: { vllm: 'kv_cache_dtype', sglang: 'kv_cache_dtype' }, values: { sglang: { fp8: 'fp8_e4m3' } }, choices: ['auto', 'fp8'] },
  // Offered: the sizes the model's heads allow (tpChoices); the engines refuse the others.
  { key: 'tp', label: 'Tensor parallel size', flags: { vllm: 'tensor_parallel_size', sglang: 'tp_size' }, choices: ['1', '2', '4', '8'] },
  // One switch, inverted on SGLang: on is enable_prefix_caching=true / disable_radix_cache=false.
  { key: 'cache', label: 'Prefix cache', flags: { vllm: 'enable_prefix_caching', sglang: 'disable_radix_cache' }, values: { vllm: { on: 'true', off: 'false' }, sglang: { on: 'false', off: 'true' } }, choices: ['on', 'off'], hint: 'on: vLLM enable_prefix_caching=true, SGLang disable_radix_cache=false (its radix cache on); off: the reverse' },
];
const LOAD = [
  { key: 'c', label: 'Concurrency', min: 1, max: 256, step: 1, mode: 'c' },
  { key: 'rate', label: 'Request rate (req/s)', min: 0.1, max: 50, step: 0.1, mode: 'rate' },
  { key: 'in', label: 'Input length (tokens)', min: 16, max: 32768, step: 16 },
  { key: 'out', label: 'Output length (tokens)', min: 1, max: 8192, step: 1 },
  // The random dataset's prefix may be 0 (none); prefix_repetition's is at least 1 (knobMin).
  { key: 'prefix', label: 'Shared prefix (tokens)', min: 0, max: 32768, step: 16 },
  { key: 'prompts', label: 'Prompts per run', min: 1, max: 5000, step: 1 },
  { key: 'seed', label: 'Seed', min: 0, max: 1000000, step: 1 },
];

const state = {
  scenario: null, // shipped scenario name, or null when pasted
  pasted: null, // pasted scenario text
  engine: null, // 'vllm' | 'sglang' | 'both' (null: the scenario's)
  kvpool: 'scenario',
  mode: null, // 'c' | 'rate' | 'all' (null: the scenario's own: a cap is 'c', a rate with no cap 'rate', neither 'all')
  values: {}, // knob key -> string value set by the user (absent: the scenario's)
  grid: null, // the sweep's concurrencies as typed (null: explain's grid)
};

let sim = null;
let shipped = [];
let coreKnobs = []; // sim::config::KNOBS: [{name, vllm, sglang, note}]
let base = null; // resolve() of the scenario as chosen, no knobs
const cache = new Map();

// ---------- formatting ----------
const fmt = (x, d) => (x == null || !isFinite(x) ? '–' : Number(x).toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }));
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));

// ---------- the URL ----------
function readUrl() {
  const q = new URLSearchParams(location.search);
  if (q.has('paste')) state.pasted = q.get('paste');
  else if (q.has('s')) state.scenario = q.get('s');
  if (q.has('engine')) state.engine = q.get('engine');
  if (q.has('kvpool')) state.kvpool = q.get('kvpool');
  if (q.has('mode')) state.mode = q.get('mode');
  if (q.has('grid')) state.grid = q.get('grid');
  for (const k of [...KNOBS, ...LOAD]) if (q.has(k.key)) state.values[k.key] = q.get(k.key);
}

function writeUrl() {
  const q = new URLSearchParams();
  if (state.pasted != null) q.set('paste', state.pasted);
  else if (state.scenario && state.scenario !== shipped[0].name) q.set('s', state.scenario);
  if (state.engine && base && state.engine !== base.engine) q.set('engine', state.engine);
  if (state.kvpool !== 'scenario') q.set('kvpool', state.kvpool);
  if (state.mode) q.set('mode', state.mode);
  if (state.grid != null) q.set('grid', state.grid);
  for (const k of [...KNOBS, ...LOAD]) if (state.values[k.key] != null && state.values[k.key] !== '') q.set(k.key, state.values[k.key]);
  for (const k of ['selftest', 'report']) {
    const keep = new URLSearchParams(location.search).get(k);
    if (keep) q.set(k, keep);
  }
  const s = q.toString();
  history.replaceState(null, '', s ? '?' + s : location.pathname);
}

// ---------- the scenario and its requests ----------
// A scenario that is not a shipped file (pasted, or translated to the other engine) is run under
// the name of the file the Reproduce section asks to save it as: the binary labels its output
// (a sweep's "scenario", explain's) and its errors with the path it reads, so the page's output
// is then the command's, byte for byte.
const PASTED_FILE = 'scenario.json';
const translatedFile = (kind) => `scenario-${kind}.json`;
function scenarioRequest() {
  if (state.pasted != null) return { scenario: state.pasted, origin: PASTED_FILE };
  const s = shipped.find((x) => x.name === state.scenario) || shipped[0];
  return { scenario: s.text, origin: s.origin };
}

// The engines to run: [{kind, req, notes, from}] where req is a scenario request on that engine
// and `from` the scenario it was translated from (its origin), if it was.
function engines() {
  const req = scenarioRequest();
  const own = base.engine;
  const want = state.engine || own;
  const kinds = want === 'both' ? [own, own === 'vllm' ? 'sglang' : 'vllm'] : [want];
  return kinds.map((kind) => {
    if (kind === own) return { kind, req, notes: [] };
    const key = 'translate:' + req.origin + ':' + kind + ':' + req.scenario;
    let t = cache.get(key);
    if (!t) {
      t = sim.translate({ ...req, to: kind });
      cache.set(key, t);
    }
    // t.origin is `ORIGIN [kind]`, as `sweep --set engine.kind=vllm,sglang` labels it; this one
    // engine alone has no such command: it runs from its file, scenario-KIND.json.
    return { kind, req: { scenario: JSON.stringify(t.scenario, null, 2), origin: translatedFile(kind) }, notes: t.notes, from: req.origin };
  });
}

function datasetFields(r) {
  const d = r.dataset.name;
  if (d === 'random') return { in: 'random_input_len', out: 'random_output_len', prefix: 'random_prefix_len' };
  if (d === 'prefix_repetition') return { in: 'prefix_repetition_suffix_len', out: 'prefix_repetition_output_len', prefix: 'prefix_repetition_prefix_len' };
  return {};
}

// The knobs as `--set`s in the engine's own flags (the load is added per run).
function knobSets(kind) {
  const sets = [];
  const v = state.values;
  if (state.kvpool === 'memory') {
    if (kind === 'vllm') sets.push('engine.kv_cache_tokens=null', 'engine.num_gpu_blocks_override=null', 'engine.kv_cache_memory_bytes=null');
    else sets.push('engine.max_total_num_tokens=null', 'engine.max_total_tokens=null');
  }
  for (const k of KNOBS) {
    if (v[k.key] == null || v[k.key] === '') continue;
    const named = k.values && k.values[kind] && k.values[kind][v[k.key]];
    sets.push(`engine.${k.flags[kind]}=${named || v[k.key]}`);
  }
  const f = datasetFields(base);
  for (const k of ['in', 'out', 'prefix']) if (f[k] && v[k] != null && v[k] !== '') sets.push(`workload.${f[k]}=${v[k]}`);
  return sets;
}

// The seed as typed, sent as text: a JavaScript number is exact only up to 2^53, a seed goes to
// 2^64 - 1 (the simulator reads the text and refuses, naming the seed, what --seed refuses).
function seed() {
  const s = state.values.seed;
  return s != null && String(s).trim() !== '' ? String(s).trim() : undefined;
}

// The load mode: the user's, else the scenario's own, as `servesim simulate` of it runs it: a cap
// on requests in flight is fixed concurrency ('c'); a request rate with no cap, rate mode; neither,
// every prompt sent at once ('all': `vllm bench serve`'s default, no cap and no rate; a trace's
// own arrivals for a trace).
function mode() {
  if (state.mode) return state.mode;
  if (!base || base.max_concurrency != null) return 'c';
  return base.request_rate != null ? 'rate' : 'all';
}

const given = (k) => state.values[k] != null && String(state.values[k]).trim() !== '';

// The concurrency as typed (the simulator refuses what the CLI refuses: 0, 2.5, ...); blank, the
// scenario's cap, else (a scenario with none) the one `servesim explain` runs it at, which the
// label names (defaultConcurrency).
function concurrencyText() {
  return given('c') ? String(state.values.c).trim() : String(defaultConcurrency(base).value);
}
function defaultConcurrency(r) {
  if (r && r.max_concurrency != null) return { value: r.max_concurrency, why: 'the scenario\'s' };
  if (r && r.explain_concurrency != null) return { value: r.explain_concurrency, why: 'the scenario sets no cap: explain\'s, twice the limit that binds first' };
  return { value: 1, why: 'the scenario sets no cap' };
}
function concurrency() {
  return Number(concurrencyText());
}

// Blank "Prompts per run": fixed concurrency, the sweep's rule (explain's 8 a slot, sweepPrompts),
// so the run at concurrency C is the sweep's point at C, the same figure in the summary, the
// table and the chart; a rate, the scenario's and at least 200; all at once, the scenario's (the
// label says which). `r`: the scenario resolved with the knobs.
const RATE_MIN_PROMPTS = 200;
function defaultPrompts(r) {
  if (mode() === 'all') return r.num_prompts;
  return mode() === 'rate' ? Math.max(r.num_prompts, RATE_MIN_PROMPTS) : sweepPrompts(Math.max(1, Math.ceil(concurrency()) || 1), r);
}

// A closed loop (fixed concurrency, and every point of the sweep): the scenario's own request
// rate set aside, as explain's knee sweep sets it aside and as `servesim sweep` needs told
// (`--set workload.request_rate=null`; it keeps a scenario's rate otherwise). A trace keeps its
// arrivals (no set removes them; the sweep then says it is an open loop).
function closedLoopSets(r) {
  return r && r.request_rate != null ? ['workload.request_rate=null'] : [];
}

function loadSets(r) {
  const p = given('prompts') ? String(state.values.prompts).trim() : defaultPrompts(r);
  if (mode() === 'rate') {
    // Unset, the scenario's own rate (the box shows it), else 1 req/s.
    const r = given('rate') ? String(state.values.rate).trim() : (base && base.request_rate) || 1;
    return [`workload.request_rate=${r}`, 'workload.max_concurrency=null', `workload.num_prompts=${p}`];
  }
  if (mode() === 'all') {
    // No cap and no rate: every prompt sent at once (a trace keeps its own arrivals).
    return [...(base && base.request_rate != null ? ['workload.request_rate=null'] : []), 'workload.max_concurrency=null', `workload.num_prompts=${p}`];
  }
  return [...closedLoopSets(r), `workload.max_concurrency=${concurrencyText()}`, `workload.num_prompts=${p}`];
}

// The sweep's concurrencies as typed; null when the box is blank (explain's grid).
function gridValues() {
  if (state.grid == null || state.grid.trim() === '') return null;
  const g = state.grid.split(',').map((x) => x.trim()).filter((x) => x !== '').map(Number);
  // Past 2^53 a number is not exact: refused here (the simulator gives the limit, 1,000,000, for the rest).
  if (!g.length || g.some((x) => !Number.isSafeInteger(x) || x < 1)) throw new ServesimError(`--concurrency: cannot read ${JSON.stringify(state.grid)}: give increasing whole numbers, e.g. ${FALLBACK_GRID}`);
  return g;
}

// A point's prompts as explain gives each point of its knee's sweep (sim::explain::plan).
function sweepPrompts(c, r) {
  let p = Math.min(c * EXPLAIN_PROMPTS_PER_SLOT, Math.max(MAX_EXPLAIN_PROMPTS, c));
  if (r.dataset.name === 'prefix_repetition') p = Math.max(p, r.dataset.num_prefixes);
  return p;
}

function cached(key, f) {
  if (cache.has(key)) return cache.get(key);
  const v = f();
  cache.set(key, v);
  if (cache.size > 200) cache.delete(cache.keys().next().value);
  return v;
}

// ---------- SVG ----------
function el(name, attrs, parent) {
  const e = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

// Ticks at 1, 2, 2.5 or 5 times a power of ten; `integer`: whole steps only (counts, concurrencies).
function niceTicks(lo, hi, n, integer) {
  const span = hi - lo || 1;
  const step0 = span / n;
  const mag = Math.pow(10, Math.floor(Math.log10(step0)));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= n) || 10 * mag;
  if (integer) step = step < 1 ? 1 : step === 2.5 ? 2 : Math.round(step) === step ? step : Math.ceil(step);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9; t += step) out.push(+t.toFixed(10));
  return out;
}

// One format for an axis's ticks: thousands as "k" on every tick once the largest reaches 10,000
// (never "5,000" beside "10k").
function tickFormat(ticks) {
  const big = ticks.length && Math.max(...ticks.map(Math.abs)) >= 10000;
  return (v) => (big && v !== 0 ? (v / 1000).toLocaleString('en-US') + 'k' : v.toLocaleString('en-US'));
}

// A line chart: series [{name, color, dash, points: [[x, y]]}], marks [{x, label, color}].
// Above the plot, a band of rows: the legend (two series or more), then one row for each mark's
// label, so no label covers another or the data; a label that would run past the right edge is
// set to the left of its line. `xInteger` / `yInteger`: whole-number ticks on that axis.
function lineChart(target, opts) {
  const W = 760, L = 96, R = 24, B = 64, ROW = 22;
  const xs = opts.series.flatMap((s) => s.points.map((p) => p[0])).concat(opts.marks.map((m) => m.x));
  const ys = opts.series.flatMap((s) => s.points.map((p) => p[1]));
  const xmax = Math.max(1, ...xs) * 1.04;
  const xmin = opts.xmin != null ? opts.xmin : 0;
  const ymax = (opts.ymax != null ? opts.ymax : Math.max(opts.yInteger ? 1 : 1e-9, ...ys) * 1.1);
  const marks = opts.marks.filter((m) => m.x != null && m.x <= xmax);
  const legendRows = opts.series.length > 1 ? 1 : 0;
  const band = (legendRows + marks.length) * ROW;
  const T = 48 + band + (band ? 8 : 0);
  const H = T + 268 + B;
  const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.aria, class: 'plot' });
  el('title', {}, svg).textContent = opts.aria;
  const X = (x) => L + ((x - xmin) / (xmax - xmin)) * (W - L - R);
  const Y = (y) => H - B - (y / ymax) * (H - T - B);
  const t = el('text', { x: L, y: 30, class: 'plot-title' }, svg);
  t.textContent = opts.title;
  const yt = niceTicks(0, ymax, 5, opts.yInteger);
  const yf = tickFormat(yt);
  for (const v of yt) {
    el('line', { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: 'grid' }, svg);
    const tx = el('text', { x: L - 10, y: Y(v) + 6, class: 'tick', 'text-anchor': 'end' }, svg);
    tx.textContent = yf(v);
  }
  const xt = niceTicks(xmin, xmax, 8, opts.xInteger);
  const xf = tickFormat(xt);
  for (const v of xt) {
    const tx = el('text', { x: X(v), y: H - B + 26, class: 'tick', 'text-anchor': 'middle' }, svg);
    tx.textContent = xf(v);
  }
  el('line', { x1: L, x2: W - R, y1: H - B, y2: H - B, class: 'axis' }, svg);
  el('line', { x1: L, x2: L, y1: T, y2: H - B, class: 'axis' }, svg);
  const xl = el('text', { x: (L + W - R) / 2, y: H - 12, class: 'axis-label', 'text-anchor': 'middle' }, svg);
  xl.textContent = opts.xLabel;
  const yl = el('text', { x: 20, y: (T + H - B) / 2, class: 'axis-label', 'text-anchor': 'middle', transform: `rotate(-90 20 ${(T + H - B) / 2})` }, svg);
  yl.textContent = opts.yLabel;
  if (legendRows) {
    // One row, the series side by side, each its line sample and name.
    let x = L;
    const y = 48 + ROW / 2; // its text's baseline 6 below: on the marks' rows' baselines (48 + 17 + ROW * row)
    for (const s of opts.series) {
      el('line', { x1: x, x2: x + 32, y1: y, y2: y, stroke: s.color, 'stroke-width': 4, 'stroke-dasharray': s.dash || '' }, svg);
      const lt = el('text', { x: x + 40, y: y + 6, class: 'legend' }, svg);
      lt.textContent = s.name;
      x += 40 + 10.5 * s.name.length + 28;
    }
  }
  marks.forEach((m, i) => {
    const y = 48 + (legendRows + i) * ROW + 17;
    el('line', { x1: X(m.x), x2: X(m.x), y1: y - 14, y2: H - B, stroke: m.color, class: 'mark', 'stroke-dasharray': m.dash || '8 5' }, svg);
    // About 11 px a character at the labels' 18 px bold.
    const left = X(m.x) + 6 + 11 * m.label.length > W - 4;
    const lx = el('text', { x: left ? X(m.x) - 6 : X(m.x) + 6, y, class: 'mark-label', fill: m.color, 'text-anchor': left ? 'end' : 'start' }, svg);
    lx.textContent = m.label;
  });
  for (const s of opts.series) {
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => `${i ? 'L' : 'M'}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join('');
    el('path', { d, fill: 'none', stroke: s.color, 'stroke-width': s.width || 4, 'stroke-dasharray': s.dash || '', class: 'series' }, svg);
    if (s.dots) for (const p of s.points) el(s.shape === 'square' ? 'rect' : 'circle', s.shape === 'square' ? { x: X(p[0]) - 6, y: Y(p[1]) - 6, width: 12, height: 12, fill: s.color } : { cx: X(p[0]), cy: Y(p[1]), r: 6, fill: s.color }, svg);
  }
  target.replaceChildren(svg);
}

function ttftBar(target, split, aria) {
  const parts = [
    ['Queue wait', split.mean_queue_wait_ms, '#6a1b9a'],
    ['Prefill', split.mean_prefill_ms, '#0b57d0'],
    ['Interleaving', split.mean_interleave_ms, '#a04000'],
    ['Outside the engine', split.mean_overhead_ms, '#3c4043'],
  ];
  const total = parts.reduce((a, p) => a + p[1], 0) || 1;
  const W = 760, H = 70;
  const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': aria, class: 'bar' });
  el('title', {}, svg).textContent = aria;
  let x = 0;
  for (const [, v, c] of parts) {
    const w = (v / total) * W;
    el('rect', { x, y: 8, width: Math.max(0, w), height: 54, fill: c }, svg);
    x += w;
  }
  const list = document.createElement('ul');
  list.className = 'split-legend';
  for (const [name, v, c] of parts) {
    const li = document.createElement('li');
    li.innerHTML = `<span class="swatch" style="background:${c}"></span>${esc(name)}: <b>${fmt(v, 1)} ms</b> (${fmt((100 * v) / total, 0)}%)`;
    list.appendChild(li);
  }
  target.replaceChildren(svg, list);
}

// ---------- controls ----------
function knobRow(k, parent) {
  const row = document.createElement('div');
  row.className = 'knob';
  const id = 'k-' + k.key;
  if (k.choices) {
    row.innerHTML = `<label for="${id}">${esc(k.label)}</label><select id="${id}">${k.choices.map((c) => `<option value="${c}">${c}</option>`).join('')}</select>`;
  } else {
    row.innerHTML = `<label for="${id}">${esc(k.label)}</label>
      <div class="pair"><input type="range" id="${id}-range" min="${k.min}" max="${k.max}" step="${k.step}" aria-label="${esc(k.label)} (slider)">
      <input type="number" id="${id}" min="${k.key === 'budget' ? -1 : k.min}" step="${k.step}" inputmode="decimal"></div>`;
  }
  if (k.hint) row.insertAdjacentHTML('beforeend', `<p class="hint">${esc(k.hint)}</p>`);
  if (k.key === 'tp') row.insertAdjacentHTML('beforeend', '<p class="hint tp-note" data-testid="tp-note"></p>');
  // How the engines' flags differ in meaning (the core's note), filled in per engine shown.
  if (k.flags) row.insertAdjacentHTML('beforeend', `<p class="hint meaning" data-testid="meaning-${k.key}" hidden></p>`);
  parent.appendChild(row);
  const input = $(id);
  const range = $(id + '-range');
  const onChange = (v) => {
    state.values[k.key] = v;
    if (range && input !== document.activeElement) input.value = v;
    if (range && v !== '' && range !== document.activeElement) range.value = v;
    schedule();
  };
  input.addEventListener(k.choices ? 'change' : 'input', () => onChange(input.value));
  if (range) range.addEventListener('input', () => { input.value = range.value; onChange(range.value); });
}

// The boxes show what each engine runs: the user's value, else the engine's own as resolved
// (`list`: compute's per-engine results, each with `resolved`, the scenario on that engine
// with the knobs applied; without it, only the scenario's own engine is known).
function showKnobValues(list) {
  const kinds = list ? list.map((e) => e.kind) : [state.engine && state.engine !== 'both' ? state.engine : base.engine];
  const ofKind = (kind) => (list ? (list.find((e) => e.kind === kind) || {}).resolved : kind === base.engine ? base : null);
  const firstKind = kinds[0];
  // The TP sizes the model allows, and the one set or run if it is not one of them (the engine's
  // error then says why).
  {
    const sel = $('k-tp');
    const cur = given('tp') ? String(state.values.tp) : defaultOf(KNOBS.find((k) => k.key === 'tp'), ofKind(firstKind));
    const ok = tpChoices(ofKind(firstKind) || base);
    const opts = ok.includes(cur) || cur === '' ? ok : ok.concat([cur]);
    if ([...sel.options].map((o) => o.value).join() !== opts.join()) sel.innerHTML = opts.map((c) => `<option value="${esc(c)}">${esc(c)}</option>`).join('');
    const r = ofKind(firstKind) || base;
    sel.closest('.knob').querySelector('.tp-note').textContent = r && r.num_attention_heads
      ? `Offered: the sizes that divide the model's ${r.num_attention_heads} attention heads and its ${r.num_kv_heads} KV heads (or that they divide), as the engines require.` : '';
  }
  for (const k of [...KNOBS, ...LOAD]) {
    const input = $('k-' + k.key);
    const range = $('k-' + k.key + '-range');
    let v = state.values[k.key];
    if (v == null || v === '') v = defaultOf(k, ofKind(firstKind));
    if (input !== document.activeElement) input.value = v == null ? '' : v;
    const num = v == null || v === '' ? NaN : Number(v);
    if (range) {
      // The slider shows the value sent or none: its range widens to a value typed past it (a
      // fraction below 0.05, a concurrency past 256); a value it cannot show (SGLang's -1, no
      // chunking) leaves it with no position, as a blank does.
      const lo = knobMin(k, list);
      const off = !isFinite(num) || (k.key === 'budget' && num < 0);
      if (!off) {
        range.min = String(Math.min(lo, num));
        range.max = String(Math.max(k.max, lo, num));
        if (range !== document.activeElement) range.value = String(num);
      }
      // A slider has no empty position: without a value it would sit at its middle and read as one.
      range.classList.toggle('unset', off);
      input.min = String(k.key === 'budget' ? (kinds.includes('vllm') ? lo : -1) : lo);
    }
    const row = input.closest('.knob');
    if (k.flags) {
      row.querySelector('label').textContent = `${k.label} (${kinds.map((kd) => k.flags[kd]).join(' / ')})`;
      // The core's note on how the two engines' flags differ, where they do.
      const meaning = row.querySelector('.meaning');
      const ck = coreKnobs.find((c) => c.vllm === k.flags.vllm && c.sglang === k.flags.sglang);
      meaning.textContent = ck && ck.note ? `${ck.vllm} / ${ck.sglang}: ${ck.note}.` : '';
      meaning.hidden = !(ck && ck.note);
      // Side by side: each engine's own value (they differ where the engines' defaults do).
      let per = row.querySelector('.per-engine');
      if (!per) {
        per = document.createElement('p');
        per.className = 'hint per-engine';
        per.dataset.testid = 'per-engine-' + k.key;
        row.appendChild(per);
      }
      if (kinds.length > 1 && list) {
        const vals = kinds.map((kd) => defaultOf(k, ofKind(kd)));
        const differ = vals.some((x) => String(x) !== String(vals[0]));
        per.textContent = kinds.map((kd, i) => `${NAMES[kd]} runs ${k.flags[kd]} = ${vals[i] === '' || vals[i] == null ? '(none: the pool is pinned in tokens)' : vals[i]}`).join('; ') +
          (differ ? ` (they differ; the box shows ${NAMES[kinds[0]]}'s)` : '');
        per.hidden = false;
      } else {
        per.textContent = '';
        per.hidden = true;
      }
    }
  }
  // Blank prompts: what the run then gets, in this mode.
  const bp = (ofKind(firstKind) || base).num_prompts;
  $('k-prompts').closest('.knob').querySelector('label').textContent = mode() === 'rate'
    ? `Prompts per run (blank: the scenario's ${bp}, at least ${RATE_MIN_PROMPTS})`
    : mode() === 'all' ? `Prompts per run (blank: the scenario's ${bp}; all are sent at once)`
      : `Prompts per run (blank: ${EXPLAIN_PROMPTS_PER_SLOT} per slot, at most ${fmt(MAX_EXPLAIN_PROMPTS, 0)}, as each point of the sweep runs, so the run is the sweep's point at its concurrency)`;
  // Blank concurrency: the scenario's cap, else the one named.
  const dc = defaultConcurrency(base);
  $('k-c').closest('.knob').querySelector('label').textContent = `Concurrency (blank: ${dc.value}, ${dc.why})`;
  const f = datasetFields(base);
  // prefix_repetition's prompt is its shared prefix and a suffix: the box sets the suffix.
  const pre = ofKind(firstKind) || base;
  $('k-in').closest('.knob').querySelector('label').textContent = base.dataset.name === 'prefix_repetition'
    ? 'Suffix length (tokens; the prompt is prefix + suffix)'
    : base.dataset.name === 'random' && pre.dataset.prefix_len > 0 ? 'Input length (tokens; the prompt is the shared prefix + this)' : 'Input length (tokens)';
  $('k-prefix').closest('.knob').querySelector('label').textContent = base.dataset.name === 'random'
    ? 'Shared prefix (tokens; 0: none)' : base.dataset.name === 'prefix_repetition' ? 'Shared prefix (tokens; at least 1)' : 'Shared prefix (tokens)';
  for (const k of ['in', 'out', 'prefix']) {
    const off = !f[k];
    $('k-' + k).disabled = off;
    $('k-' + k + '-range').disabled = off;
  }
  $('k-c').closest('.knob').hidden = mode() !== 'c';
  $('k-rate').closest('.knob').hidden = mode() !== 'rate';
  syncRadios();
  if ($('grid') !== document.activeElement) $('grid').value = state.grid == null ? '' : state.grid;
  $('grid').placeholder = list
    ? 'blank: explain\'s grid, ' + list.map((e) => (list.length > 1 ? NAMES[e.kind] + ' ' : '') + e.sweepReq.concurrencies.join(',')).join('; ')
    : 'blank: explain\'s grid';
  // Where each engine's KV pool comes from, as it runs (a knob that resizes the pool drops a
  // pin, as the CLI does: the warning says so).
  const src = $('kvpool-source');
  if (src) {
    src.textContent = list ? list.map((e) => {
      const r = e.resolved;
      // SGLang's max_total_tokens bounds a pool derived from memory: named as the source only
      // where it binds (the fraction's pool is larger), and then the fraction does not move it.
      const how = PINNED_SOURCES.includes(r.kv_sizing_source)
        ? `pinned in ${r.kv_sizing_source === 'kv_cache_memory_bytes' ? 'bytes per GPU' : 'tokens'} by engine.${r.kv_sizing_source}`
        : r.kv_sizing_source === 'max_total_tokens'
          ? `capped by engine.max_total_tokens: the pool memory fraction ${r.memory_fraction_in_use != null ? r.memory_fraction_in_use + ' ' : ''}derives is larger, so the cap binds and moving the fraction does not move the pool (until it derives fewer tokens than the cap)`
          : `derived from memory (engine.${r.kv_sizing_source}${r.memory_fraction_in_use != null ? ', fraction ' + r.memory_fraction_in_use : ''})`;
      return `${NAMES[e.kind]}: KV pool ${fmt(r.kv_cache_tokens, 0)} tokens, ${how}` +
        (r.dropped_pins.length ? '; the scenario\'s pinned pool moved, was dropped or held (warning below)' : '') + '.';
    }).join(' ') : '';
  }
}

// The TP sizes of KNOBS' list the model's heads allow: dividing its attention heads, and its KV
// heads dividing or divided by them (sim::config::memory refuses the rest, as the engines do).
function tpChoices(r) {
  const all = KNOBS.find((k) => k.key === 'tp').choices;
  if (!r || !r.num_attention_heads) return all;
  return all.filter((t) => r.num_attention_heads % t === 0 && (r.num_kv_heads % t === 0 || t % r.num_kv_heads === 0));
}

// A slider's lowest position, where the engines set one above the handy range's: vLLM's token
// budget is at least its max_num_seqs (as it runs; rounded up to the slider's step, so the
// positions stay on whole steps); prefix_repetition's prefix at least 1 token.
function knobMin(k, list) {
  if (k.key === 'budget' && list) {
    const caps = list.filter((e) => e.kind === 'vllm').map((e) => e.resolved.max_running);
    if (caps.length) return Math.max(k.min, Math.ceil(Math.max(...caps) / k.step) * k.step);
  }
  if (k.key === 'prefix' && base && base.dataset.name === 'prefix_repetition') return 1;
  return k.min;
}

function defaultOf(k, r) {
  if (!r) return '';
  switch (k.key) {
    case 'mrun': return r.max_running;
    case 'budget': return r.chunk;
    case 'mem': return r.memory_fraction != null ? r.memory_fraction : r.memory_fraction_in_use != null ? r.memory_fraction_in_use : '';
    case 'dtype': {
      const d = r.scenario.engine && r.scenario.engine.kv_cache_dtype;
      return d && d.startsWith('fp8') ? 'fp8' : 'auto';
    }
    case 'tp': return String(r.tensor_parallel_size);
    case 'cache': return r.prefix_caching ? 'on' : 'off';
    case 'c': return defaultConcurrency(base).value; // the run's, whatever the engine (concurrencyText)
    case 'rate': return r.request_rate || 1;
    case 'in': return r.dataset.input_len != null ? r.dataset.input_len : r.dataset.suffix_len;
    case 'out': return r.dataset.output_len;
    case 'prefix': return r.dataset.prefix_len;
    case 'prompts': return '';
    case 'seed': return r.seed;
  }
  return '';
}

// ---------- the redraw ----------
let pending = null;
function schedule() {
  writeUrl();
  if (pending) return;
  pending = setTimeout(() => {
    pending = null;
    redraw();
  }, 0);
}

function showError(msg) {
  const box = $('error');
  if (!msg) {
    box.hidden = true;
    box.textContent = '';
    return;
  }
  box.hidden = false;
  box.textContent = 'error: ' + msg;
}

let lastTiming = null;
let explainTimer = null;

// Runs what changed and draws it; returns the timings (ms).
function redraw(opts) {
  opts = opts || {};
  const t0 = performance.now();
  let result;
  try {
    result = compute(opts);
  } catch (e) {
    showError(e.message);
    clearResults();
    $('status').textContent = 'Not run: the scenario has an error (below); the results are cleared.';
    return null;
  }
  showError(null);
  const tSweep = performance.now();
  draw(result);
  const t1 = performance.now();
  lastTiming = { compute_ms: tSweep - t0, total_ms: t1 - t0 };
  $('status').textContent = `Redrawn in ${Math.round(t1 - t0)} ms.`;
  clearTimeout(explainTimer);
  if (opts.sync) explainAll(result);
  else explainTimer = setTimeout(() => explainAll(result), 30);
  return lastTiming;
}

// The radios show the state: none checked in a group whose value is not one of its own (a bad
// query value, which the error names).
function syncRadios() {
  // A scenario the link names and the list lacks: no scenario chosen, so no engine of its own.
  const unknown = state.pasted == null && state.scenario != null && !shipped.some((x) => x.name === state.scenario);
  if (unknown) $('scenario').selectedIndex = -1;
  const engine = state.engine || (base && !unknown ? base.engine : null);
  document.querySelectorAll('input[name=engine]').forEach((r) => (r.checked = r.value === engine));
  document.querySelectorAll('input[name=kvpool]').forEach((r) => (r.checked = r.value === state.kvpool));
  document.querySelectorAll('input[name=mode]').forEach((r) => (r.checked = r.value === mode()));
}

// Nothing stale on screen after an error: the results of the last good state are removed.
function clearResults() {
  syncRadios();
  clearTimeout(explainTimer);
  for (const id of ['summary', 'alignment', 'chart-throughput', 'chart-ttft', 'panels', 'tables', 'commands']) $(id).replaceChildren();
  $('cap-throughput').textContent = 'Output throughput against concurrency (the sweep).';
  $('cap-ttft').textContent = 'Mean TTFT against concurrency (the sweep).';
  for (const id of ['warnings', 'caveats']) {
    $(id).replaceChildren();
    $(id).hidden = true;
  }
  $('alignment').hidden = true;
  $('kvpool-source').textContent = '';
}

// A query value the page has no state for (a link mistyped, or a scenario since renamed): refused
// with what it accepts, as `?engine=foo` is ("unknown engine"), and nothing run, so no result
// stands for another state than the one the link asked for.
const MODES = { c: 'fixed concurrency', rate: 'request rate', all: 'all at once' };
const KVPOOLS = { scenario: 'as the scenario gives it', memory: 'derived from memory' };
function stateProblem() {
  const accepted = (o) => {
    const e = Object.entries(o).map(([k, v]) => `${k} (${v})`);
    return e.slice(0, -1).join(', ') + ' or ' + e[e.length - 1];
  };
  if (state.pasted == null && state.scenario != null && !shipped.some((x) => x.name === state.scenario)) {
    return `?s=${state.scenario}: no shipped scenario is named ${JSON.stringify(state.scenario)} (renamed or mistyped?); choose one in the list, or give one of: ${shipped.map((x) => x.name).join(', ')}`;
  }
  if (state.mode != null && !Object.hasOwn(MODES, state.mode)) return `?mode=${state.mode}: unknown load mode ${JSON.stringify(state.mode)}: give ${accepted(MODES)}`;
  if (!Object.hasOwn(KVPOOLS, state.kvpool)) return `?kvpool=${state.kvpool}: unknown KV pool choice ${JSON.stringify(state.kvpool)}: give ${accepted(KVPOOLS)}`;
  return null;
}

function compute(opts) {
  const problem = stateProblem();
  if (problem) throw new ServesimError(problem);
  const req0 = scenarioRequest();
  base = cached('resolve:' + req0.origin + req0.scenario, () => sim.resolve(req0));
  showKnobValues(null);
  const userGrid = gridValues();
  const kinds = engines().map((e) => e.kind);
  if (given('budget') && Number(state.values.budget) < 0 && kinds.includes('vllm')) {
    throw new ServesimError(`engine.max_num_batched_tokens: ${String(state.values.budget).trim()} is SGLang's "no chunking" (chunked_prefill_size=-1) alone: vLLM's max_num_batched_tokens has no such value (it takes a budget of at least max_num_seqs); choose SGLang alone, or a budget both engines run`);
  }
  const list = engines().map(({ kind, req, notes, from }) => {
    const sets = knobSets(kind);
    const s = seed();
    const resolveReq = { ...req, sets, seed: s };
    const resolved = cached('resolve:' + JSON.stringify(resolveReq), () => sim.resolve(resolveReq));
    // The run: the knobs and the load. Its resolution gives its KV limit (the one explain
    // states, for the same workload) and explain's grid.
    const runSets = sets.concat(loadSets(resolved));
    const runResolveReq = { ...req, sets: runSets, seed: s };
    const runResolved = cached('resolve:' + JSON.stringify(runResolveReq), () => sim.resolve(runResolveReq));
    const grid = userGrid || runResolved.explain_grid || FALLBACK_GRID.split(',').map(Number);
    const np = grid.map((c) => sweepPrompts(c, resolved));
    // A concurrency sweep is a closed loop whatever the load chosen for the run: the scenario's
    // own rate is set aside for it (else every point would be that rate, capped).
    const sweepReq = { ...req, sets: sets.concat(closedLoopSets(resolved)), seed: s, concurrencies: grid, num_prompts: np };
    const sweepKey = 'sweep:' + JSON.stringify(sweepReq);
    const sweep = opts.nocache ? sim.sweep(sweepReq) : cached(sweepKey, () => sim.sweep(sweepReq));
    if (opts.nocache) cache.set(sweepKey, sweep);
    const runReq = { ...req, sets: runSets, seed: s, timeseries: true };
    const run = cached('run:' + JSON.stringify(runReq), () => sim.simulate(runReq));
    // explain of the same run: the same sets (load included), at its concurrency in
    // fixed-concurrency mode, at the scenario's (set) rate in rate mode. All at once, explain
    // (which takes a concurrency, and without one runs an uncapped closed loop at twice its
    // limit) gets the same run as a cap of one slot per prompt: N prompts at concurrency N are
    // all sent at once, the run `servesim simulate` makes with no cap (the same numbers); a
    // trace keeps its own arrivals.
    let exReq;
    if (mode() === 'rate' || (mode() === 'all' && runResolved.dataset.name === 'trace')) exReq = { ...req, sets: runSets, seed: s };
    else if (mode() === 'all') {
      const n = runResolved.num_prompts;
      // The cap as the scenario's own (no --concurrency): explain keeps a scenario's own cap's
      // prompts, where a concurrency asked for runs 4 × it (the explain fixes of 2026-12-06).
      exReq = { ...req, sets: runSets.map((x) => (x === 'workload.max_concurrency=null' ? `workload.max_concurrency=${n}` : x)), seed: s };
    } else exReq = { ...req, sets: runSets, seed: s, concurrency: concurrency() };
    return { kind, req, from, sets, runSets, seed: s, notes, resolved, runResolved, explainGrid: runResolved.explain_grid, gridIsExplains: !userGrid && !!runResolved.explain_grid, sweep, sweepReq, run, runReq, exReq };
  });
  showKnobValues(list);
  // Side by side: what differs between the two runs (`servesim sweep`'s alignment table).
  if (list.length > 1) {
    const areq = { scenarios: list.map((e) => ({ ...e.req, sets: e.sets, seed: e.seed })) };
    list.alignment = cached('align:' + JSON.stringify(areq), () => sim.alignment(areq));
  }
  return list;
}

function explainAll(result) {
  for (const r of result) {
    const target = $('explain-' + r.kind);
    if (!target) continue;
    try {
      // The same run as the summary's (the same sets, load included): its numbers are the summary's.
      const exReq = r.exReq;
      const ex = cached('explain:' + JSON.stringify(exReq), () => sim.explain(exReq));
      r.explain = ex;
      const kg = ex.value.knee.sweep.map((p) => p.max_concurrency);
      const sameGrid = kg.join(',') === r.sweepReq.concurrencies.join(',');
      // The table is explain's knee sweep only where it is a closed loop too (a trace's sweep
      // keeps its arrivals) over the same concurrencies (the prompts a slot are always the same).
      const closed = r.sweep.value.knee_note == null;
      const gridNote = `Its knee is found over concurrencies ${kg.join(', ')} (a closed loop, ${EXPLAIN_PROMPTS_PER_SLOT} prompts a slot)` +
        (!closed ? `; the sweep table keeps the scenario's own arrivals (an open loop), so it is not these runs and searches no knee.`
          : sameGrid ? ': the sweep table\'s runs, so its knee is the table\'s.' : `, not the sweep table's concurrencies (${r.sweepReq.concurrencies.join(', ')}): the two knees can differ.`);
      const nAll = r.runResolved.num_prompts;
      const allNote = mode() === 'all' && r.runResolved.dataset.name !== 'trace'
        ? `<p class="hint" data-testid="explain-all">All ${nAll} prompts sent at once are a closed loop of ${nAll} slots with ${nAll} prompts: explain (which needs a concurrency; without one it would explain concurrency ${r.runResolved.explain_concurrency != null ? r.runResolved.explain_concurrency : 'twice the limit'}, not this run) is given that as the scenario's cap, the same run.</p>` : '';
      target.innerHTML = `<h4>Why (servesim explain, ${esc(ex.value.load)})</h4>${allNote}<p class="hint" data-testid="explain-grid">${esc(gridNote)}</p><ol>${ex.value.explanation.map((s) => `<li>${esc(s)}</li>`).join('')}</ol>`;
    } catch (e) {
      target.textContent = 'explain: ' + e.message;
    }
  }
  document.body.dataset.explained = String(Date.now());
}

function draw(result) {
  const first = result[0];
  const names = NAMES;
  const series = (metric) => result.map((r, i) => ({
    name: `${names[r.kind]} ${r.sweep.value.points[0].engine_version}`,
    color: COLORS[r.kind],
    dash: i ? '10 6' : '',
    dots: true,
    shape: i ? 'square' : 'circle',
    points: r.sweep.value.points.map((p, j) => [r.sweepReq.concurrencies[j], p[metric]]),
  }));
  const marks = [];
  result.forEach((r) => {
    const v = r.sweep.value;
    const tag = result.length > 1 ? ` (${names[r.kind]})` : '';
    // Side by side, each engine's marks in its series' colour (the knee dashed long, the KV
    // limit dotted); one engine, the knee red and the KV limit purple.
    const two = result.length > 1;
    if (v.knee) marks.push({ x: v.knee.max_concurrency, label: `knee ${v.knee.max_concurrency}${tag}`, color: two ? COLORS[r.kind] : MARKS.knee });
    // The run's KV limit (its workload's, as the summary and explain give it).
    const lim = r.runResolved.kv_limited_concurrency;
    marks.push({ x: lim, label: `KV limit ${lim}${tag}`, color: two ? COLORS[r.kind] : MARKS.kv, dash: '3 4' });
  });
  if (mode() === 'c') marks.push({ x: concurrency(), label: `your load ${concurrency()}`, color: MARKS.you, dash: '1 0' });
  // All at once, N prompts are N in flight at the start: marked where the sweep reaches that far.
  const nAll = first.run.value.num_prompts;
  if (mode() === 'all' && first.run.value.request_rate !== 'trace' && nAll <= Math.max(...first.sweepReq.concurrencies)) {
    marks.push({ x: nAll, label: `your load: ${nAll} at once`, color: MARKS.you, dash: '1 0' });
  }
  const v0 = first.sweep.value;
  const ariaT = `Output throughput against concurrency. ${result.map((r) => `${names[r.kind]}: ` + r.sweep.value.points.map((p, j) => `${r.sweepReq.concurrencies[j]}: ${fmt(p.output_throughput, 0)} tok/s`).join(', ')).join('. ')}. Knee ${v0.knee ? v0.knee.max_concurrency : v0.knee_note ? 'not searched (an open-loop scenario)' : 'not reached'}; KV-limited concurrency ${first.runResolved.kv_limited_concurrency}.`;
  lineChart($('chart-throughput'), { title: 'Output throughput (tok/s)', xLabel: 'concurrency', yLabel: 'tok/s', series: series('output_throughput'), marks, aria: ariaT, xInteger: true });
  const ariaF = `Mean TTFT against concurrency. ${result.map((r) => `${names[r.kind]}: ` + r.sweep.value.points.map((p, j) => `${r.sweepReq.concurrencies[j]}: ${fmt(p.mean_ttft_ms, 0)} ms`).join(', ')).join('. ')}.`;
  lineChart($('chart-ttft'), { title: 'Mean TTFT (ms)', xLabel: 'concurrency', yLabel: 'ms', series: series('mean_ttft_ms'), marks, aria: ariaF, xInteger: true });
  // The charts are the sweep's: their captions say what load its points are.
  const loadNote = result.length > 1 && sweepLoad(result[0]) !== sweepLoad(result[1]) ? result.map((r) => `${names[r.kind]}: ${sweepLoad(r)}`).join(' ') : sweepLoad(first);
  const marked = marks.some((m) => m.color === MARKS.you) ? 'the knee, the KV-limited concurrency and your load marked' : 'the knee and the KV-limited concurrency marked';
  $('cap-throughput').textContent = `Output throughput against concurrency (the sweep, as in the table), ${marked}. ${loadNote}`;
  $('cap-ttft').textContent = `Mean TTFT against concurrency (the sweep). ${loadNote}`;

  // The summary sentence.
  const p = first.run.value;
  // Fixed concurrency is a closed loop, as each point of the sweep is: a scenario's own rate is
  // set aside (closedLoopSets), and the label says so; a trace keeps its arrivals. All at once:
  // no cap and no rate, as `servesim simulate` runs a scenario that gives neither.
  const load = mode() === 'c'
    ? `concurrency ${concurrency()}` + (p.request_rate === 'trace' ? ' (the trace\'s arrivals)' : typeof p.request_rate === 'number' ? ` at ${p.request_rate} req/s`
      : base.request_rate != null ? ` (a closed loop: the scenario's ${base.request_rate} req/s set aside, as in the sweep)` : '')
    : mode() === 'all' ? (p.request_rate === 'trace' ? 'the trace\'s arrivals, no cap' : 'all prompts at once (no cap, no rate)')
      : `${p.request_rate} req/s`;
  $('summary').innerHTML = result.map((r) => {
    // The KV limit of the run's own workload (the one explain states for the same run).
    const v = r.runResolved;
    const q = r.run.value;
    // The footprint in the core's words (sim::sweep::kv_limit_sentence).
    const holds = v.shared_prefix_tokens > 0
      ? `holds <b data-testid="run-kv-limit-${r.kind}">${fmt(v.kv_limited_concurrency, 0)}</b> requests at once: the shared prefixes they use take about ${fmt(v.shared_prefix_tokens, 0)} tokens, each held once for every request in flight that shares it, and each request needs <span data-testid="run-footprint-${r.kind}">${fmt(v.kv_request_footprint_tokens, 0)} tokens beyond its shared prefix (mean prompt + output less that prefix and the last token, which is never stored, in whole ${v.kv_unit}s)</span>`
      : `holds <b data-testid="run-kv-limit-${r.kind}">${fmt(v.kv_limited_concurrency, 0)}</b> requests of <span data-testid="run-footprint-${r.kind}">${fmt(v.kv_request_footprint_tokens, 0)} tokens (mean prompt + output less the last token, which is never stored, in whole ${v.kv_unit}s)</span>`;
    const at = mode() === 'all' && q.request_rate !== 'trace'
      ? `With all ${fmt(q.num_prompts, 0)} prompts sent at once (no cap, no rate)`
      : `At ${load}, ${fmt(q.num_prompts, 0)} prompts`;
    return `<b>${names[r.kind]}</b>: KV pool ${fmt(v.kv_cache_tokens, 0)} tokens ${holds}. ${at}: mean TTFT <b data-testid="run-mean-ttft-${r.kind}">${fmt(q.mean_ttft_ms, 1)} ms</b>, output <b>${fmt(q.output_throughput, 1)} tok/s</b>, <span data-testid="run-preemptions-${r.kind}">${fmt(q.num_preemptions, 0)}</span> ${r.kind === 'sglang' ? 'retractions' : 'preemptions'}.`;
  }).join('<br>');
  // Side by side: the alignment table and what else differs, as `servesim sweep` prints them.
  const al = result.alignment;
  const alDiv = $('alignment');
  if (al) {
    const head = `<tr><th scope="col">knob</th>${result.map((r) => `<th scope="col">${names[r.kind]}</th>`).join('')}<th scope="col">differs</th></tr>`;
    const rows = al.alignment.map((row) => `<tr${row.differs ? ' class="differs"' : ''}><td>${esc(row.knob)}</td>${row.values.map((x) => `<td>${esc(x)}</td>`).join('')}<td>${row.differs ? 'yes' : ''}${row.note ? ' <span class="hint">' + esc(row.note) + '</span>' : ''}</td></tr>`).join('');
    alDiv.innerHTML = `<table class="alignment" data-testid="alignment"><caption>Flag alignment (values as each side runs them)${al.knobs_moved.length ? ': ' + esc(al.knobs_moved.join(', ')) + ' differ' : ''}</caption><thead>${head}</thead><tbody>${rows}</tbody></table>` +
      (al.setup_differs && al.setup_differs.length ? `<p>Also differ (beyond the aligned knobs):</p><ul>${al.setup_differs.map((d) => `<li>${esc(d)}</li>`).join('')}</ul>` : '');
    alDiv.hidden = false;
  } else {
    alDiv.replaceChildren();
    alDiv.hidden = true;
  }
  // What the numbers above cannot say: a run that did not complete (its metrics cover only
  // the requests that finished), a sweep point past its prompt count; as the CLI warns.
  const warnings = [...new Set(result.flatMap((r) => r.resolved.dropped_pins))].concat(
    al && al.workloads_differ ? ['the scenarios\' workloads differ: the comparison is not of engines alone.'] : [],
    al && al.warning ? [al.warning.replace(/^WARNING: /, '')] : [],
  ).concat(result.flatMap((r) => [
    ...(r.run.value.stop_reason !== 'completed' ? [`${names[r.kind]} at ${load}: the run did not complete: ${r.run.value.stop_reason}`] : []),
    ...(r.sweep.value.warnings || []).map((w) => `${names[r.kind]} sweep: ${w}`),
  ]));
  const wl = $('warnings');
  wl.innerHTML = warnings.map((w) => `<li>warning: ${esc(w)}</li>`).join('');
  wl.hidden = warnings.length === 0;
  // Where the run's shape is one the published data show the model far off on (the CLI's
  // "Caveat" lines), each with the line the CLI prints under it (the lock-step caveat's other
  // end of the range and how often the measured runs fell between: the core's sentence).
  const caveats = result.flatMap((r) => (r.run.value.caveats || []).map((c, i) => `${names[r.kind]} at ${load}: ${c.message}` +
    (r.run.caveatNotes && r.run.caveatNotes[i] ? ' ' + r.run.caveatNotes[i] : '')));
  const cl = $('caveats');
  cl.innerHTML = caveats.map((c) => `<li>caveat: ${esc(c)}</li>`).join('');
  cl.hidden = caveats.length === 0;

  // One panel per engine: time series, TTFT split, explain.
  const panels = $('panels');
  panels.replaceChildren();
  panels.className = 'panels n' + result.length;
  for (const r of result) {
    const q = r.run.value;
    const ts = r.run.timeseries;
    const div = document.createElement('section');
    div.className = 'panel';
    div.setAttribute('aria-label', `${names[r.kind]} at ${load}`);
    div.innerHTML = `<h3 style="color:${COLORS[r.kind]}">${names[r.kind]} ${esc(q.engine_version)} at ${esc(load)}</h3>
      ${r.notes.length ? `<p class="hint">Translated from the scenario's engine: ${r.notes.map(esc).join('; ')}</p>` : ''}
      <div class="chart" id="ts-kv-${r.kind}"></div><div class="chart" id="ts-q-${r.kind}"></div>
      <h4>TTFT split (mean ${fmt(q.mean_ttft_ms, 1)} ms)</h4><div id="split-${r.kind}"></div>
      <div class="explain" id="explain-${r.kind}" aria-live="polite"><p class="hint">explain runs next…</p></div>`;
    panels.appendChild(div);
    const pts = (key, scale) => ts.t_s.map((t, i) => [t, ts[key][i] * (scale || 1)]);
    lineChart($('ts-kv-' + r.kind), { title: 'KV cache usage (%; each interval\'s peak)', xLabel: 'seconds', yLabel: '%', ymax: 100, series: [{ name: 'KV usage', color: COLORS[r.kind], points: pts('kv_usage', 100), width: 3 }], marks: [], aria: `KV cache usage over the run, each interval's peak plotted: peak ${fmt(100 * q.kv_cache_usage_peak, 1)}%, mean ${fmt(100 * q.kv_cache_usage_mean, 1)}%.` });
    lineChart($('ts-q-' + r.kind), { title: 'Requests running and waiting (each interval\'s peak)', xLabel: 'seconds', yLabel: 'requests', series: [{ name: 'running', color: COLORS[r.kind], points: pts('running'), width: 3 }, { name: 'waiting', color: MARKS.kv, dash: '8 5', points: pts('waiting'), width: 3 }], marks: [], yInteger: true, aria: `Requests running and waiting, each interval's peak plotted. Running: mean ${fmt(q.mean_running, 1)}, peak ${q.peak_running}; waiting: mean ${fmt(q.mean_waiting, 1)}, peak ${q.peak_waiting}.` });
    const b = q.ttft_breakdown;
    ttftBar($('split-' + r.kind), { mean_queue_wait_ms: b.mean_queue_wait_ms, mean_prefill_ms: b.mean_prefill_ms, mean_interleave_ms: b.mean_interleave_ms, mean_overhead_ms: b.mean_overhead_ms }, `TTFT split: queue wait ${fmt(b.mean_queue_wait_ms, 1)} ms, prefill ${fmt(b.mean_prefill_ms, 1)} ms, interleaving ${fmt(b.mean_interleave_ms, 1)} ms, outside the engine ${fmt(b.mean_overhead_ms, 1)} ms.`);
  }

  // The sweep tables.
  const cols = [
    ['max_concurrency', 'concurrency', 0], ['num_prompts', 'prompts', 0], ['request_throughput', 'req/s', 2], ['output_throughput', 'out tok/s', 1],
    ['mean_ttft_ms', 'mean TTFT (ms)', 1], ['p99_ttft_ms', 'p99 TTFT (ms)', 1], ['mean_tpot_ms', 'mean TPOT (ms)', 2],
    ['num_preemptions', { vllm: 'preempt', sglang: 'retract' }, 0], ['prefix_cache_hit_rate', 'hit rate (%)', 1, 100], ['kv_cache_usage_peak', 'KV peak (%)', 1, 100],
  ];
  $('tables').innerHTML = result.map((r) => {
    const v = r.sweep.value;
    const rows = v.points.map((p, j) => `<tr${v.knee && v.knee.index === j ? ' class="knee"' : ''}>${cols.map(([k, , d, scale]) => `<td data-key="${k}" data-value="${p[k]}">${fmt(p[k] == null ? null : p[k] * (scale || 1), d)}</td>`).join('')}</tr>`).join('');
    const grid = r.gridIsExplains
      ? `over explain's grid (${EXPLAIN_PROMPTS_PER_SLOT} prompts a slot), so it is the knee the explanation gives`
      : `over the concurrencies typed (${EXPLAIN_PROMPTS_PER_SLOT} prompts a slot); the explanation finds its own over ${r.explainGrid ? r.explainGrid.join(',') : 'its own grid'}`;
    const largest = v.points.reduce((a, p) => Math.max(a, p.num_prompts), 0);
    // One KV limit on the page: the run's (the summary's, the chart mark's and explain's). The
    // sweep's own is of its largest point's workload: another sample of prompts where the lengths
    // vary, so its mean request, and the limit, can differ; said where it does.
    const rl = r.runResolved;
    const kvNote = v.kv_limited_concurrency === rl.kv_limited_concurrency
      ? `${esc(rl.kv_limit_explanation)}`
      : `${esc(rl.kv_limit_explanation)} (That is the summary's run, ${fmt(r.run.value.num_prompts, 0)} prompts. This sweep's JSON gives ${fmt(v.kv_limited_concurrency, 0)}, of its largest point's ${fmt(largest, 0)} prompts: another sample, whose mean request differs.)`;
    const src = r.from != null ? ` (${esc(r.from.replace(' (built in)', ''))} translated to ${names[r.kind]}'s flags)` : '';
    return `<table class="sweep" data-engine="${r.kind}"><caption>${names[r.kind]} sweep: ${esc(v.scenario)}${src}. <span data-testid="table-load-${r.kind}">${esc(sweepLoad(r))}</span> Knee: ${v.knee ? 'concurrency ' + v.knee.max_concurrency + ' (row marked), ' + grid : v.knee_note ? 'not searched: the scenario sends its own arrivals (a trace\'s), so throughput stops where the load is met; the explanation below finds the engine\'s knee with a closed loop' : 'not reached, ' + grid}. <span data-testid="table-kv-${r.kind}">${kvNote}</span></caption>
      <thead><tr>${cols.map(([, h]) => `<th scope="col">${esc(typeof h === 'string' ? h : h[r.kind])}</th>`).join('')}</tr></thead><tbody>${rows}</tbody></table>`;
  }).join('');

  // Reproduce.
  $('commands').innerHTML = result.map((r) => {
    // A shipped scenario on its own engine runs from its path; anything else from the file the
    // page ran it under (its origin): scenario.json (pasted), scenario-KIND.json (translated).
    const file = r.from == null && state.pasted == null ? r.req.origin.replace(' (built in)', '') : r.req.origin;
    const args = (sets) => sets.map((s) => ` --set '${s}'`).join('') + (r.seed != null ? ` --seed ${r.seed}` : '');
    const cmd = `servesim sweep ${file} --concurrency ${r.sweepReq.concurrencies.join(',')} --num-prompts ${r.sweepReq.num_prompts.join(',')}${args(r.sweepReq.sets)} --json`;
    const run = `servesim simulate ${file}${args(r.runSets)} --json`;
    const ex = `servesim explain ${file}${r.exReq.concurrency != null ? ' --concurrency ' + r.exReq.concurrency : ''}${args(r.exReq.sets)} --json`;
    const scen = file === r.req.origin && (r.from != null || state.pasted != null)
      ? `<p>with <code>${esc(file)}</code>${r.from != null ? ` (${esc(r.from.replace(' (built in)', ''))} translated to ${names[r.kind]}'s flags, as <code>sweep --set engine.kind=vllm,sglang</code> translates it)` : ''}:</p><pre data-testid="scenario-file-${r.kind}">${esc(r.req.scenario)}</pre>` : '';
    return `<h4>${names[r.kind]}</h4><p>The summary's run (${esc(load)}), the TTFT split and the time series:</p><pre data-testid="cmd-simulate-${r.kind}">${esc(run)}</pre><p>The explanation${r.exReq.sets !== r.runSets ? ' (the same run: all its prompts at once, given explain as a cap of one slot per prompt)' : ''}:</p><pre data-testid="cmd-explain-${r.kind}">${esc(ex)}</pre><p>The sweep (table and charts):</p><pre data-testid="cmd-sweep-${r.kind}">${esc(cmd)}</pre>${scen}<details><summary>Its output (<code>servesim sweep --json</code>)</summary><pre class="json" data-engine="${r.kind}">${esc(r.sweep.text)}</pre></details>`;
  }).join('');
}

// What load the sweep's points are, in words (its caption and the charts'): a closed loop at each
// concurrency (the scenario's rate set aside), or a trace's arrivals under each cap; and where
// the run the summary gives is not one of its points (a rate, all at once), that it is not.
function sweepLoad(r) {
  const open = r.sweep.value.knee_note != null;
  const per = `${EXPLAIN_PROMPTS_PER_SLOT} prompts a slot`;
  let s = open
    ? `Each point caps the requests in flight at its concurrency and keeps the scenario's own arrivals (an open loop, ${per}).`
    : `Each point is a closed loop at its concurrency (a request sent as soon as one finishes, ${per}).`;
  if (!open && r.resolved.request_rate != null) s += ` The scenario's own request rate (${r.resolved.request_rate} req/s) is set aside for it (--set workload.request_rate=null).`;
  if (mode() === 'rate') s += ` Your load (${r.run.value.request_rate} req/s, no cap) is the summary's run, not a point of this sweep.`;
  else if (mode() === 'all' && r.run.value.request_rate !== 'trace') s += ` Your load (all ${r.run.value.num_prompts} prompts at once) is the summary's run, not a point of this sweep.`;
  else if (mode() === 'c' && !open) s += ' The summary\'s run is this sweep\'s point at its concurrency (the same prompts).';
  return s;
}

// ---------- start ----------
function bind() {
  const sel = $('scenario');
  sel.innerHTML = shipped.map((s) => `<option value="${esc(s.name)}">${esc(s.name)}</option>`).join('') + '<option value="__pasted">(pasted scenario)</option>';
  sel.value = state.pasted != null ? '__pasted' : state.scenario || shipped[0].name;
  sel.addEventListener('change', () => {
    if (sel.value === '__pasted') {
      $('paste-box').open = true;
      $('paste').focus();
      return;
    }
    state.scenario = sel.value;
    state.pasted = null;
    state.engine = null;
    state.mode = null;
    state.values = {};
    schedule();
  });
  $('use-paste').addEventListener('click', () => {
    state.pasted = $('paste').value;
    state.engine = null;
    state.mode = null;
    state.values = {};
    sel.value = '__pasted';
    schedule();
  });
  for (const k of KNOBS) knobRow(k, $('knobs'));
  for (const k of LOAD) knobRow(k, $('load-knobs'));
  document.querySelectorAll('input[name=engine]').forEach((r) => r.addEventListener('change', () => { state.engine = r.value; schedule(); }));
  document.querySelectorAll('input[name=kvpool]').forEach((r) => r.addEventListener('change', () => { state.kvpool = r.value; schedule(); }));
  document.querySelectorAll('input[name=mode]').forEach((r) => r.addEventListener('change', () => { state.mode = r.value; schedule(); }));
  $('grid').addEventListener('change', () => { state.grid = $('grid').value.trim() === '' ? null : $('grid').value; schedule(); });
  $('reset-knobs').addEventListener('click', () => {
    for (const k of KNOBS) delete state.values[k.key];
    state.kvpool = 'scenario';
    schedule();
  });
}

function describe() {
  const s = state.pasted == null ? shipped.find((x) => x.name === (state.scenario || shipped[0].name)) : null;
  let d = '';
  try {
    d = s ? JSON.parse(s.text).description || '' : state.pasted != null ? 'A pasted scenario.' : '';
  } catch (e) { /* shown by the redraw */ }
  $('scenario-desc').textContent = d;
  if (state.pasted != null) $('paste').value = state.pasted;
}

async function main() {
  readUrl();
  try {
    sim = await Servesim.load();
  } catch (e) {
    $('status').textContent = 'The simulator did not load: ' + e.message + '. Build the page with `bash scripts/build_web.sh` and open target/web/index.html.';
    return;
  }
  shipped = sim.scenarios();
  coreKnobs = sim.knobs();
  bind();
  describe();
  redraw({ sync: true });
  $('scenario').addEventListener('change', describe);
  $('use-paste').addEventListener('click', describe);
  const t = new URLSearchParams(location.search).get('selftest');
  if (t) selftest();
}

// ---------- the page's self-test (tests/web.rs drives it in headless Chromium) ----------
// `?selftest=1`: it moves knobs as a user would (input events), writes what
// the page shows into <pre id="selftest"> as JSON and, with `&report=URL`,
// posts it there (the test's loopback server).
function selftest() {
  const out = {};
  // The sweep table's cell at concurrency c ({value, shown}), null where c is not a point.
  const tableCell = (kind, c, key) => {
    const tr = [...document.querySelectorAll(`table.sweep[data-engine=${kind}] tbody tr`)].find((x) => x.querySelector('td[data-key=max_concurrency]').dataset.value === String(c));
    const td = tr && tr.querySelector(`td[data-key=${key}]`);
    return td ? { value: td.dataset.value, shown: td.textContent } : null;
  };
  const fire = (input, value, type) => {
    input.value = value;
    input.dispatchEvent(new Event(type || 'input', { bubbles: true }));
  };
  try {
    // 1. The default scenario's sweep, as the page shows it.
    out.sweep_json = document.querySelector('pre.json[data-engine=vllm]').textContent;
    out.sweep_request = compute({})[0].sweepReq;
    out.table = [...document.querySelectorAll('table.sweep[data-engine=vllm] tbody tr')].map((tr) =>
      Object.fromEntries([...tr.querySelectorAll('td')].map((td) => [td.dataset.key, { value: td.dataset.value, shown: td.textContent }])));
    // 1b. The layout (tests/web.rs opens the page 1,400 px wide, where the 10-column table once
    // widened the results column past the window): nothing wider than the window.
    out.layout = { inner: window.innerWidth, doc: document.documentElement.scrollWidth, results: $('results').getBoundingClientRect().right };
    // 2. The redraw time of the default scenario's sweep (simulated again, not cached, and drawn).
    const times = [];
    for (let i = 0; i < 7; i++) times.push(redraw({ nocache: true, sync: false }).total_ms);
    clearTimeout(explainTimer);
    times.sort((a, b) => a - b);
    out.redraw_ms = { median: times[3], max: times[6], all: times };
    // 3. Move the concurrency knob past 42, as a user drags the slider.
    const ttft = {};
    for (const c of [32, 42, 64]) {
      fire($('k-c-range'), String(c));
      redraw({ sync: true });
      ttft[c] = { shown: document.querySelector('[data-testid=run-mean-ttft-vllm]').textContent, report: compute({})[0].run.value.mean_ttft_ms, table: tableCell('vllm', c, 'mean_ttft_ms') };
    }
    out.run_ttft = ttft;
    out.url = location.search;
    out.explain = [...document.querySelectorAll('#explain-vllm li')].map((li) => li.textContent);
    out.summary = $('summary').textContent;
    out.warnings_default = $('warnings').hidden ? [] : [...$('warnings').querySelectorAll('li')].map((li) => li.textContent);
    out.caveats_at_64 = $('caveats').hidden ? [] : [...$('caveats').querySelectorAll('li')].map((li) => li.textContent);
    // 3c. A scenario with its own request rate: fixed-concurrency mode keeps the rate (as
    // `sweep --concurrency` does) and says so; rate mode's explanation is of the rate run.
    // The memory slider of a pool pinned in tokens with no fraction shows no value (a slider
    // has no blank).
    const rated = shipped.find((x) => x.name.startsWith('long-prefill-itl-llama3.1-8b-h100-vllm'));
    out.mem_default = [$('k-mem-range').classList.contains('unset'), $('k-mem').value];
    fire($('scenario'), rated.name, 'change');
    redraw({ sync: true });
    // Its own load by default: rate mode at its rate, the run `servesim simulate` of it makes;
    // the KV limit and knee the same in the summary, the table and the explanation.
    {
      const r0 = compute({})[0];
      const ex = sim.explain(r0.exReq).value;
      out.rated_default = {
        mode: document.querySelector('input[name=mode]:checked').value,
        run_sets: r0.runSets, mean_ttft_ms: r0.run.value.mean_ttft_ms,
        prompts_label: $('k-prompts').closest('.knob').querySelector('label').textContent,
        kv_limit_shown: document.querySelector('[data-testid=run-kv-limit-vllm]').textContent, kv_limit_explain: ex.kv_limited_concurrency,
        sweep_grid: r0.sweepReq.concurrencies, explain_grid: ex.knee.sweep.map((p) => p.max_concurrency),
      };
    }
    // Its sweep is a closed loop (the scenario's rate set aside), whatever the run's load: explain's
    // knee sweep, run for run; its command is printed; a rate typed leaves it as it is.
    const ratedSweep = () => {
      const r0 = compute({})[0];
      const ex = sim.explain(r0.exReq).value;
      return { sets: r0.sweepReq.sets, json: r0.sweep.text, cmd: document.querySelector('[data-testid=cmd-sweep-vllm]').textContent,
        knee: r0.sweep.value.knee ? r0.sweep.value.knee.max_concurrency : null, explain_knee: ex.knee.max_concurrency,
        tput: r0.sweep.value.points.map((q) => q.output_throughput), explain_tput: ex.knee.sweep.map((q) => q.output_throughput),
        grid: r0.sweepReq.concurrencies, caption: document.querySelector('[data-testid=table-load-vllm]').textContent,
        chart_caption: $('cap-throughput').textContent, grid_note: document.querySelector('#explain-vllm [data-testid=explain-grid]').textContent,
        run_tput: r0.run.value.output_throughput };
    };
    out.rated_sweep = { own: ratedSweep() };
    fire($('k-rate'), '5');
    redraw({ sync: true });
    out.rated_sweep.rate5 = ratedSweep();
    fire($('k-rate'), '');
    document.querySelector('input[name=mode][value=c]').click();
    fire($('k-c'), '4');
    redraw({ sync: true });
    out.rated_c_summary = $('summary').textContent;
    // The run at a concurrency of the sweep's grid is the sweep's point there (item 2 of the audit).
    // (The grid is explain's for the run, whose prompts follow the concurrency: the first of the
    // grid's that is still a point once the run is set to it.)
    {
      let c = null;
      for (const x of compute({})[0].sweepReq.concurrencies.slice(1)) {
        fire($('k-c'), String(x));
        redraw({ sync: true });
        c = x;
        if (tableCell('vllm', x, 'mean_ttft_ms')) break;
      }
      const r0 = compute({})[0];
      out.rated_c_point = { c, run_sets: r0.runSets, run_ttft: r0.run.value.mean_ttft_ms, table: tableCell('vllm', c, 'mean_ttft_ms'),
        shown: document.querySelector('[data-testid=run-mean-ttft-vllm]').textContent, caption: document.querySelector('[data-testid=table-load-vllm]').textContent };
      fire($('k-c'), '4');
      redraw({ sync: true });
    }
    out.rated_mem = [$('k-mem-range').classList.contains('unset'), $('k-mem').value];
    document.querySelector('input[name=mode][value=rate]').click();
    redraw({ sync: true });
    out.rated_rate_explain = document.querySelector('#explain-vllm h4').textContent;
    document.querySelector('input[name=mode][value=c]').click();
    fire($('scenario'), shipped[0].name, 'change');
    redraw({ sync: true });
    const rows = (sel) => [...document.querySelectorAll(sel)].map((li) => li.textContent);
    const shownResults = () => ({
      summary: $('summary').textContent, tables: $('tables').textContent, panels: $('panels').textContent,
      commands: $('commands').textContent, charts: $('chart-throughput').textContent + $('chart-ttft').textContent,
      warnings: $('warnings').hidden ? [] : rows('#warnings li'), error: $('error').hidden ? null : $('error').textContent,
    });
    // 3d. The default's knee and KV limit: the table's, the summary's and the explanation's.
    {
      const r0 = compute({})[0];
      const ex = sim.explain(r0.exReq).value;
      out.default_knees = { table: r0.sweep.value.knee ? r0.sweep.value.knee.max_concurrency : null, explain: ex.knee.max_concurrency,
        kv_limit_shown: document.querySelector('[data-testid=run-kv-limit-vllm]').textContent, kv_limit_explain: ex.kv_limited_concurrency };
    }
    // 3e. The engine switched: the boxes show what the engine runs (SGLang's own budget), and
    // side by side each engine's, with the alignment and the CLI's warning.
    document.querySelector('input[name=engine][value=sglang]').click();
    redraw({ sync: true });
    out.sglang_knobs = { budget: $('k-budget').value, mrun: $('k-mrun').value, mem: $('k-mem').value, resolved_chunk: compute({})[0].resolved.chunk,
      header: [...document.querySelectorAll('table.sweep[data-engine=sglang] th')].map((th) => th.textContent) };
    document.querySelector('input[name=engine][value=both]').click();
    redraw({ sync: true });
    out.both = { budget_per_engine: document.querySelector('[data-testid=per-engine-budget]').textContent,
      alignment: compute({}).alignment, alignment_shown: !!document.querySelector('table[data-testid=alignment]'), warnings: rows('#warnings li') };
    fire($('scenario'), shipped.find((x) => x.name.startsWith('shared-prefix-lpm')).name, 'change');
    document.querySelector('input[name=engine][value=vllm]').click();
    redraw({ sync: true });
    out.lpm_vllm_mrun = { shown: $('k-mrun').value, resolved: compute({})[0].resolved.max_running, summary: $('summary').textContent };
    fire($('scenario'), shipped.find((x) => x.name.startsWith('shared-prefix-llama3.1')).name, 'change');
    redraw({ sync: true });
    out.shared_prefix_summary = $('summary').textContent;
    // 3f. kv-starved vLLM as it comes: the summary's run is the one explained, and its command.
    fire($('scenario'), shipped.find((x) => x.name.startsWith('kv-starved-qwen2.5-7b-a100-vllm')).name, 'change');
    redraw({ sync: true });
    {
      const r0 = compute({})[0];
      out.kv_starved = { run_sets: r0.runSets, concurrency: r0.exReq.concurrency, summary: $('summary').textContent,
        ttft_shown: document.querySelector('[data-testid=run-mean-ttft-vllm]').textContent,
        preemptions_shown: document.querySelector('[data-testid=run-preemptions-vllm]').textContent,
        explain: sim.explain(r0.exReq).text, cmd_simulate: document.querySelector('[data-testid=cmd-simulate-vllm]').textContent,
        cmd_explain: document.querySelector('[data-testid=cmd-explain-vllm]').textContent };
    }
    // 3g. A knob that resizes the pool drops the default's pinned pool: the CLI's warning, and the pool's source.
    fire($('scenario'), shipped[0].name, 'change');
    fire($('k-dtype'), 'fp8', 'change');
    redraw({ sync: true });
    out.fp8 = { warnings: rows('#warnings li'), source: $('kvpool-source').textContent, run_sets: compute({})[0].runSets };
    document.querySelector('#reset-knobs').click();
    // 3h. An error clears the results; what the CLI refuses the page refuses, with its error.
    fire($('k-mem'), '0.5');
    redraw({ sync: true });
    out.after_error = shownResults();
    document.querySelector('#reset-knobs').click();
    const refused = {};
    for (const c of ['0', '2.5']) {
      fire($('k-c'), c);
      redraw({ sync: true });
      refused[c] = shownResults();
    }
    out.refused = refused;
    fire($('k-c'), '');
    document.querySelector('input[name=mode][value=rate]').click();
    redraw({ sync: true });
    out.rate_prompts = { label: $('k-prompts').closest('.knob').querySelector('label').textContent, run_sets: compute({})[0].runSets };
    document.querySelector('input[name=mode][value=c]').click();
    redraw({ sync: true });
    // 4. Every function, byte for byte with the binary (tests/web.rs runs the same commands).
    const d = { scenario: shipped[0].text, origin: shipped[0].origin };
    out.simulate_json = sim.simulate({ ...d, sets: ['workload.max_concurrency=64', 'workload.num_prompts=256'] }).text;
    out.explain_json = sim.explain({ ...d, concurrency: 64 }).text;
    out.side_by_side_json = sim.sweep({ ...d, sets: ['engine.kind=vllm,sglang'], concurrencies: [1, 16, 64], num_prompts: [20, 64, 256] }).text;
    // 4b. A scenario on which the modelled engine stops (SGLang 0.4.10's decode out of
    // memory): the page warns, as the CLI does, instead of showing the partial numbers bare.
    $('paste').value = JSON.stringify({ version: 1, model: 'qwen2.5-7b-instruct', hardware: 'a100-80gb',
      engine: { kind: 'sglang', version: '0.4.10', max_running_requests: 8, chunked_prefill_size: 4096, max_total_tokens: 640, page_size: 32, disable_radix_cache: true },
      workload: { dataset_name: 'random', random_input_len: 32, random_output_len: 40, random_range_ratio: 0.0, num_prompts: 16, ignore_eos: true, initial_test_request: false, max_concurrency: 8 } }, null, 2);
    $('use-paste').click();
    redraw({ sync: true });
    out.warnings_engine_error = $('warnings').hidden ? [] : [...$('warnings').querySelectorAll('li')].map((li) => li.textContent);
    // 5. An invalid scenario: the error names the field.
    const bad = JSON.parse(shipped[0].text);
    bad.engine.max_num_seq = 64;
    $('paste').value = JSON.stringify(bad, null, 2);
    $('use-paste').click();
    redraw({ sync: true });
    out.error = $('error').hidden ? null : $('error').textContent;
    // 6. The audit of the page against the CLI (its findings F2-F9).
    const cmds = (kind) => Object.fromEntries(['simulate', 'explain', 'sweep'].map((c) => [c, document.querySelector(`[data-testid=cmd-${c}-${kind}]`).textContent]));
    // F2. A scenario with no cap and no rate sends everything at once, as `servesim simulate` does.
    {
      const uncapped = JSON.parse(shipped[0].text);
      delete uncapped.workload.max_concurrency;
      delete uncapped.workload.request_rate;
      uncapped.workload.num_prompts = 100;
      $('paste').value = JSON.stringify(uncapped, null, 2);
      $('use-paste').click();
      redraw({ sync: true });
      const r0 = compute({})[0];
      out.all_at_once = { scenario: $('paste').value, mode: document.querySelector('input[name=mode]:checked').value,
        c_hidden: $('k-c').closest('.knob').hidden, summary: $('summary').textContent, run_sets: r0.runSets,
        mean_ttft_ms: r0.run.value.mean_ttft_ms, run_json: r0.run.text, explain_json: sim.explain(r0.exReq).text,
        explain_all_note: (document.querySelector('[data-testid=explain-all]') || {}).textContent || null, cmds: cmds('vllm') };
      // Fixed concurrency chosen on it: the box's blank is named (explain's), not a silent 1.
      document.querySelector('input[name=mode][value=c]').click();
      redraw({ sync: true });
      out.all_at_once.c_label = $('k-c').closest('.knob').querySelector('label').textContent;
      out.all_at_once.c_run_sets = compute({})[0].runSets;
      document.querySelector('input[name=mode][value=all]').click();
    }
    // F8. One engine translated: its sweep's "scenario" is the file its command runs.
    fire($('scenario'), shipped[0].name, 'change');
    document.querySelector('input[name=engine][value=sglang]').click();
    redraw({ sync: true });
    {
      const r0 = compute({})[0];
      out.translated = { origin: r0.req.origin, sweep_json: r0.sweep.text, cmds: cmds('sglang'),
        file: document.querySelector('[data-testid=scenario-file-sglang]').textContent };
    }
    // F4. SGLang's per-step token cap: the core's note on what it counts.
    out.sglang_budget_meaning = $('k-budget').closest('.knob').textContent;
    document.querySelector('input[name=engine][value=vllm]').click();
    // F5. The per-request footprint in the core's words.
    redraw({ sync: true });
    out.footprint = document.querySelector('[data-testid=run-footprint-vllm]').textContent;
    // F6. A seed past 2^53 is used and printed exactly; -1 is refused naming the seed.
    fire($('k-seed'), '18446744073709551557');
    redraw({ sync: true });
    out.big_seed = { cmds: cmds('vllm'), resolved: compute({})[0].resolved.seed, error: $('error').hidden ? null : $('error').textContent };
    fire($('k-seed'), '-1');
    redraw({ sync: true });
    out.negative_seed_error = $('error').hidden ? null : $('error').textContent;
    fire($('k-seed'), '');
    // F7. A grid past the concurrency limit: the CLI's error, naming --concurrency.
    fire($('grid'), '1,2000000', 'change');
    redraw({ sync: true });
    out.grid_error = $('error').hidden ? null : $('error').textContent;
    fire($('grid'), '', 'change');
    // F9. Rate mode: one KV limit in the chart mark, the summary and the table's caption.
    fire($('scenario'), rated.name, 'change');
    redraw({ sync: true });
    {
      const r0 = compute({})[0];
      out.rate_kv = { run: r0.runResolved.kv_limited_concurrency, sweep: r0.sweep.value.kv_limited_concurrency,
        marks: [...document.querySelectorAll('#chart-throughput .mark-label')].map((t) => t.textContent),
        caption: document.querySelector('[data-testid=table-kv-vllm]').textContent };
    }
    // 7. The charts' marks and ticks (audit item 4): labels inside the chart, none over another
    // or over the plot; each engine's marks in its colour side by side; one tick format an
    // axis; whole-number ticks for request counts and concurrencies.
    {
      const layout = (id) => {
        const svg = document.querySelector(`#${id} svg`);
        const vb = svg.viewBox.baseVal;
        const plotTop = Math.min(...[...svg.querySelectorAll('line.axis')].map((l) => Math.min(l.y1.baseVal.value, l.y2.baseVal.value)));
        const labels = [...svg.querySelectorAll('.mark-label, .legend')].map((t) => {
          const b = t.getBBox();
          return { text: t.textContent, fill: t.getAttribute('fill'), x0: b.x, x1: b.x + b.width, y0: b.y, y1: b.y + b.height };
        });
        const ticks = [...svg.querySelectorAll('text.tick')];
        return { width: vb.width, plotTop, labels, yticks: ticks.filter((t) => t.getAttribute('text-anchor') === 'end').map((t) => t.textContent),
          xticks: ticks.filter((t) => t.getAttribute('text-anchor') === 'middle').map((t) => t.textContent) };
      };
      fire($('scenario'), shipped[0].name, 'change');
      document.querySelector('input[name=mode][value=c]').click();
      fire($('k-c'), '1');
      redraw({ sync: true });
      out.charts = { c1_running: layout('ts-q-vllm'), c1_throughput: layout('chart-throughput') };
      fire($('k-c'), '300');
      redraw({ sync: true });
      out.charts.c300 = [layout('chart-throughput'), layout('chart-ttft')];
      document.querySelector('input[name=engine][value=both]').click();
      redraw({ sync: true });
      out.charts.both = [layout('chart-throughput'), layout('chart-ttft')];
      out.charts.colors = COLORS;
      document.querySelector('input[name=engine][value=vllm]').click();
      fire($('k-c'), '');
      redraw({ sync: true });
    }
    // 8. SGLang's max_total_tokens caps the pool a fraction derives: said where it binds.
    fire($('scenario'), shipped.find((x) => x.name.startsWith('kv-starved-qwen2.5-7b-a100-sglang')).name, 'change');
    fire($('k-mem'), '0.5');
    redraw({ sync: true });
    out.capped_pool = { source: $('kvpool-source').textContent, pool: compute({})[0].resolved.kv_cache_tokens, error: $('error').hidden ? null : $('error').textContent };
    fire($('k-mem'), '');
    // 9. A query value with no state (?mode=foo, ?kvpool=foo, ?s=nonexistent, as readUrl reads
    // them): the error names the parameter and what it accepts; nothing is run or shown.
    out.bad_query = {};
    for (const [key, val] of [['mode', 'foo'], ['kvpool', 'foo'], ['scenario', 'nonexistent']]) {
      const saved = state[key];
      state[key] = val;
      redraw({ sync: true });
      out.bad_query[key] = { ...shownResults(), checked: [...document.querySelectorAll('input[type=radio]:checked')].map((x) => x.name + '=' + x.value), select: $('scenario').value };
      state[key] = saved;
    }
    fire($('scenario'), shipped[0].name, 'change');
    redraw({ sync: true });
    // 10. Knob ranges: only TP sizes the model's heads allow; vLLM's budget slider from its
    // max_num_seqs; the prefix from 1 where the dataset needs one; -1 side by side refused in
    // words; the prefix cache switch, inverted on SGLang; the labels (audit items 7 and 8).
    {
      const knobState = () => ({ tp: [...$('k-tp').options].map((o) => o.value), tp_note: $('tp-note') ? $('tp-note').textContent : document.querySelector('[data-testid=tp-note]').textContent,
        budget_min: $('k-budget-range').min, budget_label: $('k-budget').closest('.knob').querySelector('label').textContent,
        prefix_min: $('k-prefix-range').min, in_label: $('k-in').closest('.knob').querySelector('label').textContent,
        prefix_label: $('k-prefix').closest('.knob').querySelector('label').textContent, error: $('error').hidden ? null : $('error').textContent });
      out.ranges = {};
      fire($('scenario'), shipped[0].name, 'change');
      redraw({ sync: true });
      out.ranges.qwen = knobState();
      fire($('scenario'), rated.name, 'change');
      redraw({ sync: true });
      out.ranges.llama_rated = knobState();
      fire($('k-prefix'), '256');
      redraw({ sync: true });
      out.ranges.random_prefix = knobState();
      fire($('scenario'), shipped.find((x) => x.name.startsWith('shared-prefix-llama3.1')).name, 'change');
      redraw({ sync: true });
      out.ranges.shared = knobState();
      const hit = () => compute({})[0].run.value.prefix_cache_hit_rate;
      out.cache = { on: hit(), shown: $('k-cache').value };
      fire($('k-cache'), 'off', 'change');
      redraw({ sync: true });
      out.cache.off = hit();
      out.cache.vllm_sets = compute({})[0].sets;
      document.querySelector('input[name=engine][value=sglang]').click();
      redraw({ sync: true });
      out.cache.sglang_sets = compute({})[0].sets;
      out.cache.sglang_off = hit();
      document.querySelector('input[name=engine][value=both]').click();
      fire($('k-cache'), '', 'change');
      fire($('k-budget'), '-1');
      redraw({ sync: true });
      out.ranges.both_minus1 = knobState();
      fire($('k-budget'), '');
      fire($('scenario'), shipped[0].name, 'change');
      redraw({ sync: true });
    }
    out.loaded_via = Servesim.loadedVia;
  } catch (e) {
    out.exception = String(e && e.stack ? e.stack : e);
  }
  const pre = $('selftest');
  pre.textContent = JSON.stringify(out);
  pre.dataset.done = '1';
  document.title = 'selftest done';
  // The test's own loopback server, when it gave one, receives the result too.
  const report = new URLSearchParams(location.search).get('report');
  if (report) fetch(report, { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body: pre.textContent });
}

main();
