/* Foundry experiment-tracking dashboard.
 * Plain ES2020, no build step. Charts use Chart.js 3.9.1 (window.Chart, /static/chart.min.js).
 * All data-derived text goes through textContent (see h()); nothing from the API is parsed as HTML.
 *
 * Sections: 1 utilities · 2 state & URL · 3 API · 4 banners · 5 runs table · 6 tabs & focus ·
 *           7 scalar charts · 8 config comparison · 9 histograms · 10 text & images ·
 *           11 run details · 12 live polling · 13 init
 */
'use strict';
(() => {

// ===== 1. Utilities ==========================================================================
const $ = (sel, root = document) => root.querySelector(sel);
const nowSec = () => Date.now() / 1000;
const natural = (a, b) => String(a).localeCompare(String(b), undefined, { numeric: true });
const pad = (n) => String(n).padStart(2, '0');

/** Create an element. Strings/numbers among children become text nodes (never HTML). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (typeof v !== 'string' && k in el) el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const emptyMsg = (text) => h('div', { class: 'empty' }, text);

/** API values may be numbers or the strings "NaN" / "Infinity" / "-Infinity". */
function toNum(v) {
  if (typeof v === 'number') return v;
  if (v === 'NaN' || v === 'nan') return NaN;
  if (v === 'Infinity' || v === 'inf') return Infinity;
  if (v === '-Infinity' || v === '-inf') return -Infinity;
  if (typeof v === 'string' && v.trim() !== '' && !Number.isNaN(+v)) return +v;
  return NaN;
}
const isNumeric = (v) => typeof v === 'number' || v === 'NaN' || v === 'Infinity' || v === '-Infinity';

function fmtNum(v) {
  if (typeof v !== 'number') return v == null ? '—' : String(v);
  if (Number.isNaN(v)) return 'NaN';
  if (!Number.isFinite(v)) return v > 0 ? 'Infinity' : '-Infinity';
  if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3).replace(/\.?0+e/, 'e');
  return String(Number(v.toPrecision(5)));
}
function fmtCompact(v) {
  const a = Math.abs(v);
  for (const [d, s] of [[1e9, 'G'], [1e6, 'M'], [1e3, 'k']]) if (a >= d) return +(v / d).toPrecision(3) + s;
  if (a !== 0 && a < 1e-3) return v.toExponential(1).replace(/\.0e/, 'e');
  return String(+v.toPrecision(4));
}
function fmtDuration(sec) {
  if (sec == null || !Number.isFinite(sec)) return '—';
  const sign = sec < 0 ? '-' : '';
  let s = Math.abs(sec);
  if (s < 10 && s % 1) return sign + s.toFixed(1) + 's';
  s = Math.round(s);
  if (s < 60) return `${sign}${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${sign}${m}m${pad(s % 60)}s`;
  const hr = Math.floor(m / 60);
  if (hr < 24) return `${sign}${hr}h${pad(m % 60)}m`;
  return `${sign}${Math.floor(hr / 24)}d${hr % 24}h`;
}
function fmtDate(ts) {
  if (typeof ts !== 'number' || !Number.isFinite(ts)) return '—';
  const d = new Date(ts * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}
function fmtClock(ts) {
  const d = new Date(ts * 1000);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
function fmtBytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
/** Flatten nested objects to {"a.b.c": value}; arrays are kept as leaf values. */
function flatten(obj, prefix = '', out = {}) {
  if (obj && typeof obj === 'object' && !Array.isArray(obj)) {
    const keys = Object.keys(obj);
    if (!keys.length && prefix) out[prefix] = {};
    for (const k of keys) flatten(obj[k], prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) out[prefix] = obj;
  return out;
}
const fmtValue = (v) => (typeof v === 'string' ? v : typeof v === 'number' ? String(v) : JSON.stringify(v));
/** Only http(s) and same-origin relative URLs are put into src/href. */
function safeUrl(u) {
  if (typeof u !== 'string') return null;
  try {
    const url = new URL(u, location.href);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
  } catch { return null; }
}

// Colours: matplotlib/TensorBoard "tab10", then golden-angle hues.
const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd',
  '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
function hslHex(hue, s, l) {
  const f = (n) => {
    const k = (n + hue / 30) % 12;
    const c = l - s * Math.min(l, 1 - l) * Math.max(-1, Math.min(k - 3, 9 - k, 1));
    return Math.round(c * 255).toString(16).padStart(2, '0');
  };
  return `#${f(0)}${f(8)}${f(4)}`;
}
const paletteColor = (i) => (i < PALETTE.length ? PALETTE[i] : hslHex((i * 137.508) % 360, 0.6, 0.45));
const hexRgb = (hex) => { const n = parseInt(hex.slice(1), 16); return [(n >> 16) & 255, (n >> 8) & 255, n & 255]; };
const rgba = (hex, a) => `rgba(${hexRgb(hex).join(',')},${a})`;
function mix(hexA, hexB, t) {
  const a = hexRgb(hexA), b = hexRgb(hexB);
  return '#' + a.map((x, i) => Math.round(x + (b[i] - x) * t).toString(16).padStart(2, '0')).join('');
}

// ===== 2. State & URL ========================================================================
const TABS = ['charts', 'histograms', 'text', 'images', 'config', 'details'];
const PER_RUN_TABS = new Set(['histograms', 'text', 'images', 'details']);
const XAXES = { step: 'step', relative: 'relative', rel: 'relative', wall: 'wall', wall_time: 'wall', time: 'wall' };
const MAX_CHARTS = 60;

const state = {
  runs: [],                 // newest first
  runById: new Map(),
  extraRuns: new Map(),     // runs from the URL fetched by id but absent from /api/runs
  selected: [],             // ordered run ids
  colorIdx: new Map(),      // run id -> palette index (kept across deselection)
  hiddenRuns: new Set(),    // toggled off in chart legends
  runFilter: { text: '', project: '', status: '' },
  sort: { col: 'created', dir: -1 },
  tab: 'charts',
  focus: null,              // run shown in per-run tabs
  keyFilter: '',
  smoothing: 0,
  xaxis: 'step',
  logY: false,
  onlyDiff: false,
  configFilter: '',
  tabFilter: { histograms: '', text: '', images: '' },
  histMode: 'offset',
  live: true,
  runsCollapsed: false,
  zoom: new Map(),          // chart key -> {xaxis, min, max}
  expanded: new Set(),
  collapsedGroups: new Set(),
  details: new Map(),       // run id -> /api/runs/<id>
  series: new Map(),        // "kind|id|key" -> {points, error}
  showAll: new Set(),       // "text|key" / "images|key" expanded lists
  pendingUrlRuns: null,     // deep-linked ids waiting for the first successful /api/runs
};

function readUrl() {
  const q = new URLSearchParams(location.search);
  const runs = q.has('runs') ? q.get('runs').split(',').map((s) => s.trim()).filter(Boolean) : null;
  if (q.has('key')) state.keyFilter = q.get('key');
  const sm = parseFloat(q.get('smoothing'));
  if (Number.isFinite(sm)) state.smoothing = Math.min(0.99, Math.max(0, sm));
  if (XAXES[q.get('xaxis')]) state.xaxis = XAXES[q.get('xaxis')];
  state.logY = ['1', 'true', 'yes'].includes(q.get('log'));
  if (TABS.includes(q.get('tab'))) state.tab = q.get('tab');
  if (q.get('focus')) state.focus = q.get('focus');
  return runs;
}

const URL_KEYS = ['runs', 'key', 'smoothing', 'xaxis', 'log', 'tab', 'focus'];
let urlTimer = null;
function writeUrl() {
  clearTimeout(urlTimer);
  urlTimer = setTimeout(() => {
    const q = new URLSearchParams();
    for (const [k, v] of new URLSearchParams(location.search)) if (!URL_KEYS.includes(k)) q.append(k, v); // e.g. token
    if (state.pendingUrlRuns) q.set('runs', state.pendingUrlRuns.join(','));
    else if (state.selected.length || state.runs.length) q.set('runs', state.selected.join(','));
    if (state.keyFilter) q.set('key', state.keyFilter);
    if (state.smoothing > 0) q.set('smoothing', String(state.smoothing));
    if (state.xaxis !== 'step') q.set('xaxis', state.xaxis);
    if (state.logY) q.set('log', '1');
    if (state.tab !== 'charts') q.set('tab', state.tab);
    if (PER_RUN_TABS.has(state.tab) && state.focus && state.focus !== state.selected[0]) q.set('focus', state.focus);
    const s = q.toString().replace(/%2C/gi, ',').replace(/%2F/gi, '/');
    history.replaceState(null, '', s ? `?${s}` : location.pathname);
  }, 150);
}

const getRun = (id) => state.runById.get(id);
const selectedRuns = () => state.selected.map(getRun).filter(Boolean);
const runColor = (id) => paletteColor(state.colorIdx.get(id) ?? 0);
function runLabel(id) {
  const r = getRun(id);
  if (!r) return id;
  const dup = selectedRuns().some((o) => o.id !== id && o.name === r.name);
  return dup || !r.name ? `${r.name || ''} (${id.slice(0, 8)})`.trim() : r.name;
}
/** A run keeps its previous colour if free; otherwise the lowest free slot (first run -> #1f77b4). */
function assignColor(id) {
  const used = new Set(state.selected.filter((x) => x !== id).map((x) => state.colorIdx.get(x)));
  const prev = state.colorIdx.get(id);
  if (prev != null && !used.has(prev)) return;
  let i = 0;
  while (used.has(i)) i++;
  state.colorIdx.set(id, i);
}
function setSelection(ids) {
  state.selected = [];
  for (const id of ids) if (!state.selected.includes(id)) { state.selected.push(id); assignColor(id); }
  onSelectionChanged();
}
function toggleRun(id, on = !state.selected.includes(id)) {
  if (on && !state.selected.includes(id)) { state.selected.push(id); assignColor(id); }
  if (!on) state.selected = state.selected.filter((x) => x !== id);
  onSelectionChanged();
}
function onSelectionChanged() {
  if (!state.selected.includes(state.focus)) state.focus = state.selected[0] || null;
  renderRunsTable();
  renderActiveTab();
  writeUrl();
}

// ===== 3. API ================================================================================
class ApiError extends Error {
  constructor(message, status = 0) { super(message); this.status = status; }
}
async function api(path) {
  let resp;
  try { resp = await fetch(path, { cache: 'no-store' }); } catch { throw new ApiError('cannot reach the server'); }
  let body = null;
  try { body = await resp.json(); } catch { /* not JSON */ }
  if (!resp.ok) throw new ApiError((body && typeof body.error === 'string' && body.error) || `HTTP ${resp.status} ${resp.statusText}`, resp.status);
  if (!body || typeof body !== 'object') throw new ApiError(`invalid JSON from ${path}`);
  return body;
}

// At most 6 requests in flight; identical requests are shared.
const queue = [];
let active = 0;
const inflight = new Map();
function limited(fn) {
  return new Promise((resolve, reject) => { queue.push(() => fn().then(resolve, reject)); pump(); });
}
function pump() {
  while (active < 6 && queue.length) {
    active++;
    queue.shift()().finally(() => { active--; pump(); });
  }
}
const runPath = (id) => `/api/runs/${encodeURIComponent(id)}`;

/** kind: scalars | histograms | texts | images. Resolves to {points, error}; never rejects. */
function getSeries(kind, id, key, force = false) {
  const ck = `${kind}|${id}|${key}`;
  const cached = state.series.get(ck);
  if (cached && !force) return Promise.resolve(cached);
  if (inflight.has(ck)) return inflight.get(ck);
  const p = limited(() => api(`${runPath(id)}/${kind}?key=${encodeURIComponent(key)}`))
    .then((body) => ({ points: Array.isArray(body.points) ? body.points : [], error: null }),
      (err) => {
        showBanner(`Loading ${kind} "${key}" of ${runLabel(id)} failed: ${err.message}`, ck);
        return { points: cached ? cached.points : [], error: err.message };
      })
    .then((entry) => { if (!entry.error) clearBanner(ck); state.series.set(ck, entry); inflight.delete(ck); return entry; });
  inflight.set(ck, p);
  return p;
}
/** GET /api/runs/<id>; cached. Resolves to the detail or null. */
function getDetail(id, force = false) {
  if (state.details.has(id) && !force) return Promise.resolve(state.details.get(id));
  const ck = `detail|${id}`;
  if (inflight.has(ck)) return inflight.get(ck);
  const p = limited(() => api(runPath(id))).then(
    (d) => { state.details.set(id, d); clearBanner(ck); return d; },
    (err) => { showBanner(`Loading run ${runLabel(id)} failed: ${err.message}`, ck); return state.details.get(id) || null; })
    .finally(() => inflight.delete(ck));
  inflight.set(ck, p);
  return p;
}

async function loadRuns() {
  const body = await api('/api/runs');
  const runs = (Array.isArray(body.runs) ? body.runs : []).filter((r) => r && typeof r.id === 'string');
  for (const r of runs) state.extraRuns.delete(r.id);
  await Promise.all([...state.extraRuns.values()].filter((r) => r.status === 'running')
    .map((r) => api(runPath(r.id)).then((d) => state.extraRuns.set(r.id, d), () => {})));
  runs.push(...state.extraRuns.values());
  runs.sort((a, b) => (b.created_at || 0) - (a.created_at || 0));
  state.runs = runs;
  state.runById = new Map(runs.map((r) => [r.id, r]));
  $('#last-updated').textContent = `updated ${fmtClock(nowSec())}`;
}

/** Runs named in the URL but missing from the list: try /api/runs/<id>, else report "unknown run ID". */
async function resolveUrlRuns(ids) {
  const known = [];
  for (const id of ids) {
    if (state.runById.has(id)) { known.push(id); continue; }
    try {
      const d = await api(runPath(id));
      state.extraRuns.set(id, d);
      state.details.set(id, d);
      state.runs.push(d);
      state.runById.set(id, d);
      known.push(id);
    } catch (e) {
      showBanner(e.status === 404 ? `unknown run ID "${id}"` : `could not load run "${id}": ${e.message}`, `unknown|${id}`, 'warn');
    }
  }
  return known;
}

// ===== 4. Banners ============================================================================
const banners = new Map(); // key -> {msg, kind}
function showBanner(msg, key = msg, kind = 'error') {
  banners.delete(key);
  banners.set(key, { msg, kind });
  while (banners.size > 4) banners.delete(banners.keys().next().value);
  renderBanners();
}
function clearBanner(key) { if (banners.delete(key)) renderBanners(); }
function renderBanners() {
  $('#banners').replaceChildren(...[...banners].map(([key, b]) => h('div', { class: `banner banner-${b.kind}` },
    h('span', null, b.msg),
    h('button', { class: 'banner-close', title: 'Dismiss', 'aria-label': 'Dismiss', onclick: () => clearBanner(key) }, '×'))));
}

// ===== 5. Runs table =========================================================================
function runDuration(r) {
  if (typeof r.created_at !== 'number') return NaN;
  const end = typeof r.finished_at === 'number' ? r.finished_at
    : r.status === 'running' ? Math.max(nowSec(), r.updated_at || 0) : r.updated_at;
  return typeof end === 'number' ? end - r.created_at : NaN;
}
function statusBadge(r) {
  const st = /^[a-z]+$/.test(r.status) ? r.status : 'unknown';
  const title = st === 'running' ? `last update ${fmtDuration(nowSec() - (r.updated_at || 0))} ago`
    : r.exit_code != null ? `exit code ${r.exit_code}` : null;
  return h('span', { class: `badge st-${st}`, title }, String(r.status ?? 'unknown'));
}
const runSummary = (r) => flatten(r.summary || {});

/** Up to 4 numeric summary keys, preferring common ones and loss/accuracy-like names. */
function summaryColumns(runs) {
  const counts = new Map();
  for (const r of runs) {
    for (const [k, v] of Object.entries(runSummary(r))) if (isNumeric(v)) counts.set(k, (counts.get(k) || 0) + 1);
  }
  const prio = (k) => (/loss/i.test(k) ? 0 : /acc|ppl|perplex|f1|bleu|score|reward/i.test(k) ? 1 : /^_|step|time|epoch/i.test(k) ? 3 : 2);
  return [...counts.keys()].sort((a, b) => prio(a) - prio(b) || counts.get(b) - counts.get(a) || natural(a, b)).slice(0, 4);
}
function runColumns(runs) {
  const cols = [
    { id: 'name', label: 'Name', sort: (r) => r.name || '' },
    { id: 'project', label: 'Project', sort: (r) => r.project || '' },
    { id: 'status', label: 'Status', sort: (r) => r.status || '' },
    { id: 'tags', label: 'Tags' },
    { id: 'created', label: 'Created', sort: (r) => r.created_at || 0 },
    { id: 'duration', label: 'Duration', sort: (r) => runDuration(r) || 0 },
  ];
  for (const k of summaryColumns(runs)) {
    cols.push({ id: `s:${k}`, label: k, num: true, sort: (r) => { const v = toNum(runSummary(r)[k]); return Number.isNaN(v) ? -Infinity : v; } });
  }
  return cols;
}
function filteredRuns() {
  const { text, project, status } = state.runFilter;
  const needle = text.trim().toLowerCase();
  return state.runs.filter((r) => {
    if (project && r.project !== project) return false;
    if (status && r.status !== status) return false;
    if (!needle) return true;
    const hay = [r.name, r.id, r.project, ...(Array.isArray(r.tags) ? r.tags : [])].join('\n').toLowerCase();
    return needle.split(/\s+/).every((t) => hay.includes(t));
  });
}
function updateSelectOptions(select, values, allLabel) {
  const want = ['', ...values];
  const have = [...select.options].map((o) => o.value);
  if (want.join('\n') === have.join('\n')) return;
  const cur = select.value;
  select.replaceChildren(...want.map((v) => h('option', { value: v }, v || allLabel)));
  select.value = want.includes(cur) ? cur : '';
}
function runCell(r, col) {
  switch (col.id) {
    case 'name': return h('td', { class: 'name' },
      h('span', { class: 'swatch', style: state.selected.includes(r.id) ? `background:${runColor(r.id)}` : null }),
      h('button', { class: 'link', title: `Open details of ${r.id}`, onclick: () => openDetails(r.id) }, r.name || r.id),
      h('span', { class: 'run-id' }, r.id));
    case 'project': return h('td', null, r.project ?? '');
    case 'status': return h('td', null, statusBadge(r));
    case 'tags': return h('td', { class: 'tags' }, (Array.isArray(r.tags) ? r.tags : []).map((t) => h('span', { class: 'tag' }, t)));
    case 'created': return h('td', { class: 'nowrap', title: new Date((r.created_at || 0) * 1000).toString() }, fmtDate(r.created_at));
    case 'duration': return h('td', { class: 'num' }, fmtDuration(runDuration(r)));
    default: { const v = runSummary(r)[col.id.slice(2)]; return h('td', { class: 'num' }, v === undefined ? '' : fmtNum(toNum(v))); }
  }
}
function renderRunsTable() {
  updateSelectOptions($('#project-filter'), [...new Set(state.runs.map((r) => r.project).filter(Boolean))].sort(natural), 'All projects');
  const cols = runColumns(state.runs);
  const sortCol = cols.find((c) => c.id === state.sort.col) || cols[4];
  const runs = filteredRuns();
  runs.sort((a, b) => { const x = sortCol.sort(a), y = sortCol.sort(b); return (x < y ? -1 : x > y ? 1 : 0) * state.sort.dir; });
  const nSel = runs.filter((r) => state.selected.includes(r.id)).length;
  const all = h('input', { type: 'checkbox', title: 'Select / deselect all shown runs', checked: runs.length > 0 && nSel === runs.length,
    indeterminate: nSel > 0 && nSel < runs.length,
    onchange: (e) => {
      const ids = runs.map((r) => r.id);
      setSelection(e.target.checked ? [...state.selected, ...ids] : state.selected.filter((id) => !ids.includes(id)));
    } });
  $('#runs-table thead').replaceChildren(h('tr', null, h('th', { class: 'sel' }, all), cols.map((c) => h('th', {
    class: `${c.sort ? 'sortable' : ''} ${c.num ? 'num' : ''}`, title: c.sort ? 'Sort' : null,
    onclick: c.sort ? () => { state.sort = { col: c.id, dir: state.sort.col === c.id ? -state.sort.dir : (c.id === 'name' || c.id === 'project' ? 1 : -1) }; renderRunsTable(); } : null,
  }, c.label, state.sort.col === c.id ? (state.sort.dir > 0 ? ' ▲' : ' ▼') : ''))));
  const rows = runs.slice(0, 500).map((r) => {
    const sel = state.selected.includes(r.id);
    return h('tr', { class: sel ? 'selected' : '', onclick: (e) => { if (!e.target.closest('button')) toggleRun(r.id); } },
      h('td', { class: 'sel' }, h('input', { type: 'checkbox', checked: sel, 'aria-label': `select ${r.name || r.id}` })),
      cols.map((c) => runCell(r, c)));
  });
  if (!rows.length) rows.push(h('tr', null, h('td', { colspan: cols.length + 1, class: 'empty' }, state.runs.length ? 'No runs match the filters.' : 'No runs yet.')));
  if (runs.length > 500) rows.push(h('tr', null, h('td', { colspan: cols.length + 1, class: 'muted' }, `${runs.length - 500} more runs — refine the filter.`)));
  $('#runs-table tbody').replaceChildren(...rows);
  $('#runs-count').textContent = `${runs.length}${runs.length !== state.runs.length ? ` of ${state.runs.length}` : ''} runs · ${state.selected.length} selected`;
  const running = state.runs.filter((r) => r.status === 'running').length;
  const live = $('#live-indicator');
  live.textContent = running ? `● live · ${running} running` : '';
  live.hidden = !running || !state.live;
}
function openDetails(id) {
  if (!state.selected.includes(id)) { state.selected.push(id); assignColor(id); }
  state.focus = id;
  state.tab = 'details';
  onSelectionChanged();
}

// ===== 6. Tabs & focus run ===================================================================
function renderActiveTab(opts = {}) {
  for (const t of TABS) {
    $(`#tab-${t}`).hidden = t !== state.tab;
    $(`#tabs [data-tab="${t}"]`).setAttribute('aria-selected', String(t === state.tab));
  }
  updateTabCounts();
  renderRunBar();
  if (state.tab !== 'charts') releaseCharts(scalarCharts); // charts are re-created on return
  if (state.tab !== 'histograms') destroyCharts(histCharts);
  const render = { charts: renderCharts, histograms: renderHistograms, text: renderTexts, images: renderImages,
    config: renderConfig, details: renderDetails }[state.tab];
  render(opts);
}
function updateTabCounts() {
  const d = state.focus && state.details.get(state.focus);
  const counts = { charts: unionScalarKeys().length, config: state.selected.length,
    histograms: d && d.histogram_keys?.length, text: d && d.text_keys?.length, images: d && d.image_keys?.length };
  for (const t of TABS) $(`#tabs [data-tab="${t}"] .count`).textContent = counts[t] ? String(counts[t]) : '';
}
function renderRunBar() {
  const bar = $('#run-bar');
  bar.hidden = !PER_RUN_TABS.has(state.tab);
  if (bar.hidden) return;
  const sel = $('#focus-select');
  sel.replaceChildren(...selectedRuns().map((r) => h('option', { value: r.id }, `${runLabel(r.id)} · ${r.id}`)));
  sel.value = state.focus || '';
  sel.disabled = !state.selected.length;
  const filter = $('#tab-filter');
  filter.hidden = state.tab === 'details';
  filter.value = state.tabFilter[state.tab] || '';
  $('#hist-mode-wrap').hidden = state.tab !== 'histograms';
  const swatch = $('#focus-swatch');
  swatch.style.background = state.focus ? runColor(state.focus) : 'transparent';
}
const focusRun = () => (state.focus && getRun(state.focus)) || null;
/** Common preamble of per-run tabs: resolves to the run detail, or renders a placeholder and returns null. */
function needFocusDetail(host, rerender) {
  const run = focusRun();
  if (!run) { delete host.dataset.sig; host.replaceChildren(emptyMsg('Select a run in the table above.')); return null; }
  const d = state.details.get(run.id);
  if (d) return d;
  delete host.dataset.sig;
  host.replaceChildren(emptyMsg('Loading…'));
  const tab = state.tab;
  getDetail(run.id).then((det) => {
    if (state.focus !== run.id || state.tab !== tab) return;
    if (!det) { delete host.dataset.sig; host.replaceChildren(emptyMsg('Could not load this run.')); }
    else { updateTabCounts(); rerender(); }
  });
  return null;
}
function filterKeys(keys, filterText) {
  const terms = filterText.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
  const all = [...new Set(Array.isArray(keys) ? keys : [])].sort(natural);
  if (!terms.length) return all;
  const exact = terms.flatMap((t) => all.filter((k) => k.toLowerCase() === t));
  const partial = all.filter((k) => !exact.includes(k) && terms.some((t) => k.toLowerCase().includes(t)));
  return [...exact, ...partial];
}
function makeCard(title, { extraClass = '', actions = [] } = {}) {
  const canvas = h('canvas');
  const box = h('div', { class: 'zoombox', hidden: true });
  const note = h('div', { class: 'card-note' });
  const card = h('div', { class: `card ${extraClass}` },
    h('div', { class: 'card-head' }, h('span', { class: 'card-title', title }, title), h('span', { class: 'card-actions' }, actions)),
    h('div', { class: 'canvas-wrap' }, canvas, box), note);
  return { card, canvas, box, note, chart: null };
}
/** Destroy the Chart objects but keep the cards (and their zoom handlers). */
function releaseCharts(map) {
  for (const e of map.values()) { e.chart?.destroy(); e.chart = null; e.sig = null; }
}
function destroyCharts(map) {
  releaseCharts(map);
  map.clear();
}

// ===== 7. Scalar charts ======================================================================
const scalarCharts = new Map(); // key -> card entry
let chartLayoutSig = '';

function unionScalarKeys() {
  const keys = new Set();
  for (const r of selectedRuns()) for (const k of (Array.isArray(r.scalar_keys) ? r.scalar_keys : [])) keys.add(k);
  return [...keys];
}
/** TensorBoard's debiased exponential moving average. */
function smooth(values, w) {
  if (w <= 0 || values.every((v) => v === values[0])) return values.slice();
  let last = 0, n = 0;
  return values.map((v) => {
    last = last * w + (1 - w) * v;
    n++;
    return last / (w === 1 ? 1 : 1 - Math.pow(w, n));
  });
}
/** Split API points into finite points and the non-finite ones (reported, never plotted). */
function cleanPoints(points) {
  const good = [], bad = [];
  let t0 = null;
  for (const p of points) {
    if (!Array.isArray(p) || p.length < 3) continue;
    const [step, wall, raw] = p;
    if (t0 === null && typeof wall === 'number') t0 = wall;
    const v = toNum(raw);
    if (Number.isFinite(v)) good.push({ step: +step, wall: +wall, rel: +wall - t0, v });
    else bad.push({ step, v });
  }
  return { good, bad };
}
function buildScalarDatasets(key) {
  const datasets = [], notes = [];
  const w = state.smoothing;
  for (const run of selectedRuns()) {
    if (!(run.scalar_keys || []).includes(key)) continue;
    const color = runColor(run.id), label = runLabel(run.id);
    const entry = state.series.get(`scalars|${run.id}|${key}`);
    if (!entry) { notes.push({ text: `${label}: loading…` }); continue; }
    if (entry.error) notes.push({ text: `${label}: ${entry.error}`, cls: 'err' });
    const { good, bad } = cleanPoints(entry.points);
    if (bad.length) {
      const kinds = {};
      for (const b of bad) { const s = Number.isNaN(b.v) ? 'NaN' : b.v > 0 ? '+Inf' : '-Inf'; kinds[s] = (kinds[s] || 0) + 1; }
      notes.push({ text: `${label}: ${Object.entries(kinds).map(([k, n]) => `${n} ${k}`).join(', ')} point${bad.length > 1 ? 's' : ''} not plotted`,
        title: bad.slice(0, 50).map((b) => `step ${b.step}: ${fmtNum(b.v)}`).join('\n'), cls: 'warn' });
    }
    const sm = smooth(good.map((p) => p.v), w);
    let pts = good.map((p, i) => ({ x: state.xaxis === 'step' ? p.step : state.xaxis === 'relative' ? p.rel : p.wall,
      y: sm[i], raw: p.v, step: p.step, wall: p.wall, rel: p.rel }));
    if (state.xaxis !== 'step') pts.sort((a, b) => a.x - b.x);
    if (state.logY) {
      const n = pts.length;
      pts = pts.filter((p) => p.y > 0 && p.raw > 0);
      if (pts.length < n) notes.push({ text: `${label}: ${n - pts.length} value(s) ≤ 0 hidden (log scale)`, cls: 'warn' });
    }
    const hidden = state.hiddenRuns.has(run.id);
    const base = { _runId: run.id, hidden, borderJoinStyle: 'round', pointRadius: pts.length === 1 ? 3 : 0, pointHoverRadius: 3, spanGaps: true };
    datasets.push({ ...base, _role: 'main', label, data: pts, borderColor: color, backgroundColor: color, borderWidth: 1.6, order: 0 });
    if (w > 0) {
      datasets.push({ ...base, _role: 'raw', label: `${label} (raw)`, data: pts.map((p) => ({ ...p, y: p.raw })),
        borderColor: rgba(color, 0.25), backgroundColor: rgba(color, 0.25), borderWidth: 1, pointHoverRadius: 0, order: 1 });
    }
  }
  return { datasets, notes };
}
/** Tick label callback; `this` is the x scale. */
function fmtX(v) {
  if (state.xaxis === 'relative') return fmtDuration(v);
  if (state.xaxis === 'wall') return this.max - this.min > 86400 ? fmtDate(v).slice(5) : fmtClock(v).slice(0, v % 60 ? 8 : 5);
  return fmtCompact(v);
}
const NICE_SECONDS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
/** For time axes, put ticks on round durations (1m, 5m, 1h …) instead of Chart.js's decimal steps. */
function timeTicks(scale) {
  const span = scale.max - scale.min;
  if (state.xaxis === 'step' || !(span > 10)) return;
  const target = span / 7;
  const step = NICE_SECONDS.find((x) => x >= target) || Math.ceil(target / 604800) * 604800;
  const ticks = [];
  for (let v = Math.ceil(scale.min / step) * step; v <= scale.max + 1e-9; v += step) ticks.push({ value: v });
  if (ticks.length >= 2) scale.ticks = ticks;
}
function fmtYTick(v) {
  if (!state.logY) return fmtCompact(v);
  const m = v / Math.pow(10, Math.floor(Math.log10(v) + 1e-9));
  return [1, 2, 5].some((x) => Math.abs(m - x) < 1e-6) ? fmtCompact(v) : '';
}
/** x range from the user's zoom; y range fitted to the points inside it. */
function computeRanges(key, datasets) {
  const z = state.zoom.get(key);
  if (!z || z.xaxis !== state.xaxis) return {};
  let lo = Infinity, hi = -Infinity;
  for (const ds of datasets) {
    if (ds.hidden) continue;
    for (const p of ds.data) if (p.x >= z.min && p.x <= z.max) { lo = Math.min(lo, p.y); hi = Math.max(hi, p.y); }
  }
  if (!(hi >= lo)) return { xmin: z.min, xmax: z.max };
  if (state.logY) return { xmin: z.min, xmax: z.max, ymin: lo / 1.1, ymax: hi * 1.1 };
  const padY = (hi - lo) * 0.05 || Math.abs(hi) * 0.05 || 1;
  return { xmin: z.min, xmax: z.max, ymin: lo - padY, ymax: hi + padY };
}
function applyRanges(scales, r) {
  scales.x.min = r.xmin; scales.x.max = r.xmax;
  scales.y.min = r.ymin; scales.y.max = r.ymax;
}
// Tooltip mode: for each visible main line, the point nearest in x to the cursor.
function registerInteraction() {
  Chart.Interaction.modes.runX = (chart, e) => {
    const items = [];
    chart.data.datasets.forEach((ds, di) => {
      if (ds._role === 'raw' || !chart.isDatasetVisible(di)) return;
      const els = chart.getDatasetMeta(di).data;
      let best = -1, bestD = Infinity;
      for (let i = 0; i < els.length; i++) { const d = Math.abs(els[i].x - e.x); if (d < bestD) { bestD = d; best = i; } }
      if (best >= 0) items.push({ element: els[best], datasetIndex: di, index: best });
    });
    return items;
  };
}
const whiteBackground = { id: 'whiteBackground', beforeDraw(c) {
  const ctx = c.ctx; ctx.save(); ctx.globalCompositeOperation = 'destination-over';
  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, c.width, c.height); ctx.restore();
} };
function scalarChartOptions() {
  return {
    animation: false, parsing: false, normalized: true, responsive: true, maintainAspectRatio: false,
    interaction: { mode: 'runX', intersect: false },
    scales: {
      x: { type: 'linear', afterBuildTicks: timeTicks, ticks: { callback: fmtX, maxRotation: 0, autoSkipPadding: 14, includeBounds: false }, grid: { color: '#eef0f3' } },
      y: { type: state.logY ? 'logarithmic' : 'linear', ticks: { callback: fmtYTick, autoSkipPadding: 8, includeBounds: false }, grid: { color: '#eef0f3' } },
    },
    plugins: {
      legend: {
        position: 'top', align: 'start',
        labels: { boxWidth: 14, boxHeight: 2, padding: 8, filter: (item, data) => data.datasets[item.datasetIndex]._role !== 'raw' },
        onClick: (e, item, legend) => {
          const id = legend.chart.data.datasets[item.datasetIndex]._runId;
          if (state.hiddenRuns.has(id)) state.hiddenRuns.delete(id); else state.hiddenRuns.add(id);
          for (const key of scalarCharts.keys()) updateChart(key);
        },
      },
      tooltip: {
        itemSort: (a, b) => b.raw.y - a.raw.y,
        callbacks: {
          title: (items) => {
            const p = items[0]?.raw;
            return p ? `step ${p.step} · ${fmtDuration(p.rel)} · ${fmtClock(p.wall)}` : '';
          },
          label: (item) => `${item.dataset.label}: ${fmtNum(item.raw.y)}${state.smoothing > 0 ? `  (raw ${fmtNum(item.raw.raw)})` : ''}`,
          labelColor: (item) => ({ borderColor: item.dataset.borderColor, backgroundColor: item.dataset.borderColor }),
        },
      },
    },
  };
}
function updateChart(key) {
  const e = scalarCharts.get(key);
  if (!e || !window.Chart) return;
  const { datasets, notes } = buildScalarDatasets(key);
  const ranges = computeRanges(key, datasets);
  if (!e.chart) {
    const options = scalarChartOptions();
    applyRanges(options.scales, ranges);
    e.chart = new Chart(e.canvas, { type: 'line', data: { datasets }, options, plugins: [whiteBackground] });
  } else {
    e.chart.data.datasets = datasets;
    applyRanges(e.chart.options.scales, ranges);
    e.chart.update('none');
  }
  e.resetBtn.hidden = ranges.xmin === undefined;
  e.note.replaceChildren(...notes.map((n) => h('span', { class: `note ${n.cls || ''}`, title: n.title }, n.text)));
}
function attachZoom(key, e) {
  let start = null;
  const inArea = (x) => { const a = e.chart?.chartArea; return a && x >= a.left && x <= a.right; };
  e.canvas.addEventListener('pointerdown', (ev) => {
    if (ev.button !== 0 || !inArea(ev.offsetX)) return;
    start = ev.offsetX;
    e.canvas.setPointerCapture(ev.pointerId);
  });
  e.canvas.addEventListener('pointermove', (ev) => {
    if (start === null) return;
    const a = e.chart.chartArea, x = Math.min(a.right, Math.max(a.left, ev.offsetX));
    Object.assign(e.box.style, { left: `${Math.min(start, x)}px`, width: `${Math.abs(x - start)}px`, top: `${a.top}px`, height: `${a.bottom - a.top}px` });
    e.box.hidden = Math.abs(x - start) < 3;
  });
  e.canvas.addEventListener('pointerup', (ev) => {
    if (start === null) return;
    const a = e.chart.chartArea, x = Math.min(a.right, Math.max(a.left, ev.offsetX));
    const s = e.chart.scales.x;
    if (Math.abs(x - start) > 4) {
      const v1 = s.getValueForPixel(start), v2 = s.getValueForPixel(x);
      state.zoom.set(key, { xaxis: state.xaxis, min: Math.min(v1, v2), max: Math.max(v1, v2) });
      updateChart(key);
    }
    start = null;
    e.box.hidden = true;
  });
  e.canvas.addEventListener('dblclick', () => { state.zoom.delete(key); updateChart(key); });
}
function createScalarCard(key) {
  const resetBtn = h('button', { class: 'icon-btn', title: 'Reset zoom', hidden: true, onclick: () => { state.zoom.delete(key); updateChart(key); } }, '⟲ zoom');
  const expandBtn = h('button', { class: 'icon-btn', title: 'Expand / shrink', onclick: () => {
    if (state.expanded.has(key)) state.expanded.delete(key); else state.expanded.add(key);
    e.card.classList.toggle('expanded', state.expanded.has(key));
  } }, '⤢');
  const pngBtn = h('button', { class: 'icon-btn', title: 'Download PNG', onclick: () => {
    if (!e.chart) return;
    h('a', { href: e.chart.toBase64Image('image/png', 1), download: `${key.replace(/[^\w.-]+/g, '_')}.png` }).click();
  } }, 'PNG');
  const e = makeCard(key, { extraClass: state.expanded.has(key) ? 'expanded' : '', actions: [resetBtn, expandBtn, pngBtn] });
  e.resetBtn = resetBtn;
  e.card.dataset.key = key;
  attachZoom(key, e);
  return e;
}
function groupKeys(keys) {
  const groups = new Map();
  for (const k of keys) {
    const i = k.indexOf('/');
    const g = i > 0 ? k.slice(0, i) : '';
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(k);
  }
  return [...groups].sort((a, b) => (a[0] === '' ? -1 : b[0] === '' ? 1 : natural(a[0], b[0])));
}
function layoutCharts(host, shown, extraNote) {
  const groups = state.keyFilter.trim() ? [['', shown]] : groupKeys(shown);
  const sig = JSON.stringify([groups, extraNote]);
  if (sig === chartLayoutSig && host.querySelector('.card')) return;
  chartLayoutSig = sig;
  const grid = (keys) => h('div', { class: 'chart-grid' }, keys.map((k) => scalarCharts.get(k).card));
  const nodes = groups.length === 1 ? [grid(groups[0][1])] : groups.map(([g, keys]) => {
    const det = h('details', { class: 'group', open: !state.collapsedGroups.has(g) },
      h('summary', null, g || 'metrics', h('span', { class: 'count' }, String(keys.length))), grid(keys));
    det.addEventListener('toggle', () => { if (det.open) state.collapsedGroups.delete(g); else state.collapsedGroups.add(g); });
    return det;
  });
  if (extraNote) nodes.push(h('div', { class: 'muted small' }, extraNote));
  host.replaceChildren(...nodes);
}
/** opts.refresh: run ids whose series must be re-fetched (live updates). */
function renderCharts({ refresh = [], rebuild = false } = {}) {
  const host = $('#charts');
  if (rebuild) releaseCharts(scalarCharts);
  const runs = selectedRuns();
  const allKeys = unionScalarKeys();
  const keys = filterKeys(allKeys, state.keyFilter);
  let message = null;
  if (!window.Chart) message = 'Charts unavailable: Chart.js did not load.';
  else if (state.pendingUrlRuns) message = 'Waiting for the server…';
  else if (!runs.length) message = 'Select one or more runs in the table above to plot their metrics.';
  else if (!allKeys.length) message = 'No scalars logged for the selected runs yet.';
  else if (!keys.length) message = `No metric matches "${state.keyFilter}".`;
  if (message) { destroyCharts(scalarCharts); chartLayoutSig = ''; host.replaceChildren(emptyMsg(message)); return; }
  const shown = keys.slice(0, MAX_CHARTS);
  for (const [k, e] of scalarCharts) if (!shown.includes(k)) { e.chart?.destroy(); scalarCharts.delete(k); }
  for (const k of shown) if (!scalarCharts.has(k)) scalarCharts.set(k, createScalarCard(k));
  layoutCharts(host, shown, keys.length > shown.length ? `${keys.length - shown.length} more metrics not shown — refine the filter.` : '');
  for (const key of shown) {
    updateChart(key);
    for (const r of runs) {
      if (!(r.scalar_keys || []).includes(key)) continue;
      const force = refresh.includes(r.id);
      if (force || !state.series.has(`scalars|${r.id}|${key}`)) getSeries('scalars', r.id, key, force).then(() => updateChart(key));
    }
  }
}

// ===== 8. Config comparison ==================================================================
function renderConfig() {
  const host = $('#config');
  const runs = selectedRuns();
  if (!runs.length) { host.replaceChildren(emptyMsg('Select runs in the table above to compare their configs.')); return; }
  const flats = runs.map((r) => flatten(r.config || {}));
  const keys = [...new Set(flats.flatMap(Object.keys))].sort(natural);
  const needle = state.configFilter.trim().toLowerCase();
  let nDiff = 0;
  const rows = [];
  for (const k of keys) {
    const vals = flats.map((f) => (k in f ? fmtValue(f[k]) : undefined));
    const differs = new Set(vals.map((v) => (v === undefined ? '\u0000' : v))).size > 1;
    if (differs) nDiff++;
    if ((state.onlyDiff && !differs) || (needle && !k.toLowerCase().includes(needle))) continue;
    rows.push(h('tr', { class: differs ? 'diff' : '' }, h('td', { class: 'key' }, k),
      vals.map((v) => (v === undefined ? h('td', { class: 'missing' }, '—')
        : h('td', { class: differs && v !== vals[0] ? 'val changed' : 'val' }, v)))));
  }
  if (!rows.length) rows.push(h('tr', null, h('td', { colspan: runs.length + 1, class: 'empty' }, keys.length ? 'No keys match.' : 'No config logged.')));
  $('#config-summary').textContent = `${keys.length} keys · ${nDiff} differ across ${runs.length} run${runs.length > 1 ? 's' : ''}`;
  host.replaceChildren(h('div', { class: 'table-wrap' }, h('table', { class: 'grid config' },
    h('thead', null, h('tr', null, h('th', null, 'Key'), runs.map((r) => h('th', { title: r.id },
      h('span', { class: 'swatch', style: `background:${runColor(r.id)}` }), runLabel(r.id))))),
    h('tbody', null, rows))));
}

// ===== 9. Histograms =========================================================================
const histCharts = new Map(); // "id|key" -> card entry
const HIST_BINS = 40, HIST_MAX_STEPS = 40;

/** Re-bin one HistogramProto into nb uniform bins over [lo, hi]; bucket i covers (limits[i-1], limits[i]]. */
function rebin(p, lo, hi, nb) {
  const out = new Array(nb).fill(0), w = (hi - lo) / nb;
  const lim = p.bucket_limits || [], cnt = p.bucket_counts || [];
  const pmin = Number.isFinite(+p.min) ? +p.min : lo, pmax = Number.isFinite(+p.max) ? +p.max : hi;
  const bin = (x) => Math.min(nb - 1, Math.max(0, Math.floor((x - lo) / w)));
  for (let i = 0; i < cnt.length; i++) {
    const c = +cnt[i];
    if (!(c > 0)) continue;
    let l = Math.max(i === 0 ? pmin : +lim[i - 1], pmin), r = Math.min(+lim[i], pmax);
    if (!(r > l)) { out[bin(Math.min(Math.max(+lim[i], pmin), pmax))] += c; continue; }
    for (let b = bin(l); b <= bin(r); b++) {
      const overlap = Math.min(r, lo + (b + 1) * w) - Math.max(l, lo + b * w);
      if (overlap > 0) out[b] += (c * overlap) / (r - l);
    }
  }
  return out;
}
function histDatasets(points, color) {
  let pts = points.filter((p) => p && Array.isArray(p.bucket_counts) && Array.isArray(p.bucket_limits)).sort((a, b) => a.step - b.step);
  const total = pts.length;
  if (pts.length > HIST_MAX_STEPS) {
    const stride = (pts.length - 1) / (HIST_MAX_STEPS - 1);
    pts = Array.from({ length: HIST_MAX_STEPS }, (_, i) => pts[Math.round(i * stride)]);
  }
  if (!pts.length) return null;
  let lo = Math.min(...pts.map((p) => +p.min).filter(Number.isFinite));
  let hi = Math.max(...pts.map((p) => +p.max).filter(Number.isFinite));
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return null;
  if (hi <= lo) { lo -= 0.5; hi += 0.5; }
  const w = (hi - lo) / HIST_BINS;
  const bins = pts.map((p) => rebin(p, lo, hi, HIST_BINS));
  const maxC = Math.max(1e-12, ...bins.flat());
  const steps = pts.map((p) => p.step);
  const span = steps[steps.length - 1] - steps[0] || 1;
  const ridge = pts.length > 1 ? (span / (pts.length - 1)) * 3 : 1;
  const offset = state.histMode === 'offset';
  const datasets = pts.map((p, i) => {
    const t = pts.length > 1 ? i / (pts.length - 1) : 1;
    const line = mix(color, '#ffffff', 0.75 * (1 - t));
    return {
      label: `step ${p.step}`, order: pts.length - i, borderWidth: 1, pointRadius: 0, pointHoverRadius: 2,
      borderColor: offset ? mix(line, '#000000', 0.15) : line,
      backgroundColor: offset ? mix(color, '#ffffff', 0.55 + 0.35 * (1 - t)) : line,
      fill: offset ? { value: p.step } : false,
      data: bins[i].map((c, b) => ({ x: lo + (b + 0.5) * w, y: offset ? p.step - (c / maxC) * ridge : c, c, step: p.step })),
    };
  });
  return { datasets, total, shown: pts.length, first: steps[0], last: steps[steps.length - 1], ridge };
}
function drawHistogram(e, points, color) {
  const last = points[points.length - 1];
  const sig = `${state.histMode}|${color}|${points.length}|${last && last.step}`;
  if (e.chart && e.sig === sig) return; // unchanged: keep the chart (and any open tooltip)
  e.sig = sig;
  e.chart?.destroy();
  e.chart = null;
  const built = histDatasets(points, color);
  if (!built) { e.note.textContent = 'No histogram data.'; return; }
  const offset = state.histMode === 'offset';
  e.chart = new Chart(e.canvas, { type: 'line', plugins: [whiteBackground], data: { datasets: built.datasets }, options: {
    animation: false, parsing: false, normalized: true, responsive: true, maintainAspectRatio: false,
    interaction: { mode: 'nearest', intersect: false },
    scales: {
      x: { type: 'linear', ticks: { callback: fmtCompact, maxRotation: 0 }, grid: { color: '#eef0f3' } },
      y: offset ? { type: 'linear', reverse: true, min: built.first - built.ridge * 1.05, max: built.last,
        title: { display: true, text: 'step' }, grid: { color: '#eef0f3' },
        ticks: { callback: (v) => (v < built.first || v > built.last ? '' : fmtCompact(v)) } }
        : { type: 'linear', beginAtZero: true, grace: '4%', title: { display: true, text: 'count' }, ticks: { callback: fmtCompact }, grid: { color: '#eef0f3' } },
    },
    plugins: { legend: { display: false }, tooltip: { callbacks: {
      title: (items) => (items[0] ? `step ${items[0].raw.step}` : ''),
      label: (item) => `≈${fmtNum(item.raw.c)} values near ${fmtNum(item.raw.x)}`,
    } } },
  } });
  e.note.replaceChildren(
    h('span', { class: 'gradient', style: `background:linear-gradient(to right, ${mix(color, '#ffffff', 0.75)}, ${color})` }),
    ` step ${built.first} → ${built.last} · ${built.shown}${built.total > built.shown ? ` of ${built.total}` : ''} steps`);
}
function renderHistograms({ refresh = [] } = {}) {
  const host = $('#histograms');
  const d = needFocusDetail(host, renderHistograms);
  if (!d) { destroyCharts(histCharts); return; }
  if (!window.Chart) { host.replaceChildren(emptyMsg('Charts unavailable: Chart.js did not load.')); return; }
  const keys = filterKeys(d.histogram_keys, state.tabFilter.histograms).slice(0, 24);
  if (!keys.length) { destroyCharts(histCharts); host.replaceChildren(emptyMsg(d.histogram_keys?.length ? 'No histogram matches the filter.' : 'No histograms logged for this run.')); return; }
  const ids = keys.map((k) => `${d.id}|${k}`);
  for (const [ck, e] of histCharts) if (!ids.includes(ck)) { e.chart?.destroy(); histCharts.delete(ck); }
  for (const k of keys) if (!histCharts.has(`${d.id}|${k}`)) histCharts.set(`${d.id}|${k}`, makeCard(k, { extraClass: 'hist' }));
  if (!host.querySelector('.chart-grid') || [...host.querySelectorAll('.card')].length !== keys.length
      || keys.some((k, i) => host.querySelectorAll('.card')[i] !== histCharts.get(`${d.id}|${k}`).card)) {
    host.replaceChildren(h('div', { class: 'chart-grid' }, keys.map((k) => histCharts.get(`${d.id}|${k}`).card)));
  }
  for (const k of keys) {
    const e = histCharts.get(`${d.id}|${k}`);
    getSeries('histograms', d.id, k, refresh.includes(d.id)).then((entry) => {
      if (histCharts.get(`${d.id}|${k}`) !== e) return;
      if (entry.error && !entry.points.length) { e.note.textContent = entry.error; return; }
      drawHistogram(e, entry.points, runColor(d.id));
    });
  }
}

// ===== 10. Text & images =====================================================================
const SHOW_LIMIT = 50;
function renderMediaTab(kind, host, rerender, opts, buildSection) {
  const d = needFocusDetail(host, rerender);
  if (!d) return;
  const allKeys = (kind === 'texts' ? d.text_keys : d.image_keys) || [];
  const keys = filterKeys(allKeys, state.tabFilter[state.tab] || '');
  if (!keys.length) { delete host.dataset.sig; host.replaceChildren(emptyMsg(allKeys.length ? 'No key matches the filter.' : `No ${kind === 'texts' ? 'text' : 'images'} logged for this run.`)); return; }
  Promise.all(keys.map((k) => getSeries(kind, d.id, k, (opts.refresh || []).includes(d.id)))).then((entries) => {
    if (state.focus !== d.id || $(`#tab-${kind === 'texts' ? 'text' : 'images'}`).hidden) return;
    const sig = JSON.stringify([d.id, keys, [...state.showAll], entries.map((e) => [e.points.length, e.error])]);
    if (host.dataset.sig === sig) return; // unchanged: don't rebuild (keeps images from reloading)
    host.dataset.sig = sig;
    host.replaceChildren(...keys.map((k, i) => {
      const pts = [...entries[i].points].filter((p) => p && typeof p === 'object').sort((a, b) => a.step - b.step);
      const all = state.showAll.has(`${kind}|${k}`);
      const more = !all && pts.length > SHOW_LIMIT ? h('button', { class: 'btn btn-small', onclick: () => { state.showAll.add(`${kind}|${k}`); rerender(); } }, `Show all ${pts.length}`) : null;
      return h('section', { class: 'media-section' },
        h('h3', null, k, h('span', { class: 'count' }, `${pts.length} step${pts.length === 1 ? '' : 's'}`), more),
        entries[i].error ? h('div', { class: 'note err' }, entries[i].error) : null,
        buildSection(all ? pts : pts.slice(-SHOW_LIMIT)));
    }));
  });
}
function renderTexts(opts = {}) {
  renderMediaTab('texts', $('#texts'), renderTexts, opts, (pts) => (pts.length
    ? h('table', { class: 'grid texts' }, h('thead', null, h('tr', null, h('th', null, 'Step'), h('th', null, 'Text'))),
      h('tbody', null, [...pts].reverse().map((p) => h('tr', null,
        h('td', { class: 'num step', title: typeof p.wall_time === 'number' ? fmtDate(p.wall_time) : null }, String(p.step)),
        h('td', null, h('pre', null, typeof p.text === 'string' ? p.text : JSON.stringify(p.text)))))))
    : emptyMsg('No samples.')));
}
function renderImages(opts = {}) {
  renderMediaTab('images', $('#images'), renderImages, opts, (pts) => (pts.length
    ? h('div', { class: 'thumbs' }, pts.map((p) => {
      const url = safeUrl(p.url);
      return h('figure', { class: 'thumb' },
        url ? h('a', { href: url, target: '_blank', rel: 'noopener' }, h('img', { src: url, loading: 'lazy', alt: `step ${p.step}` })) : h('div', { class: 'noimg' }, 'invalid url'),
        h('figcaption', null, `step ${p.step}`));
    }))
    : emptyMsg('No images.')));
}

// ===== 11. Run details =======================================================================
function kvTable(obj, cls = '') {
  const entries = Object.entries(obj);
  if (!entries.length) return emptyMsg('—');
  return h('table', { class: `grid kv ${cls}` }, h('tbody', null, entries.map(([k, v]) => h('tr', null,
    h('td', { class: 'key' }, k), h('td', { class: 'val' }, isNumeric(v) ? fmtNum(toNum(v)) : fmtValue(v))))));
}
function renderDetails() {
  const host = $('#details');
  const d = needFocusDetail(host, renderDetails);
  if (!d) return;
  const r = { ...d, ...(getRun(d.id) || {}) };
  const field = (label, value) => [h('dt', null, label), h('dd', null, value)];
  const arts = Array.isArray(d.artifacts) ? d.artifacts : [];
  host.replaceChildren(h('div', { class: 'details-grid' },
    h('section', { class: 'panel-box' }, h('h3', null, h('span', { class: 'swatch', style: `background:${runColor(r.id)}` }), r.name || r.id),
      h('dl', { class: 'meta' },
        field('ID', h('code', null, r.id)), field('Project', r.project ?? '—'), field('Status', statusBadge(r)),
        field('Exit code', r.exit_code ?? '—'), field('Host', r.host ?? '—'), field('PID', r.pid ?? '—'),
        field('Created', fmtDate(r.created_at)), field('Updated', fmtDate(r.updated_at)),
        field('Finished', fmtDate(r.finished_at)), field('Duration', fmtDuration(runDuration(r))),
        field('Tags', (r.tags || []).map((t) => h('span', { class: 'tag' }, t))),
        field('Logged keys', `${(r.scalar_keys || []).length} scalar · ${(d.histogram_keys || []).length} histogram · ${(d.text_keys || []).length} text · ${(d.image_keys || []).length} image`))),
    h('section', { class: 'panel-box' }, h('h3', null, 'Summary'), kvTable(flatten(r.summary || {}))),
    h('section', { class: 'panel-box wide' }, h('h3', null, `Artifacts (${arts.length})`), arts.length
      ? h('table', { class: 'grid' }, h('thead', null, h('tr', null, ['Name', 'Type', 'Size', 'SHA-256'].map((t) => h('th', null, t)))),
        h('tbody', null, arts.map((a) => h('tr', null, h('td', null, a.name ?? ''), h('td', null, a.type ?? ''),
          h('td', { class: 'num' }, fmtBytes(a.size)), h('td', null, h('code', { title: a.sha256 || '' }, String(a.sha256 || '').slice(0, 16)))))))
      : emptyMsg('No artifacts.')),
    h('section', { class: 'panel-box wide' }, h('h3', null, 'Config'), kvTable(flatten(r.config || {}), 'config'))));
}

// ===== 12. Live polling ======================================================================
let pollTimer = null;
async function poll() {
  clearTimeout(pollTimer);
  const wasRunning = new Set(state.runs.filter((r) => r.status === 'running').map((r) => r.id));
  const prevKeys = JSON.stringify(selectedRuns().map((r) => r.scalar_keys));
  try {
    await loadRuns();
    clearBanner('poll');
    if (state.pendingUrlRuns) {
      await applyInitialSelection(state.pendingUrlRuns.length ? state.pendingUrlRuns : null);
      return schedulePoll();
    }
    // Re-fetch series of selected runs that are running or have just stopped running.
    const refresh = state.selected.filter((id) => wasRunning.has(id) || getRun(id)?.status === 'running');
    for (const id of refresh) if (id === state.focus && PER_RUN_TABS.has(state.tab)) await getDetail(id, true);
    renderRunsTable();
    if (refresh.length || JSON.stringify(selectedRuns().map((r) => r.scalar_keys)) !== prevKeys) renderActiveTab({ refresh });
  } catch (e) {
    showBanner(`Refresh failed: ${e.message}`, 'poll');
  }
  schedulePoll();
}
function schedulePoll() {
  clearTimeout(pollTimer);
  if (!state.live) return;
  const anyRunning = state.runs.some((r) => r.status === 'running');
  pollTimer = setTimeout(poll, banners.has('poll') ? 3000 : anyRunning ? 2000 : 15000);
}

// ===== 13. Init ==============================================================================
function bindControls() {
  const on = (sel, ev, fn) => $(sel).addEventListener(ev, fn);
  on('#run-filter', 'input', (e) => { state.runFilter.text = e.target.value; renderRunsTable(); });
  on('#project-filter', 'change', (e) => { state.runFilter.project = e.target.value; renderRunsTable(); });
  on('#status-filter', 'change', (e) => { state.runFilter.status = e.target.value; renderRunsTable(); });
  on('#clear-selection', 'click', () => setSelection([]));
  on('#runs-toggle', 'click', () => {
    state.runsCollapsed = !state.runsCollapsed;
    $('#runs-table-wrap').hidden = state.runsCollapsed;
    $('#runs-toggle').setAttribute('aria-expanded', String(!state.runsCollapsed));
  });
  for (const b of document.querySelectorAll('#tabs [data-tab]')) {
    b.addEventListener('click', () => { state.tab = b.dataset.tab; renderActiveTab(); writeUrl(); });
  }
  const key = $('#key-filter');
  key.value = state.keyFilter;
  key.addEventListener('input', () => { state.keyFilter = key.value; renderCharts(); writeUrl(); });
  const sm = $('#smoothing'), smVal = $('#smoothing-val');
  sm.value = String(state.smoothing);
  smVal.value = state.smoothing.toFixed(2);
  sm.addEventListener('input', () => {
    state.smoothing = Math.min(0.99, Math.max(0, parseFloat(sm.value) || 0));
    smVal.value = state.smoothing.toFixed(2);
    for (const k of scalarCharts.keys()) updateChart(k);
    writeUrl();
  });
  const log = $('#log-y');
  log.checked = state.logY;
  log.addEventListener('change', () => { state.logY = log.checked; renderCharts({ rebuild: true }); writeUrl(); });
  for (const r of document.querySelectorAll('input[name="xaxis"]')) {
    r.checked = r.value === state.xaxis;
    r.addEventListener('change', () => { state.xaxis = r.value; renderCharts({ rebuild: true }); writeUrl(); });
  }
  on('#only-diff', 'change', (e) => { state.onlyDiff = e.target.checked; renderConfig(); });
  on('#config-filter', 'input', (e) => { state.configFilter = e.target.value; renderConfig(); });
  on('#focus-select', 'change', (e) => { state.focus = e.target.value; renderActiveTab(); writeUrl(); });
  on('#tab-filter', 'input', (e) => { state.tabFilter[state.tab] = e.target.value; renderActiveTab(); });
  on('#hist-mode', 'change', (e) => { state.histMode = e.target.value; destroyCharts(histCharts); renderHistograms(); });
  on('#auto-refresh', 'change', (e) => { state.live = e.target.checked; renderRunsTable(); if (state.live) poll(); else clearTimeout(pollTimer); });
  on('#refresh-btn', 'click', async () => {
    await poll();
    if (state.focus) await getDetail(state.focus, true);
    renderActiveTab({ refresh: state.selected.slice() });
  });
}

/** Deep link ?runs=… selects those runs; without it the 5 newest runs are selected. */
async function applyInitialSelection(urlRuns) {
  state.pendingUrlRuns = null;
  setSelection(urlRuns ? await resolveUrlRuns(urlRuns) : state.runs.slice(0, 5).map((r) => r.id));
}

async function init() {
  window.addEventListener('error', (e) => showBanner(`Dashboard error: ${e.message}`, 'js'));
  window.addEventListener('unhandledrejection', (e) => showBanner(`Dashboard error: ${e.reason?.message || e.reason}`, 'js'));
  const urlRuns = readUrl();
  bindControls();
  if (window.Chart) {
    Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
    Chart.defaults.font.size = 11;
    Chart.defaults.color = '#4a5361';
    registerInteraction();
  } else {
    showBanner('Chart.js failed to load from /static/chart.min.js — charts are unavailable.', 'chartjs');
  }
  try {
    await loadRuns();
    await applyInitialSelection(urlRuns);
  } catch (e) {
    showBanner(`Could not load runs: ${e.message}`, 'poll');
    state.pendingUrlRuns = urlRuns || [];  // retried by the next successful poll
    renderActiveTab();
  }
  schedulePoll();
}

init();
})();
