// levee's dashboard: renders the snapshots of GET /api/events
// (docs/admin.md), one a second. Plain JavaScript, no build step.
//
// Everything the server sends reaches the page through textContent or an
// element property, never as markup: app and client names are chosen by
// whoever sends requests. The page's Content-Security-Policy allows no
// inline script and no eval, so a mistake here still runs nothing.
(function () {
  'use strict';

  const HISTORY = 300;    // points kept per series: 5 minutes at one a second
  const STALE_MS = 5000;  // no snapshot for this long: shown disconnected
  const RETRY_MS = 5000;  // a refused stream (503, 404) is tried again after this
  const BYS = ['requests', 'rejected', 'bytes', 'items'];
  const WINDOWS = ['10s', '1m', '10m'];
  const PALETTE = ['#d62728', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#bcbd22', '#17becf', '#7f7f7f'];

  const $ = (id) => document.getElementById(id);

  const query = new URLSearchParams(location.search);
  const state = {
    app: query.get('app') || '',
    by: BYS.includes(query.get('by')) ? query.get('by') : 'requests',
    window: WINDOWS.includes(query.get('window')) ? query.get('window') : '10s',
    es: null,          // the open EventSource
    retry: 0,          // timer of a reconnect after a refused stream
    lastEvent: 0,      // Date.now() of the last snapshot
    hist: newHistory(),
    charts: {},        // uPlot instances: traffic, wait
    trafficKey: null,  // the traffic chart's series, to know when to rebuild it
    appNames: '',      // the picker's options, to rebuild it only on change
    colors: new Map(), // reason → stroke, stable while the page lives
  };

  // ---- formatting ----

  function fmtNum(v) {
    if (v == null || !isFinite(v)) return '–';
    const a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    if (a >= 100 || Number.isInteger(v)) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }
  function fmtBytes(v) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + ' ' + units[i];
  }
  function fmtMs(v) { return v == null ? '–' : fmtNum(v) + ' ms'; }
  function fmtPct(v) { return (100 * (v || 0)).toFixed(1) + '%'; }
  function sum(m) { let s = 0; for (const k in m) s += m[k]; return s; }
  function colorOf(reason) {
    if (!state.colors.has(reason)) state.colors.set(reason, PALETTE[state.colors.size % PALETTE.length]);
    return state.colors.get(reason);
  }

  // ---- DOM helpers: text only ----

  function text(id, s) { $(id).textContent = s; }
  function el(tag, cls, s) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (s != null) e.textContent = s;
    return e;
  }
  function row(cells) {
    const tr = document.createElement('tr');
    for (const c of cells) tr.appendChild(c);
    return tr;
  }
  function bar(share, title) {
    const td = el('td', 'bar-col');
    const b = el('div', 'bar');
    const fill = el('div', 'fill');
    fill.style.width = Math.max(0, Math.min(100, 100 * (share || 0))) + '%'; // CSSOM: allowed by the CSP
    b.appendChild(fill);
    td.appendChild(b);
    td.appendChild(el('span', 'bar-label', title));
    return td;
  }

  // ---- the stream ----

  function streamURL() {
    const p = new URLSearchParams();
    if (state.app) {
      p.set('app', state.app);
      p.set('by', state.by);
      p.set('window', state.window);
    }
    const q = p.toString();
    return '/api/events' + (q ? '?' + q : '');
  }

  function connect() {
    clearTimeout(state.retry);
    if (state.es) state.es.close();
    setStatus('connecting', 'connecting…');
    const es = new EventSource(streamURL());
    state.es = es;
    es.addEventListener('snapshot', (m) => {
      if (es !== state.es) return;
      let ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      state.lastEvent = Date.now();
      setStatus('live', 'live');
      render(ev);
    });
    es.onerror = () => {
      if (es !== state.es) return;
      if (es.readyState === EventSource.CLOSED) {
        // Refused (too many streams, an unknown app, a bad parameter):
        // EventSource gives up, so try again later and say why if we can.
        setStatus('disconnected', 'disconnected: stream refused, retrying in ' + RETRY_MS / 1000 + ' s');
        explainRefusal();
        state.retry = setTimeout(connect, RETRY_MS);
      } else {
        setStatus('disconnected', 'disconnected: reconnecting…');
      }
    };
  }

  // explainRefusal asks the JSON API what it thinks of the selected app.
  function explainRefusal() {
    if (!state.app) return;
    fetch('/api/apps/' + encodeURIComponent(state.app), { cache: 'no-store' })
      .then((r) => r.ok ? null : r.json().then((j) => j.error || ('HTTP ' + r.status)))
      .then((err) => { if (err) showMissing(err); })
      .catch(() => {});
  }

  function setStatus(cls, label) {
    const s = $('status');
    s.className = 'status ' + cls;
    s.textContent = label;
    document.body.classList.toggle('offline', cls === 'disconnected');
  }

  setInterval(() => {
    if (state.lastEvent && Date.now() - state.lastEvent > STALE_MS && $('status').classList.contains('live')) {
      setStatus('disconnected', 'disconnected: no data for ' + Math.round((Date.now() - state.lastEvent) / 1000) + ' s');
    }
  }, 1000);

  // ---- rendering ----

  function render(ev) {
    renderInstance(ev.instance || {}, ev.total);
    renderPicker(ev.apps || []);
    text('updated', 'updated ' + new Date(ev.time).toLocaleTimeString());
    $('overview').hidden = !!state.app;
    $('detail').hidden = !state.app;
    if (!state.app) {
      renderOverview(ev.apps || [], ev.total);
      return;
    }
    if (!ev.app) {
      showMissing('app ' + JSON.stringify(state.app) + ' is not serving now');
      return;
    }
    $('app-missing').hidden = true;
    renderApp(ev.app);
    pushHistory(state.hist, ev);
    renderCharts();
    renderTop(ev.top, ev.app.top_k);
  }

  function showMissing(msg) {
    $('detail').hidden = false;
    $('overview').hidden = true;
    const m = $('app-missing');
    m.textContent = msg;
    m.hidden = false;
  }

  function renderInstance(i, total) {
    text('i-role', i.role || '–');
    $('i-role').classList.toggle('warn', i.role !== 'active');
    text('i-overload', fmtNum(i.overload_factor));
    $('i-overload').classList.toggle('warn', i.overload_factor < 1);
    text('i-strict', fmtNum(i.strict_factor));
    $('i-strict').classList.toggle('warn', i.strict_factor < 1);
    let cluster = 'off';
    if (i.cluster) {
      cluster = (i.cluster.degraded ? 'degraded (limits split locally)' : i.cluster.reachable ? 'ok' : 'unreachable') +
        ', ' + i.cluster.live_instances + ' live';
    }
    text('i-cluster', cluster);
    $('i-cluster').classList.toggle('warn', !!i.cluster && (i.cluster.degraded || !i.cluster.reachable));
    const b = i.build || {};
    text('i-version', (b.version || '–') + (b.revision ? ' (' + b.revision.slice(0, 12) + (b.modified ? ', modified' : '') + ')' : ''));
    const cks = i.config_checksum || '';
    text('i-config', (cks ? cks.slice(0, 19) + '…' : '–') +
      (i.config_loaded ? ' loaded ' + new Date(i.config_loaded).toLocaleString() : ''));
    $('i-config').title = cks + (i.config_file ? '\n' + i.config_file : '');
    text('i-apps', String(total != null ? total : i.apps));
  }

  function renderPicker(apps) {
    const names = apps.map((a) => a.name);
    if (state.app && !names.includes(state.app)) names.push(state.app); // not among the busiest
    const key = JSON.stringify(names);
    if (key === state.appNames) return;
    state.appNames = key;
    const p = $('app-picker');
    while (p.options.length > 1) p.remove(1);
    for (const n of names) {
      const o = document.createElement('option');
      o.value = n;
      o.textContent = n;
      p.appendChild(o);
    }
    p.value = state.app;
  }

  function renderOverview(apps, total) {
    const tb = $('apps').tBodies[0];
    tb.replaceChildren();
    for (const a of apps) {
      const name = el('td');
      const link = el('a', null, a.name);
      link.href = '?' + new URLSearchParams({ app: a.name }).toString();
      link.addEventListener('click', (e) => { e.preventDefault(); selectApp(a.name); });
      name.appendChild(link);
      const refused = sum(a.rejected_per_second);
      tb.appendChild(row([
        name,
        el('td', 'num', fmtNum(a.requests_per_second)),
        el('td', 'num' + (refused > 0 ? ' warn' : ''), fmtNum(refused)),
        el('td', 'num', a.inflight + ' / ' + a.concurrency_limit),
        el('td', 'num', String(a.queued)),
        el('td', 'num', fmtNum(a.queue_wait_mean_ms) + ' / ' + fmtMs(a.queue_wait_max_ms)),
        el('td', 'num' + (a.backends_healthy < a.backends_total ? ' warn' : ''), a.backends_healthy + ' / ' + a.backends_total),
        el('td', 'num' + (a.imbalance_alert ? ' warn' : ''), a.imbalance ? a.imbalance.toFixed(2) : '–'),
      ]));
    }
    text('apps-more', total > apps.length ? 'the ' + apps.length + ' busiest of ' + total + ' apps' : '');
  }

  function renderApp(a) {
    const refused = sum(a.rejected_per_second);
    text('t-rps', fmtNum(a.requests_per_second));
    text('t-refused', fmtNum(refused));
    $('t-refused').classList.toggle('warn', refused > 0);
    text('t-inflight', a.inflight + ' / ' + a.concurrency_limit);
    text('t-queued', String(a.queued));
    text('t-wait', fmtNum(a.queue_wait_mean_ms) + ' / ' + fmtMs(a.queue_wait_max_ms));
    text('t-rate', a.rate_limit ? fmtNum(a.rate_limit) + '/s' : 'off');
    const why = $('why');
    why.replaceChildren(...(a.why || []).map((s) => el('li', null, s)));

    const im = $('imbalance');
    im.textContent = a.imbalance ? 'imbalance ' + a.imbalance.toFixed(2) + (a.imbalance_alert ? ' — alert' : '') : 'imbalance: no data';
    im.className = 'badge' + (a.imbalance_alert ? ' alert' : '');
    const tb = $('backends').tBodies[0];
    tb.replaceChildren();
    for (const b of a.backends || []) {
      const addr = el('td', 'addr', b.addr);
      if (b.weight && b.weight !== 1) addr.appendChild(el('span', 'muted', ' ×' + b.weight));
      tb.appendChild(row([
        addr,
        bar(b.share, fmtPct(b.share)),
        el('td', b.healthy ? 'ok' : 'warn', b.healthy ? 'healthy' : 'down'),
        el('td', 'num', String(b.inflight)),
        el('td', 'num', fmtMs(b.latency_ns / 1e6)),
        el('td', 'num', fmtNum(b.requests)),
        el('td', 'num', b.conns ? b.conns.active + ' / ' + b.conns.idle : '–'),
        el('td', 'num', b.conns && b.conns.exchanges ? fmtPct(b.conns.reuse_ratio) : '–'),
      ]));
    }
  }

  function renderTop(top, topK) {
    const tb = $('top').tBodies[0];
    tb.replaceChildren();
    const clients = (top && top.clients) || [];
    const fmt = state.by === 'bytes' ? fmtBytes : fmtNum;
    clients.forEach((c, i) => {
      tb.appendChild(row([
        el('td', 'num', String(i + 1)),
        el('td', 'client', c.client),
        el('td', 'num', fmt(c.count)),
        bar(c.share, fmtPct(c.share)),
        el('td', 'num', c.error ? fmt(c.error) : '0'),
      ]));
    });
    const empty = $('top-empty');
    empty.hidden = clients.length > 0;
    empty.textContent = topK === 0 ? 'top clients are off for this app (limits.client.top_k: 0)' :
      'no clients by ' + state.by + ' over the last ' + state.window;
    const bound = top ? top.error_bound : 0;
    text('top-bound', !top ? '' : bound === 0 ? 'counts exact' : 'counts over by at most ' + fmt(bound));
  }

  // ---- history and charts ----

  function newHistory() {
    return { t: [], req: [], rejected: new Map(), shadow: new Map(), waitMean: [], waitMax: [] };
  }

  // pushBy appends one second's rates by reason; a reason seen for the
  // first time was 0 before.
  function pushBy(m, rates, n) {
    rates = rates || {};
    for (const r of Object.keys(rates)) if (!m.has(r)) m.set(r, new Array(n - 1).fill(0));
    for (const [r, arr] of m) arr.push(rates[r] || 0);
  }

  function pushHistory(h, ev) {
    const a = ev.app;
    const t = Date.parse(ev.time) / 1000;
    if (h.t.length && t <= h.t[h.t.length - 1]) return; // x must increase
    h.t.push(t);
    h.req.push(a.requests_per_second);
    pushBy(h.rejected, a.rejected_per_second, h.t.length);
    pushBy(h.shadow, a.shadow_rejected_per_second, h.t.length);
    h.waitMean.push(a.queue_wait_mean_ms);
    h.waitMax.push(a.queue_wait_max_ms);
    if (h.t.length > HISTORY) {
      const cut = h.t.length - HISTORY;
      for (const arr of [h.t, h.req, h.waitMean, h.waitMax, ...h.rejected.values(), ...h.shadow.values()]) arr.splice(0, cut);
      for (const m of [h.rejected, h.shadow]) {
        for (const [r, arr] of m) if (arr.every((v) => v === 0)) m.delete(r); // gone from the window
      }
    }
  }

  function chartWidth(id) { return Math.max(300, $(id).clientWidth || 600); }

  function baseOpts(id, series) {
    return {
      width: chartWidth(id),
      height: 220,
      series: [{}].concat(series),
      scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(1, (hi || 0) * 1.1)] } },
      axes: [{}, { size: 60 }],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
    };
  }

  function renderCharts() {
    const h = state.hist;
    const rej = [...h.rejected.keys()].sort();
    const sh = [...h.shadow.keys()].sort();
    const key = JSON.stringify([rej, sh]);
    const data = [h.t, h.req].concat(rej.map((r) => h.rejected.get(r)), sh.map((r) => h.shadow.get(r)));
    if (key !== state.trafficKey || !state.charts.traffic) {
      if (state.charts.traffic) state.charts.traffic.destroy();
      const series = [{ label: 'requests/s', stroke: '#1f77b4', width: 2, value: (u, v) => fmtNum(v) }]
        .concat(rej.map((r) => ({ label: 'refused ' + r, stroke: colorOf(r), width: 1.5, value: (u, v) => fmtNum(v) })))
        .concat(sh.map((r) => ({ label: 'shadow ' + r, stroke: colorOf(r), width: 1.5, dash: [6, 4], value: (u, v) => fmtNum(v) })));
      state.charts.traffic = new uPlot(baseOpts('chart-traffic', series), data, $('chart-traffic'));
      state.trafficKey = key;
    } else {
      state.charts.traffic.setData(data);
    }
    const wait = [h.t, h.waitMean, h.waitMax];
    if (!state.charts.wait) {
      state.charts.wait = new uPlot(baseOpts('chart-wait', [
        { label: 'mean ms', stroke: '#2ca02c', width: 2, value: (u, v) => fmtNum(v) },
        { label: 'max ms', stroke: '#98df8a', width: 1.5, value: (u, v) => fmtNum(v) },
      ]), wait, $('chart-wait'));
    } else {
      state.charts.wait.setData(wait);
    }
  }

  function resetCharts() {
    for (const k in state.charts) state.charts[k].destroy();
    state.charts = {};
    state.trafficKey = null;
    state.hist = newHistory();
  }

  let resizing = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      if (state.charts.traffic) state.charts.traffic.setSize({ width: chartWidth('chart-traffic'), height: 220 });
      if (state.charts.wait) state.charts.wait.setSize({ width: chartWidth('chart-wait'), height: 220 });
    }, 150);
  });

  // ---- controls ----

  function saveURL() {
    const p = new URLSearchParams();
    if (state.app) p.set('app', state.app);
    if (state.by !== 'requests') p.set('by', state.by);
    if (state.window !== '10s') p.set('window', state.window);
    const q = p.toString();
    history.replaceState(null, '', location.pathname + (q ? '?' + q : ''));
  }

  function selectApp(name) {
    state.app = name;
    $('app-picker').value = name;
    $('app-missing').hidden = true;
    resetCharts();
    saveURL();
    connect();
  }

  $('app-picker').addEventListener('change', (e) => selectApp(e.target.value));
  $('by').value = state.by;
  $('window').value = state.window;
  $('by').addEventListener('change', (e) => { state.by = e.target.value; saveURL(); connect(); });
  $('window').addEventListener('change', (e) => { state.window = e.target.value; saveURL(); connect(); });

  // ---- ACME certificates expiring within 14 days (tls.acme; the
  // section stays hidden, and is not asked again, when ACME is off) ----

  const CERTS_EVERY_MS = 60000;
  let certsTimer = null;

  function loadCerts() {
    fetch('/api/certs?expiring=336h', { cache: 'no-store' })
      .then((r) => r.ok ? r.json() : null)
      .then((j) => {
        if (j && j.acme === false) { clearInterval(certsTimer); return; }
        if (j) renderCerts(j.certs || []);
      })
      .catch(() => {});
  }

  function renderCerts(certs) {
    $('certs').hidden = false;
    const tb = $('certs-table').tBodies[0];
    tb.replaceChildren();
    for (const c of certs) {
      tb.appendChild(row([el('td', '', c.name), el('td', '', c.issuer),
        el('td', 'warn', new Date(c.not_after).toLocaleString()),
        el('td', '', new Date(c.next_renewal).toLocaleString()),
        el('td', c.last_error ? 'warn' : 'muted', c.last_error || '–')]));
    }
    text('certs-none', certs.length ? '' : 'none');
  }

  connect();
  certsTimer = setInterval(loadCerts, CERTS_EVERY_MS);
  loadCerts();
})();
