'use strict';
// The approval page: the operation id comes from the page's path, the
// approver's token from the approver (kept in this tab's sessionStorage,
// sent as a bearer header, never as a cookie); the call is read from
// GET /v1/approvals/{id} and decided with a JSON POST naming the
// fingerprint shown. Everything the api answers is shown as text.
(function () {
  const storageKey = 'idemgate.approvals.token';
  const $ = (id) => document.getElementById(id);
  const tokenForm = $('token-form');
  const tokenInput = $('token');
  const tokenKept = $('token-kept');
  const call = $('call');
  const decide = $('decide');
  const reason = $('reason');
  const approve = $('approve');
  const deny = $('deny');
  const result = $('result');
  const show = (outcome, text) => {
    result.dataset.outcome = outcome;
    result.textContent = text;
  };

  const prefix = '/approvals/';
  let id = '';
  try {
    id = decodeURIComponent(window.location.pathname.slice(prefix.length));
  } catch {
    id = '';
  }
  if (!window.location.pathname.startsWith(prefix) || !id || id.includes('/')) {
    tokenForm.hidden = true;
    show('refused', 'This page needs an operation id: open /approvals/<operation id>, the link you were given.');
    return;
  }
  const apiPath = `/v1/approvals/${encodeURIComponent(id)}`;

  // jsonTokens splits JSON text into its tokens, untouched: punctuation,
  // strings (quotes and escapes kept) and the other literals.
  function jsonTokens(text) {
    const out = [];
    let i = 0;
    while (i < text.length) {
      const c = text[i];
      if (' \t\r\n'.includes(c)) {
        i++;
        continue;
      }
      if ('{}[]:,'.includes(c)) {
        out.push({ t: c, s: i, e: i + 1 });
        i++;
        continue;
      }
      let j = i + 1;
      if (c === '"') {
        while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
        j++;
      } else {
        while (j < text.length && !' \t\r\n{}[]:,"'.includes(text[j])) j++;
      }
      out.push({ t: c === '"' ? 's' : 'v', s: i, e: j });
      i = j;
    }
    return out;
  }

  // member is the text of the top-level object's member name, as the api
  // sent it (JSON.parse would round large numbers and reorder some keys),
  // or null.
  function member(text, name) {
    const toks = jsonTokens(text);
    let depth = 0;
    for (let k = 0; k < toks.length; k++) {
      const t = toks[k].t;
      if (t === '{' || t === '[') depth++;
      else if (t === '}' || t === ']') depth--;
      else if (depth === 1 && t === 's' && toks[k + 1]?.t === ':' && toks[k + 2] &&
        JSON.parse(text.slice(toks[k].s, toks[k].e)) === name) {
        let d = 0;
        let m = k + 2;
        for (; m < toks.length; m++) {
          if (toks[m].t === '{' || toks[m].t === '[') d++;
          else if (toks[m].t === '}' || toks[m].t === ']') d--;
          if (d === 0) break;
        }
        return m < toks.length ? text.slice(toks[k + 2].s, toks[m].e) : null;
      }
    }
    return null;
  }

  // goEscapes are the escapes Go's JSON encoder writes for characters
  // that RFC 8785 (the gate's canonical form) writes as they are.
  const goEscapes = { '\\u003c': '<', '\\u003e': '>', '\\u0026': '&', '\\u2028': '\u2028', '\\u2029': '\u2029' };

  // canonicalString is a string token as the gate hashed it: the api's
  // answer escapes <, > and & (and U+2028, U+2029), the canonical form
  // does not; other escapes are left as they are.
  function canonicalString(raw) {
    let out = '';
    for (let i = 0; i < raw.length; i++) {
      if (raw[i] !== '\\') {
        out += raw[i];
        continue;
      }
      const esc = raw.slice(i, i + 6);
      if (goEscapes[esc] !== undefined) {
        out += goEscapes[esc];
        i += 5;
      } else {
        out += raw.slice(i, i + 2);
        i++;
      }
    }
    return out;
  }

  // indent lays JSON text out on lines, two spaces a level, its tokens
  // unchanged but for canonicalString.
  function indent(text) {
    const toks = jsonTokens(text);
    const nl = (d) => `\n${'  '.repeat(d)}`;
    let out = '';
    let depth = 0;
    for (let k = 0; k < toks.length; k++) {
      const raw = text.slice(toks[k].s, toks[k].e);
      switch (toks[k].t) {
        case '{':
        case '[':
          if (toks[k + 1]?.t === '}' || toks[k + 1]?.t === ']') {
            out += raw + text.slice(toks[k + 1].s, toks[k + 1].e);
            k++;
          } else {
            depth++;
            out += raw + nl(depth);
          }
          break;
        case '}':
        case ']':
          depth--;
          out += nl(depth) + raw;
          break;
        case ',':
          out += `,${nl(depth)}`;
          break;
        case ':':
          out += ': ';
          break;
        case 's':
          out += canonicalString(raw);
          break;
        default:
          out += raw;
      }
    }
    return out;
  }

  const when = (s) => {
    if (!s) return '—';
    const d = new Date(s);
    return Number.isNaN(d.getTime()) ? s : `${d.toLocaleString()} (${s})`;
  };

  const token = () => window.sessionStorage.getItem(storageKey) || '';
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // request calls the api with the bearer token, again while it answers
  // 503 or 429 (a decision is safe to repeat: a second one is refused).
  async function request(method, body) {
    const headers = { Authorization: `Bearer ${token()}`, Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    for (let attempt = 1; ; attempt++) {
      const res = await fetch(apiPath, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: 'omit',
        cache: 'no-store',
        redirect: 'error',
      });
      const text = await res.text();
      let json = null;
      try {
        json = JSON.parse(text);
      } catch {
        json = null;
      }
      if ((res.status !== 503 && res.status !== 429) || attempt >= 5) return { res, text, json };
      const wait = Math.min(Math.max(Number(res.headers.get('Retry-After')) || 1, 1), 5);
      show('busy', `The server is busy: trying again in ${wait} s…`);
      await sleep(wait * 1000);
    }
  }

  // refusal is the api's message for a refused request.
  function refusal(res, json) {
    const err = json && json.error;
    const message = (json && json.detail) || (err && err.message) || res.statusText || 'no message';
    return `Refused (HTTP ${res.status}${err && err.code ? `, ${err.code}` : ''}): ${message}`;
  }

  let shown = null; // the approval on display
  let follow = null; // the timer that refreshes an approved operation

  function render(a, text) {
    shown = a;
    $('tool').textContent = a.tool;
    $('status').textContent = a.status;
    $('requested-by').textContent = a.requested_by;
    $('requested-at').textContent = when(a.requested_at);
    $('expires-at').textContent = when(a.approval_expires_at);
    $('operation-id').textContent = a.operation_id;
    $('args-hash').textContent = a.args_hash;
    const raw = member(text, 'args');
    // Line and paragraph separators are shown as their escapes: raw, they
    // would show as a line break that is not in the arguments.
    const shownArgs = raw === null ? JSON.stringify(a.args, null, 2) : indent(raw);
    $('args').textContent = shownArgs.replace(/[\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
    $('summary').hidden = !a.summary;
    $('summary').textContent = a.summary || '';
    const free = a.not_fingerprinted || [];
    // The agent's own words (its volatile arguments, such as a refund's
    // reason), apart from the summary: each as text, never as markup.
    const words = $('agent-words-list');
    words.replaceChildren();
    for (const name of free) {
      const v = a.args && Object.hasOwn(a.args, name) ? a.args[name] : undefined;
      if (v === undefined || v === null || v === '') continue;
      const dt = document.createElement('dt');
      dt.textContent = name;
      const dd = document.createElement('dd');
      dd.textContent = (typeof v === 'string' ? v : JSON.stringify(v))
        .replace(/[\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
      words.append(dt, dd);
    }
    $('agent-words').hidden = words.childElementCount === 0;
    $('not-fingerprinted').hidden = free.length === 0;
    $('not-fingerprinted').textContent = free.length === 0 ? ''
      : `The fingerprint covers every argument but ${free.join(', ')}, which a retry may change without asking again.`;
    const ended = Boolean(a.approval_expires_at) && Date.parse(a.approval_expires_at) <= Date.now();
    decide.hidden = a.status !== 'awaiting_approval' || ended;
    call.hidden = false;
    return ended;
  }

  function signedIn(yes) {
    tokenForm.hidden = yes;
    tokenKept.hidden = !yes;
    if (!yes) {
      call.hidden = true;
      shown = null;
      clearTimeout(follow);
    }
  }

  // load reads the approval and shows it; quiet keeps the result line.
  async function load(quiet) {
    let r;
    try {
      r = await request('GET');
    } catch {
      show('refused', 'The server did not answer: reload the page to try again.');
      return false;
    }
    if (r.res.ok && r.json) {
      const ended = render(r.json, r.text);
      if (!quiet) {
        if (r.json.status === 'awaiting_approval') {
          show(ended ? 'refused' : 'ready', ended ? 'The approval window has ended: this call can no longer be decided.' : 'This call awaits your decision.');
        } else {
          show('ready', `This call is no longer awaiting approval: it is ${r.json.status}.`);
        }
      }
      return true;
    }
    if (r.res.status === 401) {
      window.sessionStorage.removeItem(storageKey);
      signedIn(false);
      show('refused', `${refusal(r.res, r.json)}. Enter a valid token.`);
      return false;
    }
    call.hidden = true;
    show('refused', r.res.status === 404 ? 'No operation with this id in your tenant.' : refusal(r.res, r.json));
    return false;
  }

  // refresh follows an approved operation until it has run, for a while.
  function refresh(until) {
    clearTimeout(follow);
    if (!shown || !['queued', 'running'].includes(shown.status) || Date.now() > until) return;
    follow = setTimeout(async () => {
      if (await load(true)) refresh(until);
    }, 2000);
  }

  async function send(choice) {
    if (!shown) return;
    approve.disabled = true;
    deny.disabled = true;
    show('busy', choice === 'approve' ? 'Approving…' : 'Denying…');
    const body = { decision: choice, args_hash: shown.args_hash };
    if (reason.value.trim()) body.reason = reason.value.trim();
    let r;
    try {
      r = await request('POST', body);
    } catch {
      approve.disabled = false;
      deny.disabled = false;
      show('refused', 'The server did not answer: try again.');
      return;
    }
    approve.disabled = false;
    deny.disabled = false;
    if (r.res.ok && r.json) {
      render(r.json, r.text);
      show('ok', choice === 'approve'
        ? `Approved: the operation is ${r.json.status} and will run.`
        : `Denied: the operation is ${r.json.status} (approval_denied) and will not run.`);
      refresh(Date.now() + 5 * 60 * 1000);
      return;
    }
    const message = refusal(r.res, r.json);
    if (r.res.status === 401) {
      window.sessionStorage.removeItem(storageKey);
      signedIn(false);
    } else {
      await load(true); // the status as it is now
    }
    show('refused', message);
  }

  tokenForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const value = tokenInput.value.trim();
    if (!value) return;
    window.sessionStorage.setItem(storageKey, value);
    tokenInput.value = '';
    signedIn(true);
    show('busy', 'Reading the call…');
    load(false);
  });
  $('forget').addEventListener('click', () => {
    window.sessionStorage.removeItem(storageKey);
    signedIn(false);
    show('ready', 'The token is forgotten.');
  });
  approve.addEventListener('click', () => send('approve'));
  deny.addEventListener('click', () => send('deny'));

  if (token()) {
    signedIn(true);
    show('busy', 'Reading the call…');
    load(false);
  } else {
    signedIn(false);
  }
})();
