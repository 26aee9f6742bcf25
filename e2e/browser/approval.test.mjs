// The approval page in a real browser. A refund above acme's threshold
// (seed.json: refund_order above 10000 cents) waits in awaiting_approval;
// fin-lead opens /approvals/<operation id>, enters their token, reads the
// call and approves it: the refund runs once at the test Stripe. The
// requester's own token is refused (four eyes), a denial ends the call
// approval_denied with no refund, and a page of another origin cannot
// decide anything (form posts and fetches are refused; the call still
// waits).
//
// Run by e2e/browser/run.sh once per engine: it starts the api, the worker
// (on SQLite, inside the api) and the test Stripe and sets IDEMGATE_ENGINE,
// IDEMGATE_URL, TESTSTRIPE_URL and IDEMCTL (and CHROMIUM_PATH).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:http';
import { before, test } from 'node:test';

import { dump, env, fetchPatiently, json, launch, openPage, poll, refundsOf, signIn } from './helpers.mjs';

const base = env('IDEMGATE_URL');
const stripe = env('TESTSTRIPE_URL');
const idemctl = env('IDEMCTL');
const engine = env('IDEMGATE_ENGINE');

// The seeded tokens: support-bot may refund, fin-lead may decide on
// approvals, support-lead may do both.
const seed = JSON.parse(readFileSync(new URL('./seed.json', import.meta.url), 'utf8'));
const tokenOf = (user) => seed.tokens.find((t) => t.tenant === 'acme' && t.user === user).token;
const requester = tokenOf('support-bot');
const approver = tokenOf('fin-lead');
const lead = tokenOf('support-lead');

const orderID = 'ord_approval';
const chargeID = 'ch_approval';
const run = Date.now();

before(async () => {
  const res = await fetch(`${stripe}/_charges`, { method: 'POST', body: JSON.stringify({ id: chargeID, amount: 500_000, currency: 'usd' }) });
  assert.equal(res.status, 200, 'the test Stripe takes the charge');
  await res.arrayBuffer();
});

// refund asks for a refund of amount as the owner of token, under key.
async function refund(token, key, amount) {
  const res = await fetchPatiently(`${base}/v1/tools/refund_order`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'idempotency-key': key, 'content-type': 'application/json' },
    // The reason holds a line separator, which the page must show escaped.
    body: JSON.stringify({ order_id: orderID, amount_cents: amount, reason: 'goodwill\u2028for the delay' }),
  });
  return { status: res.status, headers: res.headers, body: await json(res) };
}

// awaiting asks for a refund over the threshold and checks that it waits,
// the same on a retry with the key: its operation id.
async function awaiting(token, key, amount) {
  const first = await refund(token, key, amount);
  // 202 (accepted, not terminal) or 200: the status is the body's.
  assert.ok([200, 202].includes(first.status), `refund answered ${first.status}: ${JSON.stringify(first.body)}`);
  assert.equal(first.body.operation?.status, 'awaiting_approval', JSON.stringify(first.body));
  const id = first.body.operation.operation_id;
  assert.ok(id, 'an operation id');
  // The retry: 200 or 202 likewise, or 409 in_flight (the answer to a
  // duplicate of a call not yet ended); the same operation either way.
  const again = await refund(token, key, amount);
  assert.ok([200, 202, 409].includes(again.status), `the retry answered ${again.status}: ${JSON.stringify(again.body)}`);
  if (again.status === 409) assert.equal(again.body.outcome, 'in_flight', JSON.stringify(again.body));
  assert.equal(again.body.operation?.operation_id, id, 'the retry gets the same operation');
  assert.equal(again.body.operation.status, 'awaiting_approval');
  assert.equal((await operation(token, key)).status, 'awaiting_approval');
  return id;
}

async function operation(token, key) {
  const res = await fetchPatiently(`${base}/v1/operations/refund_order/${key}`, { headers: { authorization: `Bearer ${token}` } });
  assert.equal(res.status, 200, `GET operation ${key}`);
  return json(res);
}

// approval is GET /v1/approvals/{id} as fin-lead sees it.
async function approval(id) {
  const res = await fetchPatiently(`${base}/v1/approvals/${id}`, { headers: { authorization: `Bearer ${approver}` } });
  assert.equal(res.status, 200, `GET approval ${id}`);
  return json(res);
}

