// gpumesh console: reads the control API's read-only views (GET /v1/...)
// from the listener that served this page and draws them. Everything a
// view says is put in the page as text (never as markup), and every figure
// carries a data-field attribute naming its JSON field.
'use strict';

(function () {
  const params = new URLSearchParams(location.search);
  // The listener's token (metrics_token_file), when it has one: sent with
  // every call and kept in the links between pages.
  const token = params.get('token');
  const REFRESH_MS = 10000;

  function withToken(href) {
    if (!token) return href;
    return href + (href.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(token);
  }

  function headers() {
    return token ? { Authorization: 'Bearer ' + token } : {};
  }

  async function failure(path, r) {
    let msg = r.status + ' ' + r.statusText;
    try {
      const body = await r.json();
      if (body && body.error) msg = body.error;
    } catch (e) { /* not JSON */ }
    return new Error(path + ': ' + msg);
  }

  async function get(path) {
    const r = await fetch(path, { headers: headers(), cache: 'no-store' });
    if (!r.ok) throw await failure(path, r);
    return r.json();
  }

  // el builds an element: attrs are attributes ("field" is data-field),
  // children are nodes or strings (as text).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      e.setAttribute(k === 'field' ? 'data-field' : k, String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  function td(field, text, cls) { return el('td', { field: field, class: cls }, text); }
  function num(field, text) { return td(field, text, 'num'); }

  function link(href, text) { return el('a', { href: withToken(href) }, text); }

  function rows(table, items, row) {
    const body = table.tBodies[0];
    body.replaceChildren(...items.map(row));
    if (items.length === 0) {
      const n = table.tHead ? table.tHead.rows[0].cells.length : 1;
      body.append(el('tr', { class: 'none' }, el('td', { colspan: n }, 'none')));
    }
  }

  // kv fills a two-column table: [label, field, value] rows.
  function kv(table, pairs) {
    table.replaceChildren(...pairs.map(([label, field, value]) =>
      el('tr', {}, el('th', {}, label), el('td', { field: field }, value))));
  }

  const $ = (id) => document.getElementById(id);

  // Formats; tests format the API's figures the same way.
  const usd = (v) => Number(v || 0).toFixed(4);
  const pct = (v) => (100 * Number(v || 0)).toFixed(1);
  const fixed = (v, n) => Number(v || 0).toFixed(n);
  const dash = (v) => (v === undefined || v === null || v === '' ? '-' : String(v));
  function time(t) {
    if (!t || t.startsWith('0001-')) return '-';
    return t.replace('T', ' ').replace(/\.\d+/, '');
  }
  function peer(id) {
    if (!id) return '-';
    return el('code', { title: id, 'data-peer': id }, id.length > 16 ? '…' + id.slice(-10) : id);
  }

  function showError(err) {
    const p = $('error');
    if (!err) {
      p.hidden = true;
      p.textContent = '';
      return;
    }
    p.hidden = false;
    p.textContent = err.message || String(err);
  }

  // every runs render now and then every REFRESH_MS; the body says when
  // the first pass is done (data-ready) and how many passes ran.
  function every(render) {
    const pass = async () => {
      try {
        await render();
        showError(null);
      } catch (err) {
        showError(err);
      }
      document.body.dataset.passes = String(Number(document.body.dataset.passes || 0) + 1);
      document.body.dataset.ready = '1';
      setTimeout(pass, REFRESH_MS);
    };
    pass();
  }

  // chart draws series of samples (objects with a "time") as SVG lines
  // over time into box, with a legend of each series' last value
  // (data-field "history.<key>").
  function chart(box, samples, series) {
    const W = 640, H = 180, L = 56, R = 12, T = 12, B = 24;
    const ns = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    svg.setAttribute('width', W);
    svg.setAttribute('height', H);
    svg.setAttribute('data-samples', samples.length);
    const s = (tag, attrs, text) => {
      const e = document.createElementNS(ns, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (text !== undefined) e.textContent = text;
      svg.append(e);
      return e;
    };
    const legend = el('p', { class: 'legend' });
    if (samples.length === 0) {
      s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' }, 'no samples yet');
      box.replaceChildren(svg, legend);
      return;
    }
    const ts = samples.map((p) => Date.parse(p.time));
    const t0 = Math.min(...ts), t1 = Math.max(...ts);
    const value = (p, sr) => Number(p[sr.key] || 0) * (sr.scale || 1);
    let top = 0;
    for (const sr of series) for (const p of samples) top = Math.max(top, value(p, sr));
    if (top <= 0) top = 1;
    const x = (t) => (t1 === t0 ? L + (W - L - R) / 2 : L + ((t - t0) / (t1 - t0)) * (W - L - R));
    const y = (v) => T + (1 - v / top) * (H - T - B);
    s('line', { x1: L, y1: T, x2: L, y2: H - B, class: 'axis' });
    s('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, class: 'axis' });
    const fmt = series[0].fmt || ((v) => v.toFixed(2));
    s('text', { x: L - 4, y: T + 4, 'text-anchor': 'end' }, fmt(top));
    s('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, fmt(0));
    const hhmm = (t) => new Date(t).toISOString().slice(11, 16) + ' UTC';
    s('text', { x: L, y: H - 6 }, hhmm(t0));
    if (t1 !== t0) s('text', { x: W - R, y: H - 6, 'text-anchor': 'end' }, hhmm(t1));
    series.forEach((sr, i) => {
      const pts = samples.map((p, j) => `${x(ts[j]).toFixed(1)},${y(value(p, sr)).toFixed(1)}`);
      s('polyline', { points: pts.join(' '), class: 's' + i, 'data-series': sr.key });
      if (samples.length === 1) {
        const [cx, cy] = pts[0].split(',');
        s('circle', { cx: cx, cy: cy, r: 3, class: 'legend' + i });
      }
      const last = samples[samples.length - 1];
      const f = sr.fmt || ((v) => v.toFixed(2));
      legend.append(el('span', { class: 'legend' + i }, '■ '), sr.label + ' now: ',
        el('span', { field: 'history.' + sr.key }, f(value(last, sr))), sr.unit ? ' ' + sr.unit : '', '   ');
    });
    box.replaceChildren(svg, legend);
  }

  const pages = {};

  pages.overview = async function () {
    const [st, peers] = await Promise.all([get('/v1/status'), get('/v1/peers')]);
    $('peer-id').textContent = st.peer_id;
    const gpus = st.gpus || [];
    kv($('status'), [
      ['version', 'version', st.version],
      ['region', 'region', dash(st.region)],
      ['peers', 'peers', st.peers],
      ['up', 'uptime', st.uptime],
      ['reachability', 'reachability', st.reachability],
      ['sells GPU time', 'provider', st.provider ? 'yes' : 'no'],
      ['draining', 'draining', st.draining ? 'yes' : 'no'],
      ['GPUs', 'gpus', gpus.length ? gpus.length + ' (' + gpus.map((g) => g.model).join(', ') + ')' : '0'],
      ['executor', 'executor', dash(st.executor)],
      ['addresses', 'addrs', (st.addrs || []).join(' ')],
    ]);
    rows($('peers'), peers, (p) => el('tr', { 'data-peer': p.id },
      td('id', p.id), td('addrs', (p.addrs || []).join(' '))));
  };

  pages.providers = async function () {
    const ps = await get('/v1/providers');
    rows($('providers'), ps, (p) => {
      const models = {};
      for (const g of p.gpus || []) models[g.model] = (models[g.model] || 0) + 1;
      return el('tr', { 'data-provider': p.peer },
        el('td', {}, peer(p.peer)),
        td('region', dash(p.region)),
        td('gpus', Object.entries(models).map(([m, n]) => n + '× ' + m).join(', ')),
        num('free_gpus', p.free_gpus === undefined || p.free_gpus === null ? '-' : p.free_gpus),
        num('price_now', usd(p.price_now)),
        num('reliability', fixed(p.reliability, 3)),
        td('expires_at', time(p.expires_at)));
    });
  };

  pages.jobs = async function () {
    const js = await get('/v1/jobs');
    rows($('jobs'), js, (v) => el('tr', { 'data-job': v.job.id },
      el('td', {}, link('job.html?id=' + encodeURIComponent(v.job.id), v.job.id)),
      td('state', v.state),
      td('run', dash(v.run)),
      el('td', {}, v.lease ? peer(v.lease.provider) : '-'),
      num('lease.price', v.lease ? usd(v.lease.price) : '-'),
      num('cost_usd', usd(v.cost_usd)),
      td('posted_at', time(v.posted_at))));
  };

  // attempts are a job's leases in the order they were awarded, as `job
  // status` lists them: its history, then the current lease.
  function attempts(v) {
    const recs = (v.history || []).slice();
    if (v.lease) {
      recs.push({ lease: v.lease, run: v.run, fault: v.fault, detail: v.detail, receipt: !!v.receipt,
        cost_usd: v.receipt ? v.receipt.amount : 0 });
    }
    return recs;
  }

  // The words for auction.Explain's rules (auction/score.go).
  const ruleWords = {
    no_bids: 'no bid came',
    none_eligible: 'every bid was rejected',
    not_awarded: 'there are eligible bids, but none holds the lease',
    only_eligible: 'it was the only eligible bid',
    best_score: 'it had the best score',
    tie_break: 'it tied with the runner-up and won on the tie-break',
    passed_over: 'the bids ranked ahead of it did not get the lease',
    unranked: 'its lease comes from an earlier auction than these bids',
  };

  function explain(b) {
    const e = b.explain || {};
    const why = ruleWords[e.rule] || e.rule || '-';
    const p = $('explain');
    if (e.winner) {
      p.replaceChildren('Winner ', peer(e.winner), ` (rank ${e.rank}): score ${fixed(e.score, 4)} = price ${fixed(e.price, 4)} / reliability ${fixed(e.reliability, 2)}, because ${why}.`);
    } else {
      p.replaceChildren('No winner: ' + why + '.');
    }
    const passed = (e.passed || []).map((x) => x.provider.slice(-10) + ': ' + x.reason).join('; ');
    kv($('explanation'), [
      ['winner', 'explain.winner', e.winner || '-'],
      ['rank', 'explain.rank', dash(e.rank)],
      ['score', 'explain.score', fixed(e.score, 4)],
      ['rule', 'explain.rule', dash(e.rule)],
      ['runner-up', 'explain.runner_up', dash(e.runner_up)],
      ['runner-up score', 'explain.runner_up_score', e.runner_up ? fixed(e.runner_up_score, 4) : '-'],
      ['tie-break', 'explain.tie_break', dash(e.tie_break)],
      ['passed over', 'explain.passed', dash(passed)],
      ['declined to bid', 'declines', Object.entries(b.declines || {}).map(([k, n]) => n + ' ' + k).join(', ') || '-'],
    ]);
    let rank = 0;
    rows($('bids'), b.bids || [], (r) => {
      const eligible = !r.Rejected;
      if (eligible) rank++;
      const won = eligible && r.Bid.provider === e.winner;
      return el('tr', { 'data-bid': r.Bid.provider, 'data-won': won ? '1' : null },
        td('rank', eligible ? rank + (won ? ' (lease)' : '') : '-'),
        el('td', {}, peer(r.Bid.provider)),
        num('price', usd(r.Bid.price)),
        num('reliability', fixed(r.Reliability, 3)),
        num('score', eligible ? fixed(r.Score, 4) : '-'),
        td('rejected', dash(r.Rejected)));
    });
  }

  // streamLog appends the job's log to the page as it arrives (the logs
  // endpoint with follow streams until the run ends); a call that fails
  // (no lease yet, provider unreachable) is retried, from the start.
  async function streamLog(id) {
    const pre = $('log'), errp = $('log-error');
    const retry = () => setTimeout(() => streamLog(id), REFRESH_MS);
    const path = '/v1/jobs/' + encodeURIComponent(id) + '/logs';
    let r;
    try {
      r = await fetch(path + '?follow=1', { headers: headers(), cache: 'no-store' });
      if (!r.ok) throw await failure(path, r);
    } catch (err) {
      errp.hidden = false;
      errp.textContent = err.message;
      document.body.dataset.log = 'error';
      if (!(r && r.status === 403)) retry();
      return;
    }
    errp.hidden = true;
    pre.replaceChildren();
    document.body.dataset.log = 'streaming';
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.append(dec.decode(value, { stream: true }));
        if (atEnd) pre.scrollTop = pre.scrollHeight;
      }
      pre.append(dec.decode());
      document.body.dataset.log = 'ended';
    } catch (err) {
      errp.hidden = false;
      errp.textContent = path + ': ' + err.message;
      document.body.dataset.log = 'error';
      retry();
    }
  }

  pages.job = async function () {
    const id = params.get('id');
    if (!id) throw new Error('no job: open job.html?id=JOB');
    document.title = 'gpumesh · job ' + id;
    const base = '/v1/jobs/' + encodeURIComponent(id);
    const [v, b] = await Promise.all([get(base), get(base + '/bids')]);
    $('job-id').textContent = v.job.id;
    const l = v.lease;
    kv($('job'), [
      ['state', 'state', v.state],
      ['run', 'run', dash(v.run)],
      ['exit code', 'exit_code', dash(v.exit_code)],
      ['fault', 'fault', dash(v.fault)],
      ['detail', 'detail', dash(v.detail)],
      ['provider', 'lease.provider', l ? l.provider : '-'],
      ['lease', 'lease.id', l ? l.id : '-'],
      ['price (USD/GPU-h)', 'lease.price', l ? usd(l.price) : '-'],
      ['tier', 'job.tier', v.job.tier],
      ['GPUs', 'job.gpu_count', v.job.gpu_count],
      ['posted', 'posted_at', time(v.posted_at)],
      ['started', 'started', time(v.started)],
      ['ended', 'ended', time(v.ended)],
      ['cost (USD)', 'cost_usd', usd(v.cost_usd)],
      ['evidence', 'evidence', dash(v.evidence)],
      ['reasons', 'reasons', (v.reasons || []).join('; ') || '-'],
    ]);
    const recs = attempts(v);
    rows($('attempts'), recs, (r, i) => el('tr', { 'data-attempt': i + 1 },
      td('attempt', i + 1),
      el('td', {}, peer(r.lease.provider)),
      td('run', r.run || 'pending'),
      td('fault', dash(r.fault)),
      num('cost_usd', usd(r.cost_usd) + (r.receipt ? '' : ' (unsettled)')),
      td('detail', dash(r.detail))));
    explain(b);
    if (!document.body.dataset.log) {
      document.body.dataset.log = 'opening';
      streamLog(id);
    }
  };

  pages.services = async function () {
    const vs = await get('/v1/services');
    rows($('services'), vs, (v) => el('tr', { 'data-service': v.id },
      el('td', {}, link('service.html?id=' + encodeURIComponent(v.id), v.id)),
      num('desired', v.desired),
      num('ready', v.ready),
      num('replicas', (v.replicas || []).length),
      num('totals.requests', v.totals.requests),
      num('totals.p50_ms', fixed(v.totals.p50_ms, 1)),
      num('totals.p95_ms', fixed(v.totals.p95_ms, 1)),
      td('gateway', v.gateway)));
  };

  pages.service = async function () {
    const id = params.get('id');
    if (!id) throw new Error('no service: open service.html?id=SERVICE');
    document.title = 'gpumesh · service ' + id;
    const base = '/v1/services/' + encodeURIComponent(id);
    const [v, h] = await Promise.all([get(base), get(base + '/history')]);
    $('service-id').textContent = v.id;
    const t = v.totals;
    kv($('service'), [
      ['replicas wanted', 'desired', v.desired],
      ['ready', 'ready', v.ready],
      ['bounds', 'spec.replicas', v.spec.replicas + '..' + v.spec.max_replicas],
      ['stopped', 'stopped', v.stopped ? 'yes' : 'no'],
      ['gateway', 'gateway', v.gateway],
      ['requests', 'totals.requests', t.requests],
      ['errors', 'totals.errors', t.errors],
      ['requests/s (10 s)', 'totals.rate_per_sec', fixed(t.rate_per_sec, 2)],
      ['error rate (1 min)', 'totals.error_rate', pct(t.error_rate) + ' %'],
      ['p50 (ms, 1 min)', 'totals.p50_ms', fixed(t.p50_ms, 1)],
      ['p95 (ms, 1 min)', 'totals.p95_ms', fixed(t.p95_ms, 1)],
      ['p99 (ms, 1 min)', 'totals.p99_ms', fixed(t.p99_ms, 1)],
      ['retries', 'retries', v.retries],
    ]);
    chart($('latency'), h.samples || [], [
      { key: 'p50_ms', label: 'p50', unit: 'ms', fmt: (x) => x.toFixed(1) },
      { key: 'p95_ms', label: 'p95', unit: 'ms', fmt: (x) => x.toFixed(1) },
    ]);
    rows($('replicas'), v.replicas || [], (r) => el('tr', { 'data-replica': r.job_id },
      td('job_id', r.job_id),
      el('td', {}, peer(r.provider)),
      td('state', r.state + (r.renewing ? ' (renewing)' : '')),
      td('lease_end', time(r.lease_end)),
      num('requests', r.requests),
      num('p50_ms', fixed(r.p50_ms, 1)),
      num('p95_ms', fixed(r.p95_ms, 1)),
      td('last_error', dash(r.last_error))));
    rows($('events'), (v.events || []).slice().reverse(), (e) => el('tr', {},
      td('time', time(e.time)), td('what', e.what)));
  };

  pages.provider = async function () {
    let st;
    try {
      st = await get('/v1/provider/stats');
    } catch (err) {
      $('provider').replaceChildren(el('tr', {}, el('td', { field: 'enabled' }, 'This node does not sell GPU time.')));
      throw err;
    }
    const h = await get('/v1/provider/history');
    kv($('provider'), [
      ['GPUs', 'gpus', st.gpus],
      ['occupancy %', 'occupancy', pct(st.occupancy)],
      ['running leases', 'running', (st.running || []).length],
      ['calls heard', 'calls', st.calls],
      ['bids', 'bids', st.bids],
      ['won', 'won', st.won],
      ['lost', 'lost', st.lost],
      ['earnings booked (USD)', 'earnings_usd', usd(st.earnings_usd)],
      ['earnings settled (USD)', 'ledger_earned_usd', usd(st.ledger_earned_usd)],
      ['mean price (USD/GPU-h)', 'usd_per_gpu_hour', usd(st.usd_per_gpu_hour)],
      ['GPU utilisation %', 'utilization_pct', fixed(st.utilization_pct, 1)],
      ['reputation', 'reputation.score', fixed(st.reputation.score, 3)],
      ['draining', 'draining', st.draining ? 'yes' : 'no'],
    ]);
    chart($('earnings'), h.samples || [], [
      { key: 'ledger_earned_usd', label: 'settled', unit: 'USD', fmt: usd },
      { key: 'earnings_usd', label: 'booked', unit: 'USD', fmt: usd },
    ]);
    chart($('occupancy'), h.samples || [], [
      { key: 'occupancy', label: 'occupancy', unit: '%', scale: 100, fmt: (x) => x.toFixed(1) },
    ]);
    const leases = (st.running || []).concat(st.recent || []);
    rows($('leases'), leases, (p) => el('tr', { 'data-lease': p.lease.id },
      td('lease.id', p.lease.id),
      td('lease.job_id', p.lease.job_id),
      td('run', dash(p.run)),
      num('lease.price', usd(p.lease.price)),
      td('started', time(p.started)),
      td('ended', time(p.ended))));
  };

  document.addEventListener('DOMContentLoaded', () => {
    const page = document.body.dataset.page;
    for (const a of document.querySelectorAll('nav a')) {
      const href = a.getAttribute('href');
      const here = location.pathname.endsWith('/' + href) || (href === './' && location.pathname.endsWith('/'));
      if (here) a.setAttribute('aria-current', 'page');
      a.setAttribute('href', withToken(href));
    }
    if (pages[page]) every(pages[page]);
  });
})();
