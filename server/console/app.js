// The sessionlog operator console: a single script without dependencies or a build step.
// Views are addressed by the URL fragment (#/ the sessions, #/s/ID a session). Every number
// shown comes from the /v1 routes; log text enters the page only as text nodes (textContent),
// never as markup.
'use strict';

const TOKEN_KEY = 'sessionlog.token';
const SESSIONS_PAGE_ROWS = 50;
const TRANSCRIPT_PAGE_ENTRIES = 200;
const CHART_PAGE_ROWS = 5000;
const HISTORY_KINDS = 'prompt,prompt-append,prompt-rewrite,prompt-clear,compaction';
const LIVE_REFRESH_MS = 300;
const COLORS = {
  reused: '#3a8f5c', new: '#d9822b', system: '#6b5bd6', messages: '#2f7fc1', tools: '#b8a23a',
  break: '#c23b3b', compaction: '#222222',
};
// The causes `requests` names (PrefixBreak::name).
const BREAK_COLORS = {
  'head-rewrite': '#c23b3b', 'tools-changed': '#8e44ad', 'config-changed': '#2c3e50',
  'compaction': '#222222', 'replace': '#d35400', 'projection': '#7f6000',
};

// Timings the browser tests read: performance.now() when each view first showed its data.
window.consoleTimings = {};

let route = null;        // what the current view is, to drop answers for a view left
let liveAbort = null;    // ends the current tail

// ---- small DOM helpers -----------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = String(value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return node;
}

const enc = encodeURIComponent;
const fmt = (n) => (n === null || n === undefined ? '-' : Number(n).toLocaleString('en-US'));
const pct = (r) => (r === null || r === undefined ? '-' : (r * 100).toFixed(1) + '%');

function when(ms) {
  if (ms === null || ms === undefined) return '-';
  if (ms === 0) return '0 (normalized)';
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// ---- errors and the token ---------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const text = body && body.message ? body.message : 'HTTP ' + status;
    super(text);
    this.status = status;
    this.body = body;
  }
}

function showError(error) {
  const box = document.getElementById('error');
  if (!error) { box.hidden = true; box.textContent = ''; return; }
  if (error.refused) return; // the token dialog says it
  let text = error.message || String(error);
  if (error.body && error.body.error) {
    text = error.body.error + ': ' + text;
    if (error.body.seq !== undefined) text += ' (seq ' + error.body.seq + ')';
    if (error.body.rule) text += ' [rule ' + error.body.rule + ']';
  }
  box.textContent = text;
  box.hidden = false;
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function headers() {
  const t = token();
  return t ? { Authorization: 'Bearer ' + t } : {};
}

let tokenWaiters = [];

function askToken(message) {
  const dialog = document.getElementById('token-dialog');
  const error = document.getElementById('token-error');
  error.textContent = message || '';
  error.hidden = !message;
  if (!dialog.open) dialog.showModal();
  document.getElementById('token-input').focus();
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

function setupToken() {
  const form = document.getElementById('token-form');
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const input = document.getElementById('token-input');
    const value = input.value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    input.value = '';
    document.getElementById('token-dialog').close();
    document.getElementById('forget-token').hidden = false;
    const waiters = tokenWaiters;
    tokenWaiters = [];
    waiters.forEach((resolve) => resolve());
  });
  const forget = document.getElementById('forget-token');
  forget.hidden = !token();
  forget.addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    forget.hidden = true;
    render();
  });
}

// A GET of a /v1 route as JSON. A 401 drops the token, asks for one, and retries once the
// operator gave it; any other error status throws an ApiError with the server's body.
async function api(path) {
  for (;;) {
    const response = await fetch(path, { headers: headers() });
    if (response.status === 401) {
      const had = token() !== null;
      sessionStorage.removeItem(TOKEN_KEY);
      await askToken(had ? 'The server refused the token (401 unauthorized).' : '');
      continue;
    }
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, body);
    return body;
  }
}