// audit is the operation's audit trail, as idemctl shows it.
function audit(key) {
  const detail = JSON.parse(execFileSync(idemctl, ['op', 'get', '--tenant', 'acme', '--tool', 'refund_order', '--key', key], { encoding: 'utf8' }));
  return detail.audit.map((e) => ({ decision: e.decision, user: e.user_id }));
}

test(`a person approves a large refund on the page, and it runs once (${engine})`, { timeout: 180_000 }, async () => {
  const key = `browser-approve-${run}`;
  const id = await awaiting(requester, key, 25_000);
  const shown = await approval(id);
  assert.equal(await refundsOf(id), 0, 'nothing refunded before the approval');

  const { context, page, errors } = await openPage(id);
  try {
    try {
      await signIn(page, approver);
      await page.locator('#tool').filter({ hasText: /^refund_order$/ }).waitFor();
      assert.equal(await page.locator('#status').textContent(), 'awaiting_approval');
      assert.equal(await page.locator('#requested-by').textContent(), 'support-bot');
      assert.equal(await page.locator('#args-hash').textContent(), shown.args_hash);
      const args = await page.locator('#args').textContent();
      assert.match(args, /"amount_cents": 25000/);
      assert.match(args, /"order_id": "ord_approval"/);
      assert.deepEqual(JSON.parse(args), shown.args, 'the arguments as the gate hashed them');
      assert.ok(args.includes('goodwill\\u2028for the delay') && !args.includes('\u2028'), `a line separator shown escaped: ${JSON.stringify(args)}`);
      assert.deepEqual(shown.not_fingerprinted, ['reason']);
      assert.match(await page.locator('#not-fingerprinted').textContent(), /every argument but reason/);
      assert.ok((await page.locator('#expires-at').textContent()).includes(shown.approval_expires_at));
      // The tool's summary as of the request, and the agent's reason apart,
      // as its words: visible, and in the screenshot.
      const summary = 'Refund 250.00 USD of order ord_approval (total 5000.00 USD, ';
      assert.ok(shown.summary?.startsWith(summary), JSON.stringify(shown.summary));
      assert.ok(await page.locator('#summary').isVisible(), 'the summary is visible');
      assert.equal(await page.locator('#summary').textContent(), shown.summary);
      assert.match(shown.summary, /\d+\.\d\d already refunded\)$/);
      assert.ok(await page.locator('#agent-words').isVisible(), "the agent's words are visible");
      assert.equal(await page.locator('#agent-words-list dd').textContent(), 'goodwill\\u2028for the delay');
      await page.screenshot({ path: `${process.env.E2E_SCREENSHOTS || tmpdir()}/approval-page-${engine}.png`, fullPage: true });
      // The token is kept in this tab's sessionStorage, not in the form.
      assert.equal(await page.getByLabel('Your token').inputValue(), '');
      assert.equal(await page.evaluate(() => window.sessionStorage.getItem('idemgate.approvals.token')), approver);

      await page.getByRole('button', { name: 'Approve' }).click();
      await page.getByRole('status').filter({ hasText: /^Approved: the operation is (queued|running|succeeded)/ }).waitFor();
      assert.ok(await page.getByRole('button', { name: 'Approve' }).isHidden(), 'no buttons once decided');

      const done = await poll('the approved refund succeeds', async () => {
        const op = await operation(requester, key);
        return { done: op.status === 'succeeded', value: op };
      }, { timeoutMs: 60_000 });
      assert.equal(done.operation_id, id);
      assert.ok(done.result?.refund_id?.startsWith('re_'), JSON.stringify(done.result));
      // The page follows the approved operation until it has run.
      await page.locator('#status').filter({ hasText: /^succeeded$/ }).waitFor({ timeout: 60_000 });

      // Reloaded, the tab still has the token: the decided call, no buttons.
      await page.reload();
      await page.locator('#status').filter({ hasText: /^succeeded$/ }).waitFor();
      await page.getByRole('status').filter({ hasText: 'no longer awaiting approval' }).waitFor();
      assert.ok(await page.getByRole('button', { name: 'Approve' }).isHidden());
      assert.ok(await page.getByRole('button', { name: 'Deny' }).isHidden());

      // Forget: the token is gone from the tab, and so is the call.
      await page.getByRole('button', { name: 'Forget the token' }).click();
      await page.getByLabel('Your token').waitFor();
      assert.ok(await page.locator('#call').isHidden());
      assert.equal(await page.evaluate(() => window.sessionStorage.getItem('idemgate.approvals.token')), null);
    } catch (err) {
      await dump(page, err);
    }
    assert.deepEqual(errors, [], 'the page ran without errors');
  } finally {
    await context.close();
  }

  // Exactly one refund of this operation; a retry by the agent replays it.
  assert.equal(await refundsOf(id), 1);
  const replay = await refund(requester, key, 25_000);
  assert.equal(replay.status, 200);
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(replay.body.operation.status, 'succeeded');
  assert.equal(await refundsOf(id), 1);
  assert.ok(audit(key).some((e) => e.user === 'fin-lead'), 'the audit trail names the approver');
});

test(`the requester cannot approve their own call; a denial refunds nothing (${engine})`, { timeout: 180_000 }, async () => {
  const key = `browser-deny-${run}`;
  const id = await awaiting(lead, key, 30_000); // support-lead may decide on approvals, not on their own calls

  const { context, page, errors } = await openPage(id, [403]);
  try {
    try {
      // A token without approvals:decide sees nothing of the call.
      await signIn(page, requester);
      await page.getByRole('status').filter({ hasText: 'lacks scope approvals:decide' }).waitFor();
      assert.ok(await page.locator('#call').isHidden());
      await page.getByRole('button', { name: 'Forget the token' }).click();

      // The requester sees the call, and the Approve is refused: four eyes.
      await signIn(page, lead);
      await page.locator('#requested-by').filter({ hasText: /^support-lead$/ }).waitFor();
      await page.getByRole('button', { name: 'Approve' }).click();
      await page.getByRole('status').filter({ hasText: /Refused \(HTTP 403, forbidden\): .*four eyes/ }).waitFor();
      assert.equal(await page.locator('#status').textContent(), 'awaiting_approval');
      assert.equal((await operation(lead, key)).status, 'awaiting_approval');

      // fin-lead denies it, with a reason.
      await page.getByRole('button', { name: 'Forget the token' }).click();
      await signIn(page, approver);
      await page.locator('#status').filter({ hasText: /^awaiting_approval$/ }).waitFor();
      await page.getByLabel(/^Reason/).fill('too large without a ticket');
      await page.getByRole('button', { name: 'Deny' }).click();
      await page.getByRole('status').filter({ hasText: /^Denied: the operation is failed/ }).waitFor();
      assert.equal(await page.locator('#status').textContent(), 'failed');
      assert.ok(await page.getByRole('button', { name: 'Deny' }).isHidden());
    } catch (err) {
      await dump(page, err);
    }
    assert.deepEqual(errors, [], 'the page ran without errors');
  } finally {
    await context.close();
  }

  const op = await operation(lead, key);
  assert.equal(op.status, 'failed');
  assert.equal(op.error?.code, 'approval_denied');
  const replay = await refund(lead, key, 30_000);
  assert.equal(replay.body.error?.code, 'approval_denied', JSON.stringify(replay.body));
  assert.equal(await refundsOf(id), 0);
});