// ---- routing ------------------------------------------------------------------------------

function render() {
  if (liveAbort) { liveAbort.abort(); liveAbort = null; }
  document.getElementById('live').hidden = true;
  showError(null);
  const hash = location.hash || '#/';
  const view = document.getElementById('view');
  view.replaceChildren();
  view.removeAttribute('data-ready');
  const match = hash.match(/^#\/s\/(.+)$/);
  // The first view is timed from the navigation's start (performance.now()'s origin), so
  // it counts loading the page; a later one from its hash change.
  route = { hash, started: route === null ? 0 : performance.now() };
  const current = route;
  const run = match
    ? sessionView(view, decodeURIComponent(match[1]), current)
    : sessionsView(view, current, parseSessionsQuery(hash));
  run.catch((error) => { if (route === current) showError(error); });
}

function parseSessionsQuery(hash) {
  const params = new URLSearchParams(hash.replace(/^#\/\??/, ''));
  return {
    from: Number(params.get('from') || 0),
    sort: params.get('sort') || 'session',
    order: params.get('order') || 'asc',
    filter: params.get('filter') || '',
  };
}

function sessionsHash(query) {
  const params = new URLSearchParams();
  if (query.from) params.set('from', query.from);
  if (query.sort !== 'session') params.set('sort', query.sort);
  if (query.order !== 'asc') params.set('order', query.order);
  if (query.filter) params.set('filter', query.filter);
  const text = params.toString();
  return '#/' + (text ? '?' + text : '');
}

// ---- the sessions page ------------------------------------------------------------------

const SESSION_COLUMNS = [
  ['session', 'session'], ['events', 'events'], ['turns', 'turns'], ['requests', 'requests'],
  ['promptVersions', 'prompt versions'], ['compactions', 'compactions'],
  ['predictedReuse', 'predicted reuse'], ['status', 'status'], ['lastActivity', 'last activity'],
];

async function sessionsView(view, current, query) {
  const filter = el('input', { type: 'search', id: 'filter', placeholder: 'filter by id',
    value: query.filter });
  filter.addEventListener('change', () => {
    location.hash = sessionsHash({ ...query, from: 0, filter: filter.value.trim() });
  });
  const pager = el('span', { id: 'pager' });
  const table = el('table', { id: 'sessions' });
  view.append(el('h1', { text: 'Sessions' }), el('div', { class: 'toolbar' }, filter, pager), table);
  const params = new URLSearchParams({ from: query.from, limit: SESSIONS_PAGE_ROWS,
    sort: query.sort, order: query.order });
  if (query.filter) params.set('filter', query.filter);
  const [page, health] = await Promise.all([
    api('/v1/audit?' + params), fetch('/health').then((r) => r.json()).catch(() => null)]);
  if (route !== current) return;
  if (health) document.getElementById('backend').textContent = health.backend + ' store';
  const head = el('tr', {}, SESSION_COLUMNS.map(([key, label]) => {
    const sorted = query.sort === key;
    const th = el('th', { 'data-sort': key, class: sorted ? 'sorted' + (query.order === 'desc' ? ' desc' : '') : '' }, label);
    th.addEventListener('click', () => {
      const order = sorted && query.order === 'asc' ? 'desc' : 'asc';
      location.hash = sessionsHash({ ...query, from: 0, sort: key, order });
    });
    return th;
  }));
  const rows = page.sessions.map((s) => {
    const status = s.integrity.status;
    const where = s.integrity.seq !== undefined && s.integrity.seq !== null ? ' seq ' + s.integrity.seq : '';
    return el('tr', { 'data-session': s.session },
      el('td', { 'data-col': 'session' }, el('a', { href: '#/s/' + enc(s.session), text: s.session })),
      el('td', { 'data-col': 'events', text: s.events }),
      el('td', { 'data-col': 'turns', text: s.turns }),
      el('td', { 'data-col': 'requests', text: s.requests }),
      el('td', { 'data-col': 'promptVersions', text: s.promptVersions }),
      el('td', { 'data-col': 'compactions', text: s.compactions }),
      el('td', { 'data-col': 'predictedReuse', text: pct(s.predictedReuse) }),
      el('td', { 'data-col': 'status', class: 'status-' + status, title: s.integrity.message || '',
        text: status + where }),
      el('td', { 'data-col': 'lastActivity', text: when(s.lastActivity) }));
  });
  table.replaceChildren(el('thead', {}, head), el('tbody', {}, rows));
  const total = page.page.total;
  const first = total === 0 ? 0 : page.page.from + 1;
  const last = page.page.from + page.sessions.length;
  const prev = el('button', { type: 'button', id: 'prev', disabled: page.page.from === 0 }, 'previous');
  prev.addEventListener('click', () => {
    location.hash = sessionsHash({ ...query, from: Math.max(0, query.from - SESSIONS_PAGE_ROWS) });
  });
  const next = el('button', { type: 'button', id: 'next', disabled: page.page.nextFrom === null }, 'next');
  next.addEventListener('click', () => {
    location.hash = sessionsHash({ ...query, from: page.page.nextFrom });
  });
  pager.replaceChildren(prev, el('span', { id: 'range', text: `${fmt(first)}-${fmt(last)} of ${fmt(total)}` }), next);
  window.consoleTimings.sessions = performance.now() - current.started;
  view.setAttribute('data-ready', 'sessions');
}

// ---- a session ----------------------------------------------------------------------------

async function sessionView(view, id, current) {
  const base = '/v1/sessions/' + enc(id);
  const state = { id, base, current, requests: [], tokens: [], history: [], entries: [],
    transcriptDone: false, selected: null, nextSeq: 0 };
  const facts = el('dl', { class: 'facts', id: 'facts' });
  const verifyButton = el('button', { type: 'button', id: 'verify' }, 'verify');
  const verifyResult = el('span', { id: 'verify-result' });
  const exportButton = el('a', { href: '#', id: 'export' }, 'export (JSONL)');
  verifyButton.addEventListener('click', () => verify(state, verifyResult));
  exportButton.addEventListener('click', (event) => { event.preventDefault(); exportSession(state, exportButton); });
  state.requestsChart = el('div', { id: 'requests-chart' });
  state.contextChart = el('div', { id: 'context-chart' });
  state.detail = el('div', { id: 'request-detail', class: 'panel' },
    el('span', { class: 'muted', text: 'Click a request in a chart to open its messages.' }));
  state.historyBox = el('ol', { id: 'prompt-history' });
  state.transcript = el('div', { id: 'transcript' });
  state.more = el('button', { type: 'button', id: 'more', hidden: true }, 'more entries');
  state.more.addEventListener('click', () => loadTranscript(state));
  state.summary = el('dl', { class: 'facts', id: 'summary' });
  view.append(
    el('h1', {}, 'Session ', el('span', { id: 'session-id', class: 'mono', text: id })),
    el('div', { class: 'panel' }, facts, el('div', { class: 'toolbar' }, verifyButton, verifyResult, exportButton)),
    el('h2', { text: 'Requests: tokens reused from the previous prefix vs new' }),
    el('div', { class: 'panel' }, chartLegend([['reused', COLORS['reused']], ['new', COLORS['new']],
      ...Object.entries(BREAK_COLORS).map(([kind, color]) => ['break: ' + kind, color])]),
    state.requestsChart, state.summary),
    el('h2', { text: 'Context: system, messages and tools tokens per request' }),
    el('div', { class: 'panel' }, chartLegend([['system', COLORS['system']], ['messages', COLORS['messages']],
      ['tools', COLORS['tools']], ['compaction', COLORS['compaction']]]), state.contextChart),
    el('h2', { text: 'Request' }), state.detail,
    el('div', { class: 'two' },
      el('section', {}, el('h2', { text: 'Transcript' }), state.transcript, state.more),
      el('section', {}, el('h2', { text: 'Prompt history and compactions' }), state.historyBox)));
  state.facts = facts;
  let info;
  try {
    info = await api(base);
  } catch (error) {
    // A session whose head cannot be read (a damaged record): say why, and leave verify,
    // which names the fault's seq and kind.
    if (route !== current) return;
    showError(error);
    view.setAttribute('data-ready', 'error');
    return;
  }
  if (route !== current) return;
  state.nextSeq = info.nextSeq;
  renderFacts(state, info);
  try {
    await loadTranscript(state);
  } catch (error) {
    // The head read from a checkpoint, but an older record is damaged: say why, and leave
    // verify, which names the fault's seq and kind.
    if (route !== current) return;
    showError(error);
    view.setAttribute('data-ready', 'error');
    return;
  }
  if (route !== current) return;
  window.consoleTimings.session = performance.now() - current.started;
  view.setAttribute('data-ready', 'session');
  await Promise.all([loadCharts(state), loadHistory(state)]);
  if (route !== current) return;
  window.consoleTimings.charts = performance.now() - current.started;
  view.setAttribute('data-ready', 'charts');
  follow(state);
}

// Swatches are SVG with a fill attribute: the page's policy allows no inline style.
function chartLegend(items) {
  return el('div', { class: 'legend' }, items.map(([label, color]) => {
    const swatch = svg('svg', { width: 12, height: 12, class: 'swatch' });
    swatch.append(svg('rect', { width: 12, height: 12, fill: color }));
    return el('span', {}, swatch, ' ' + label);
  }));
}

function renderFacts(state, info) {
  const header = info.header || {};
  const rows = [
    ['head hash', el('code', { id: 'head-hash', text: info.headHash })],
    ['next seq', el('span', { id: 'next-seq', text: info.nextSeq })],
    ['version', header.version ? 'v' + header.version : '-'],
    ['created', when(typeof header.createdAt === 'number' ? header.createdAt : null)],
    ['cwd', header.cwd || '-'],
    ['snapshot', info.snapshot ? 'yes (normalized recording)' : 'no'],
  ];
  state.facts.replaceChildren(...rows.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));
}

async function verify(state, out) {
  out.className = '';
  out.textContent = 'verifying...';
  try {
    const doc = await api(state.base + '/verify');
    const report = doc.sessions[0];
    if (report.ok) {
      out.className = 'ok';
      out.textContent = `ok: ${fmt(report.events)} events, head ${report.headHash}`;
    } else {
      const f = report.faults[0];
      out.className = 'fault';
      out.textContent = `FAULT at seq ${f.seq === null ? '?' : f.seq}: ${f.kind}: ${f.message}` +
        (report.faults.length > 1 ? ` (and ${report.faults.length - 1} more)` : '');
    }
  } catch (error) {
    out.className = 'fault';
    out.textContent = 'verify failed: ' + error.message;
  }
}

// The export: the session's header line, then every event row (in the session's version,
// V3 or V4, as the server writes them), read a range at a time, offered as
// `<id>.v<version>.jsonl`.
async function exportSession(state, link) {
  const label = link.textContent;
  try {
    const info = await api(state.base);
    const parts = [JSON.stringify(info.header) + '\n'];
    let from = 0;
    while (from < info.nextSeq) {
      link.textContent = `exporting ${fmt(from)} / ${fmt(info.nextSeq)}...`;
      const page = await api(`${state.base}/events?from=${from}&to=${info.nextSeq}`);
      for (const row of page.events) parts.push(JSON.stringify(row) + '\n');
      if (page.events.length === 0) break;
      from += page.events.length;
    }
    const url = URL.createObjectURL(new Blob(parts, { type: 'application/x-ndjson' }));
    const version = (info.header && info.header.version) || 3;
    const a = el('a', { href: url, download: `${state.id}.v${version}.jsonl` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (error) {
    showError(error);
  } finally {
    link.textContent = label;
  }
}

// ---- transcript --------------------------------------------------------------------------

async function loadTranscript(state) {
  const from = state.entries.length;
  const page = await api(`${state.base}/show?from=${from}&limit=${TRANSCRIPT_PAGE_ENTRIES}`);
  if (route !== state.current) return;
  for (const entry of page.entries) {
    state.entries.push(entry);
    state.transcript.append(renderEntry(entry));
  }
  state.transcriptDone = page.page.nextFrom === null;
  state.more.hidden = state.transcriptDone;
}

function place(entry) {
  if (entry.turn === null || entry.turn === undefined) return '';
  return entry.step === null || entry.step === undefined
    ? ` (turn ${entry.turn})` : ` (turn ${entry.turn}, step ${entry.step})`;
}

function renderEntry(entry) {
  if (entry.kind !== 'message') {
    return el('div', { class: 'marker kind-' + entry.kind, 'data-seq': entry.seq, 'data-kind': entry.kind },
      `#${entry.seq} ${entry.kind}: ${entry.text}`);
  }
  const role = entry.role;
  let title = `#${entry.seq} ${role}`;
  if (entry.source && !['user', 'model', 'tool', ''].includes(entry.source)) title += ' from ' + entry.source;
  if (entry.interrupted) title += ' [interrupted]';
  title += place(entry);
  return el('div', { class: 'entry role-' + role, 'data-seq': entry.seq, 'data-kind': 'message' },
    el('div', { class: 'title', text: title }), entry.blocks.map(renderBlock));
}

function body(block) {
  return [el('pre', { text: block.text }),
    block.cutBytes > 0 ? el('div', { class: 'cut', text: `[... ${fmt(block.cutBytes)} bytes cut]` }) : null];
}

function renderBlock(block) {
  switch (block.type) {
    case 'text': return el('div', { class: 'block text' }, body(block));
    case 'reasoning':
      return el('details', { class: 'block reasoning' }, el('summary', { text: 'reasoning' }), body(block));
    case 'tool-call':
      return el('details', { class: 'block tool-call' },
        el('summary', { text: `tool call ${block.name} ${block.id}` }), body(block));
    case 'tool-result':
      return el('details', { class: 'block tool-result' },
        el('summary', { text: `tool result ${block.name || '?'} ${block.toolCallId}${block.isError ? ' [error]' : ''}` }),
        body(block));
    default:
      // Images and files: their attachment reference, never the bytes.
      return el('div', { class: 'block attachment', text: `[${block.type}] ${block.text}` });
  }
}

async function loadHistory(state) {
  const page = await api(`${state.base}/show?kinds=${HISTORY_KINDS}&limit=2000`);
  if (route !== state.current) return;
  state.history = page.entries;
  state.historyBox.replaceChildren(...page.entries.map((entry) =>
    el('li', { class: 'kind-' + entry.kind, 'data-seq': entry.seq }, `#${entry.seq} ${entry.text}`)));
  if (page.page.nextFrom !== null) {
    state.historyBox.append(el('li', { class: 'muted', text: '(the first 2000 shown)' }));
  }
  drawContext(state);
}

// ---- charts ----------------------------------------------------------------------------------

async function pages(url) {
  const rows = [];
  let from = 0;
  let last = null;
  for (;;) {
    const page = await api(`${url}${url.includes('?') ? '&' : '?'}from=${from}&limit=${CHART_PAGE_ROWS}`);
    rows.push(...page.requests);
    last = page;
    if (page.page.nextFrom === null) break;
    from = page.page.nextFrom;
  }
  return { rows, last };
}

async function loadCharts(state) {
  const [requests, tokens] = await Promise.all([
    pages(`${state.base}/requests?compact=true`), pages(`${state.base}/tokens`)]);
  if (route !== state.current) return;
  state.requests = requests.rows;
  state.tokens = tokens.rows;
  state.requestSummary = requests.last.summary;
  state.head = tokens.last.head;
  renderSummary(state);
  drawRequests(state);
  drawContext(state);
}

function renderSummary(state) {
  const s = state.requestSummary;
  const h = state.head;
  const rows = [
    ['requests', s.requests, 'summary-requests'],
    ['estimated tokens', fmt(s.estimatedTokens), 'summary-estimated'],
    ['predicted reused tokens', fmt(s.predictedReusedTokens), 'summary-reused'],
    ['predicted reuse', pct(s.predictedReuseRatio), 'summary-ratio'],
    ['prefix breaks', s.prefixBreaks, 'summary-breaks'],
    ['recorded input / cache read', `${fmt(s.recordedInputTokens)} / ${fmt(s.recordedCacheReadTokens)}`, 'summary-recorded'],
    ['head context', `system ${fmt(h.systemTokens)} + messages ${fmt(h.messageTokens)} + tools ${fmt(h.toolsTokens)} = ${fmt(h.totalTokens)}`, 'summary-head'],
  ];
  state.summary.replaceChildren(...rows.flatMap(([k, v, id]) => [el('dt', { text: k }), el('dd', { id, text: v })]));
}

const CHART_W = 1000;
const CHART_H = 200;
const PAD_L = 50;
const PAD_B = 18;

// Columns of a chart: one per request when they fit (two pixels or more each), else one per
// pixel holding the requests that fall in it (drawn at their mean, so the area stays honest).
function columns(n) {
  const width = CHART_W - PAD_L;
  const per = Math.max(1, Math.ceil(n / (width / 2)));
  const out = [];
  for (let i = 0; i < n; i += per) out.push([i, Math.min(n, i + per)]);
  return { out, w: width / Math.max(1, out.length) };
}

// Stacked columns: `series` is [[name, color, value(i)]]; `marks` are [index, color, title].
function stackedChart(box, n, series, marks, onPick, label) {
  const chart = svg('svg', { class: 'chart', viewBox: `0 0 ${CHART_W} ${CHART_H + PAD_B}`,
    preserveAspectRatio: 'none', 'data-requests': n, role: 'img', 'aria-label': label });
  const { out, w } = columns(n);
  const sums = out.map(([a, b]) => series.map(([, , value]) => {
    let sum = 0;
    for (let i = a; i < b; i++) sum += value(i);
    return sum / (b - a);
  }));
  const max = Math.max(1, ...sums.map((col) => col.reduce((x, y) => x + y, 0)));
  const scale = (CHART_H - 12) / max;
  series.forEach(([name, color], s) => {
    let d = '';
    out.forEach((_, c) => {
      const below = sums[c].slice(0, s).reduce((x, y) => x + y, 0);
      const h = sums[c][s] * scale;
      if (h <= 0) return;
      const x = PAD_L + c * w;
      const y = CHART_H - (below * scale) - h;
      d += `M${x.toFixed(2)} ${y.toFixed(2)}h${Math.max(w * 0.85, 0.6).toFixed(2)}v${h.toFixed(2)}h${(-Math.max(w * 0.85, 0.6)).toFixed(2)}Z`;
    });
    chart.append(svg('path', { d, fill: color, 'data-series': name }));
  });
  // A mark is a dashed line across the chart while there is a column per request; once
  // columns hold many requests (and marks would cover the bars) it is a tick above them.
  const per = Math.max(1, Math.ceil(n / ((CHART_W - PAD_L) / 2)));
  for (const [index, color, title] of marks) {
    const c = Math.floor(index / per);
    const x = PAD_L + c * w + w * 0.4;
    const line = svg('line', { x1: x, x2: x, y1: 0, y2: per > 1 ? 8 : CHART_H, stroke: color,
      'stroke-width': 1.2, 'stroke-dasharray': per > 1 ? '' : '3 2', 'data-index': index, class: 'mark' });
    const t = svg('title', {});
    t.textContent = title;
    line.append(t);
    chart.append(line);
  }
  chart.append(svg('line', { x1: PAD_L, x2: CHART_W, y1: CHART_H, y2: CHART_H, stroke: '#999' }));
  const top = svg('text', { x: 2, y: 12 });
  top.textContent = fmt(Math.round(max));
  const zero = svg('text', { x: 2, y: CHART_H });
  zero.textContent = '0';
  const count = svg('text', { x: CHART_W - 120, y: CHART_H + PAD_B - 4 });
  count.textContent = `${fmt(n)} requests`;
  chart.append(top, zero, count);
  chart.addEventListener('click', (event) => {
    const box2 = chart.getBoundingClientRect();
    const x = ((event.clientX - box2.left) / box2.width) * CHART_W;
    const c = Math.floor((x - PAD_L) / w);
    if (c < 0 || c >= out.length) return;
    onPick(out[c][0]);
  });
  box.replaceChildren(chart);
}

function drawRequests(state) {
  const rows = state.requests;
  if (rows.length === 0) { state.requestsChart.replaceChildren(el('p', { class: 'muted', text: 'No requests.' })); return; }
  const reused = (i) => rows[i].prefix.estimatedTokens;
  const fresh = (i) => rows[i].estimatedTokens - rows[i].prefix.estimatedTokens;
  const marks = rows.filter((r) => r.prefix.brokenBy).map((r) =>
    [r.index, BREAK_COLORS[r.prefix.brokenBy.kind] || '#c23b3b',
      `request ${r.index}: prefix broken by ${r.prefix.brokenBy.kind} at seq ${r.prefix.brokenBy.seq}`]);
  stackedChart(state.requestsChart, rows.length,
    [['reused', COLORS['reused'], reused], ['new', COLORS['new'], fresh]], marks,
    (i) => openRequest(state, i), 'requests chart');
}

function drawContext(state) {
  const rows = state.tokens;
  if (rows.length === 0) { state.contextChart.replaceChildren(el('p', { class: 'muted', text: 'No requests.' })); return; }
  // A compaction is marked at the first request sent after it began.
  const marks = [];
  let r = 0;
  for (const entry of state.history.filter((e) => e.kind === 'compaction')) {
    while (r < rows.length && rows[r].seq < entry.seq) r++;
    if (r < rows.length) marks.push([r, COLORS['compaction'], `compaction at seq ${entry.seq}: ${entry.text}`]);
  }
  stackedChart(state.contextChart, rows.length,
    [['system', COLORS['system'], (i) => rows[i].systemTokens],
      ['messages', COLORS['messages'], (i) => rows[i].messageTokens],
      ['tools', COLORS['tools'], (i) => rows[i].toolsTokens]], marks,
    (i) => openRequest(state, i), 'context chart');
}

// One request's numbers and its messages, the body read on demand.
async function openRequest(state, index) {
  const row = state.requests[index];
  const tokens = state.tokens[index];
  state.selected = index;
  const broken = row && row.prefix.brokenBy ? `${row.prefix.brokenBy.kind} at seq ${row.prefix.brokenBy.seq}` : 'no';
  const facts = el('dl', { class: 'facts' },
    ...[['request', index, 'detail-index'], ['seq', row ? row.seq : '-', 'detail-seq'],
      ['turn.step', row ? `${row.turn}.${row.step}` : '-', 'detail-turn'],
      ['estimated tokens', row ? row.estimatedTokens : '-', 'detail-estimated'],
      ['reused from the previous prefix', row ? row.prefix.estimatedTokens : '-', 'detail-reused'],
      ['new', row ? row.estimatedTokens - row.prefix.estimatedTokens : '-', 'detail-new'],
      ['prefix broken by', broken, 'detail-broken'],
      ['system / messages / tools', tokens ? `${tokens.systemTokens} / ${tokens.messageTokens} / ${tokens.toolsTokens}` : '-', 'detail-context'],
    ].flatMap(([k, v, id]) => [el('dt', { text: k }), el('dd', { id, text: v })]));
  const messages = el('div', { id: 'detail-messages', class: 'muted', text: 'loading messages...' });
  state.detail.replaceChildren(facts, messages);
  try {
    const doc = await api(`${state.base}/requests?bodies=true&from=${index}&limit=1`);
    if (state.selected !== index) return;
    const full = doc.requests[0];
    messages.className = '';
    messages.replaceChildren(...(full.messages || []).map((m, i) =>
      el('details', { class: 'message', open: i === full.messages.length - 1 },
        el('summary', { text: `${i}: ${m.role}` }), el('pre', { text: messageText(m) }))));
    messages.setAttribute('data-count', (full.messages || []).length);
  } catch (error) {
    messages.className = 'fault';
    messages.textContent = 'cannot read the request: ' + error.message;
  }
}

function messageText(message) {
  if (typeof message.content === 'string') return message.content;
  if (!Array.isArray(message.content)) return JSON.stringify(message, null, 1);
  return message.content.map((block) => {
    if (block.type === 'text' || block.type === 'thinking' || block.type === 'reasoning') {
      return block.text || block.thinking || '';
    }
    if (block.type === 'image' || block.type === 'file') return `[${block.type} attachment]`;
    return JSON.stringify(block);
  }).join('\n');
}

// ---- live ---------------------------------------------------------------------------------

// Follows the session's tail (SSE read through fetch, which can send the token header) and
// refreshes the head, the charts, the history and the transcript's end a moment after events
// arrive.
function follow(state) {
  const abort = new AbortController();
  liveAbort = abort;
  // One refresh at a time: events that arrive during one schedule the next, so a session
  // appended faster than it can be folded costs one fold after another, not a pile of them.
  let timer = null;
  let running = false;
  let pending = false;
  const refresh = async () => {
    timer = null;
    if (running) { pending = true; return; }
    running = true;
    try {
      await refreshLive(state);
    } catch (error) {
      if (route === state.current) showError(error);
    } finally {
      running = false;
    }
    if (pending && !abort.signal.aborted) {
      pending = false;
      timer = setTimeout(refresh, LIVE_REFRESH_MS);
    }
  };
  const run = async () => {
    while (!abort.signal.aborted) {
      try {
        const response = await fetch(`${state.base}/tail?from=${state.nextSeq}`,
          { headers: headers(), signal: abort.signal });
        if (response.status === 401) { await api(state.base); continue; }
        if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
        document.getElementById('live').hidden = false;
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const message = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const fields = {};
            for (const line of message.split('\n')) {
              const colon = line.indexOf(':');
              if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 1).replace(/^ /, '');
            }
            if (fields.event === 'event' && fields.id !== undefined) {
              state.nextSeq = Math.max(state.nextSeq, Number(fields.id) + 1);
              if (!timer) timer = setTimeout(refresh, LIVE_REFRESH_MS);
            } else if (fields.event === 'error') {
              throw new ApiError(500, JSON.parse(fields.data || 'null'));
            }
          }
        }
      } catch (error) {
        if (abort.signal.aborted) return;
        showError(error);
      }
      document.getElementById('live').hidden = true;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  };
  run();
}

async function refreshLive(state) {
  const info = await api(state.base);
  if (route !== state.current) return;
  renderFacts(state, info);
  if (state.transcriptDone) {
    // The last entry shown may have been completed since (a compaction's end): read it again.
    const last = state.transcript.lastElementChild;
    if (last) { last.remove(); state.entries.pop(); }
    await loadTranscript(state);
  }
  await Promise.all([loadCharts(state), loadHistory(state)]);
  if (route !== state.current) return;
  document.getElementById('view').setAttribute('data-live-seq', info.nextSeq);
}

// ---- start ----------------------------------------------------------------------------------

window.addEventListener('hashchange', render);
window.addEventListener('DOMContentLoaded', () => {
  setupToken();
  render();
});