// evilSite serves pages of another origin (another port) that try to
// decide on id: HTML forms that submit themselves, and fetches.
async function evilSite(id, argsHash) {
  const target = `${base}/v1/approvals/${id}`;
  const decision = JSON.stringify({ decision: 'approve', args_hash: argsHash });
  const forms = {
    // A text/plain form forges a JSON body: {"decision":…,"pad":"="}.
    'text/plain': `<input type="hidden" name='${decision.slice(0, -1)},"pad":"' value='"}'>`,
    'application/x-www-form-urlencoded': `<input type="hidden" name="decision" value="approve"><input type="hidden" name="args_hash" value="${argsHash}">`,
    'multipart/form-data': `<input type="hidden" name="decision" value="approve"><input type="hidden" name="args_hash" value="${argsHash}">`,
  };
  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://evil');
    let body;
    if (url.pathname === '/form') {
      const enctype = url.searchParams.get('enctype');
      body = `<!doctype html><title>win a prize</title><form method="POST" action="${target}" enctype="${enctype}">${forms[enctype]}</form>` +
        '<script>document.forms[0].submit();</script>';
    } else if (url.pathname === '/fetch') {
      body = `<!doctype html><title>win a prize</title><script>
        (async () => {
          const results = {};
          const attempt = async (name, init) => {
            try {
              const r = await fetch(${JSON.stringify(target)}, { method: 'POST', body: ${JSON.stringify(decision)}, ...init });
              results[name] = { type: r.type, status: r.status };
            } catch (err) {
              results[name] = { error: String(err) };
            }
          };
          await attempt('json', { headers: { 'content-type': 'application/json', authorization: 'Bearer idg_guessed' } });
          await attempt('simple', { mode: 'no-cors', headers: { 'content-type': 'text/plain' } });
          await attempt('credentials', { mode: 'no-cors', credentials: 'include' });
          window.results = results;
        })();
      </script>`;
    } else {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(body);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, target, close: () => new Promise((resolve) => server.close(resolve)) };
}

test(`a page of another origin cannot decide on a waiting call (${engine})`, { timeout: 180_000 }, async () => {
  const key = `browser-csrf-${run}`;
  const id = await awaiting(requester, key, 20_000);
  const shown = await approval(id);
  const trail = audit(key);

  const evil = await evilSite(id, shown.args_hash);
  const context = await launch();
  try {
    const page = await context.newPage();
    // Every answer the browser got from the approval route.
    const answers = [];
    page.on('response', (r) => {
      if (r.url() === evil.target) answers.push({ method: r.request().method(), status: r.status() });
    });
    try {
      for (const enctype of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data']) {
        const posted = page.waitForResponse((r) => r.url() === evil.target && r.request().method() === 'POST');
        await page.goto(`${evil.url}/form?enctype=${encodeURIComponent(enctype)}`);
        const resp = await posted;
        assert.equal(resp.status(), 403, `the ${enctype} form's POST`);
        assert.match(await resp.text(), /Origin/);
      }
      await page.goto(`${evil.url}/fetch`);
      const results = await (await page.waitForFunction(() => window.results)).jsonValue();
      // The preflight fails (no CORS for other origins): never sent; the
      // others are opaque to the page, and refused by the api.
      assert.match(results.json.error ?? '', /TypeError|Failed to fetch/, JSON.stringify(results));
      assert.equal(results.simple.type, 'opaque', JSON.stringify(results));
      assert.equal(results.credentials.type, 'opaque', JSON.stringify(results));
      await poll('the browser saw the api answer every POST', async () => ({ done: answers.filter((a) => a.method === 'POST').length >= 5, value: answers }));
    } catch (err) {
      await dump(page, err);
    }
    assert.ok(answers.length > 0);
    assert.deepEqual(answers.filter((a) => a.status < 400), [], `every answer a refusal: ${JSON.stringify(answers)}`);
  } finally {
    await context.close();
    await evil.close();
  }

  // Nothing was decided: the call waits, its audit trail is as it was.
  assert.equal((await approval(id)).status, 'awaiting_approval');
  assert.equal((await operation(requester, key)).status, 'awaiting_approval');
  assert.deepEqual(audit(key), trail);
  assert.equal(await refundsOf(id), 0);

  // Even with a valid token, a body that is not JSON is refused (415).
  const plain = await fetchPatiently(`${base}/v1/approvals/${id}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${approver}`, 'content-type': 'text/plain' },
    body: JSON.stringify({ decision: 'approve', args_hash: shown.args_hash }),
  });
  assert.equal(plain.status, 415);
  assert.match((await json(plain)).detail, /Content-Type must be application\/json/);
  assert.equal((await approval(id)).status, 'awaiting_approval');
  assert.deepEqual(audit(key), trail);

  // The approver denies it over REST: nothing stays waiting.
  const denied = await fetchPatiently(`${base}/v1/approvals/${id}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${approver}`, 'content-type': 'application/json' },
    body: JSON.stringify({ decision: 'deny', args_hash: shown.args_hash, reason: 'browser test' }),
  });
  assert.equal(denied.status, 200);
  assert.equal((await json(denied)).status, 'failed');
  assert.equal(await refundsOf(id), 0);
});
