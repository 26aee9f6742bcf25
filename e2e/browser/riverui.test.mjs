// River UI in a real browser. First: a refund whose card is declined fails and its
// River job is cancelled; an operator opens River UI (refused without
// credentials), fixes the charge, and clicks Retry on the job; the operator
// routes re-drive the failed operation through the gate in the operator's
// name, and it ends succeeded with exactly one refund at the test Stripe.
// Then: a refund its agent cancelled shows as the owner's cancellation in
// River UI, and Retry there is refused by the gate: no refund. Last: an
// operator clicks Cancel on a queued refund's job in River UI (its queue
// paused); the reaper fails the operation with job_cancelled_by_operator,
// not the owner's cancelled; `idemctl op redrive --dry-run` changes
// nothing, the re-drive runs it, and the test Stripe holds exactly one
// refund of it.
//
// Run by e2e/browser/run.sh once per engine: it starts the api, the worker
// (on SQLite, inside the api) and the test Stripe and sets IDEMGATE_ENGINE,
// IDEMGATE_URL, TESTSTRIPE_URL, IDEMGATE_TOKEN_ACME, IDEMGATE_OPS_USER,
// IDEMGATE_OPS_PASSWORD, IDEMCTL and DATABASE_URL (and CHROMIUM_PATH).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';

import { env, fetchPatiently, json, launch, poll, refundsOf as refundsOfOperation } from './helpers.mjs';

const base = env('IDEMGATE_URL');
const stripe = env('TESTSTRIPE_URL');
const token = env('IDEMGATE_TOKEN_ACME');
const opsUser = env('IDEMGATE_OPS_USER');
const opsPassword = env('IDEMGATE_OPS_PASSWORD');
const idemctl = env('IDEMCTL');
const engine = env('IDEMGATE_ENGINE');

const riverUI = `${base}/ops/riverui`;
const chargeID = 'ch_declined';
const key = `browser-refund-${Date.now()}`;

async function control(method, path, body) {
  const res = await fetch(`${stripe}${path}`, { method, body: body === undefined ? undefined : JSON.stringify(body) });
  assert.equal(res.status, 200, `${method} ${path}`);
  return json(res);
}

// refundsOf lists the refunds of a charge at the test Stripe (Stripe's own
// list endpoint), newest first.
async function refundsOf(charge) {
  const res = await fetch(`${stripe}/v1/refunds?charge=${charge}&limit=100`, { headers: { authorization: 'Bearer sk_test_browser' } });
  assert.equal(res.status, 200, `list the refunds of ${charge}`);
  return (await json(res)).data;
}

async function operation() {
  const res = await fetchPatiently(`${base}/v1/operations/refund_order/${key}`, { headers: { authorization: `Bearer ${token}` } });
  assert.equal(res.status, 200, `GET operation ${key}`);
  return json(res);
}

// dump shows what the page looked like when a step failed.
async function dump(page, err) {
  try {
    console.error(`page ${page.url()}:\n${await page.locator('body').ariaSnapshot()}`);
  } catch {}
  throw err;
}

test(`retrying a failed refund in River UI re-drives it through the gate: one refund (${engine})`, { timeout: 180_000 }, async (t) => {
  // A charge whose refunds are declined, and a refund of it.
  await control('POST', '/_charges', {
    id: chargeID,
    amount: 5000,
    currency: 'usd',
    fail: { status: 402, type: 'card_error', code: 'card_declined' },
  });
  const res = await fetchPatiently(`${base}/v1/tools/refund_order`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ order_id: 'ord_declined', amount_cents: 1200 }),
  });
  // 202 while the worker has not answered yet; 402 when the decline is
  // already stored (a definitive failure answers the status its code means).
  assert.ok([202, 402].includes(res.status), `refund answered ${res.status}`);
  const failed = await poll('the refund fails', async () => {
    const op = await operation();
    return { done: op.status === 'failed', value: op };
  });
  assert.equal(failed.error.code, 'card_declined');
  const operationID = failed.operation_id;
  assert.equal((await control('GET', '/_stats')).refunds_by_charge[chargeID] ?? 0, 0);

  await t.test('River UI refuses a browser without credentials', async () => {
    const bare = await fetch(`${riverUI}/`);
    assert.equal(bare.status, 401);
    assert.equal(bare.headers.get('www-authenticate'), 'Basic realm="idemgate ops"');

    // Without credentials, and with wrong ones, the browser gets the 401
    // and no page (Chromium ends such a navigation with
    // ERR_INVALID_AUTH_CREDENTIALS once it has no credentials to offer).
    for (const httpCredentials of [undefined, { username: opsUser, password: `${opsPassword}-wrong`, origin: base }]) {
      const context = await launch(httpCredentials ? { httpCredentials } : {});
      try {
        const page = await context.newPage();
        const statuses = [];
        page.on('response', (r) => {
          if (r.url().startsWith(riverUI)) statuses.push(r.status());
        });
        const status = await page.goto(`${riverUI}/jobs?state=cancelled`).then(
          (resp) => resp.status(),
          (err) => {
            assert.match(err.message, /ERR_INVALID_AUTH_CREDENTIALS/);
            return 401;
          },
        );
        assert.equal(status, 401);
        assert.ok(statuses.length > 0 && statuses.every((s) => s === 401), `River UI answered ${statuses}`);
        assert.equal(await page.getByRole('link', { name: 'idemgate.refund_order' }).count(), 0);
      } finally {
        await context.close();
      }
    }
  });

  await t.test('an operator retries the cancelled job in River UI', async () => {
    const context = await launch({ httpCredentials: { username: opsUser, password: opsPassword, origin: base } });
    const errors = [];
    try {
      const page = await context.newPage();
      page.on('pageerror', (err) => errors.push(err.message));
      try {
        const resp = await page.goto(`${riverUI}/jobs?state=cancelled`);
        assert.equal(resp.status(), 200);

        // The cancelled refund_order job of this operation.
        const row = page.getByRole('listitem').filter({ hasText: key });
        const link = row.getByRole('link', { name: 'idemgate.refund_order', exact: true });
        await link.waitFor();
        await link.click();
        await page.getByRole('heading', { level: 1, name: 'idemgate.refund_order' }).waitFor();
        await page.getByRole('definition').filter({ hasText: /^Cancelled$/ }).waitFor();

        // The charge is fixed; Retry.
        await control('POST', `/_clear_charge_error?id=${chargeID}`);
        const retried = page.waitForResponse((r) => r.url().endsWith('/ops/riverui/api/jobs/retry') && r.request().method() === 'POST');
        await page.getByRole('button', { name: 'Retry', exact: true }).click();
        assert.ok((await retried).ok(), 'River UI retried the job');

        // The operator routes re-drove the operation through the gate; the
        // worker runs it.
        const succeeded = await poll('the re-driven refund succeeds', async () => {
          const op = await operation();
          return { done: op.status === 'succeeded', value: op };
        });
        assert.equal(succeeded.operation_id, operationID);
        assert.ok(succeeded.result?.refund_id?.startsWith('re_'), JSON.stringify(succeeded.result));

        // River UI shows the operation's job completed: the one retried, or
        // the fresh one the gate gave it where River had been asked to
        // cancel the failed one.
        await page.goto(`${riverUI}/jobs/${succeeded.job_id}`);
        await page.getByRole('definition').filter({ hasText: /^Completed$/ }).waitFor();
      } catch (err) {
        await dump(page, err);
      }
      assert.deepEqual(errors, [], 'no page errors');
    } finally {
      await context.close();
    }
  });

  await t.test('exactly one refund, with the next generation downstream key', async () => {
    // Counted per charge: the other test files refund at the same test
    // Stripe, at the same time.
    const stats = await control('GET', '/_stats');
    assert.equal(stats.refunds_by_charge[chargeID], 1);
    // card_declined means nothing happened, so the re-drive moved to the
    // next generation's key: the intent key (an HMAC of tenant, tool, key
    // and arguments under IDEMGATE_SECRET, never the operation id or the
    // client's key) with generation 1.
    const refundKeys = (await refundsOf(chargeID)).map((r) => r.metadata.idemgate_downstream_key);
    assert.equal(refundKeys.length, 1, JSON.stringify(refundKeys));
    assert.match(refundKeys[0], /^idg_[0-9a-f]{32}_1$/);
    assert.ok(!refundKeys[0].includes(operationID) && !refundKeys[0].includes(key), refundKeys[0]);
    assert.equal(stats.refunds_by_key[refundKeys[0]], 1);
    assert.equal(stats.refunded_amount[chargeID], 1200);

    // A retry by the client replays the outcome; nothing new happens.
    const replay = await fetchPatiently(`${base}/v1/tools/refund_order`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'idempotency-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ order_id: 'ord_declined', amount_cents: 1200 }),
    });
    assert.equal(replay.status, 200);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal((await control('GET', '/_stats')).refunds_by_charge[chargeID], 1);

    // The audit trail: the retry in River UI re-drove the operation through
    // the gate, and the gate wrote it down.
    const detail = JSON.parse(
      execFileSync(idemctl, ['op', 'get', '--tenant', 'acme', '--tool', 'refund_order', '--key', key], { encoding: 'utf8' }),
    );
    assert.equal(detail.status, 'succeeded');
    assert.equal(detail.generation, 1);
    assert.equal(detail.downstream_key, refundKeys[0]);
    assert.deepEqual(
      detail.audit.map((e) => e.decision),
      ['accepted', 'started', 'failed', 'redriven', 'started', 'succeeded', 'replayed'],
    );
    // It names the person who pressed Retry, and the channel.
    const redriven = detail.audit.find((e) => e.decision === 'redriven');
    assert.equal(redriven.user_id, opsUser);
    assert.ok(redriven.reason.startsWith(`redriven by ${opsUser} via riverui (basic): `), redriven.reason);

    // Re-driving the succeeded operation is refused.
    const redrive = await fetchPatiently(`${base}/ops/redrive`, {
      method: 'POST',
      headers: {
        authorization: `Basic ${Buffer.from(`${opsUser}:${opsPassword}`).toString('base64')}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ tenant: 'acme', tool: 'refund_order', idempotency_key: key, reason: 'browser test' }),
    });
    assert.equal(redrive.status, 409);
    assert.equal((await json(redrive)).action, 'refused');
  });
});

// rpc sends one JSON-RPC request to /mcp as a stateless MCP client does.
let rpcID = 0;
async function rpc(method, params) {
  const res = await fetchPatiently(`${base}/mcp`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-11-25',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcID, method, params }),
  });
  assert.equal(res.status, 200, `${method} answered ${res.status}`);
  return json(res);
}

const opsBasic = `Basic ${Buffer.from(`${opsUser}:${opsPassword}`).toString('base64')}`;

async function queue(action) {
  const res = await fetch(`${riverUI}/api/queues/idemgate/${action}`, { method: 'PUT', headers: { authorization: opsBasic } });
  assert.ok(res.ok, `queue ${action} answered ${res.status}`);
  await res.arrayBuffer();
}

test(`an agent's cancellation is final: River UI shows it and its Retry refunds nothing (${engine})`, { timeout: 180_000 }, async () => {
  await control('POST', '/_charges', { id: 'ch_cancel', amount: 100_000, currency: 'usd' });
  // The agent queues a refund as a task and cancels it before any worker
  // fetches it. The operator pauses the queue first (River UI's API); until
  // the worker has applied the pause a worker may win the race, and then
  // the agent is refused and tries another intent (a new key).
  await queue('pause');
  let cancelled;
  for (let i = 0; i < 30 && !cancelled; i++) {
    const k = `browser-cancel-${Date.now()}-${i}`;
    const created = await rpc('tools/call', {
      name: 'refund_order',
      arguments: { order_id: 'ord_cancel', amount_cents: 700, idempotency_key: k },
      task: {},
    });
    assert.equal(created.error, undefined, JSON.stringify(created.error));
    const taskID = created.result.task.taskId;
    const answer = await rpc('tasks/cancel', { taskId: taskID });
    if (answer.error === undefined) {
      assert.equal(answer.result.status, 'cancelled');
      cancelled = { key: k, operationID: taskID };
    }
  }
  assert.ok(cancelled, 'a queued refund was cancelled by its agent');
  await queue('resume');
  const op = JSON.parse(
    execFileSync(idemctl, ['op', 'get', '--tenant', 'acme', '--tool', 'refund_order', '--key', cancelled.key], { encoding: 'utf8' }),
  );
  assert.equal(op.status, 'failed');
  assert.equal(op.error.code, 'cancelled');

  const context = await launch({ httpCredentials: { username: opsUser, password: opsPassword, origin: base } });
  const errors = [];
  try {
    const page = await context.newPage();
    page.on('pageerror', (err) => errors.push(err.message));
    try {
      // The job's page says whose cancellation it was (its metadata).
      const resp = await page.goto(`${riverUI}/jobs/${op.job_id}`);
      assert.equal(resp.status(), 200);
      await page.getByRole('heading', { level: 1, name: 'refund_order' }).waitFor();
      await page.getByRole('definition').filter({ hasText: /^Cancelled$/ }).waitFor();
      // River UI folds the job's output in its metadata: unfold it.
      await page.getByRole('button', { name: /"output"/ }).click();
      await page.getByText('cancelled_by_owner').first().waitFor();

      // Retry: the operator routes ask the gate, which refuses the
      // re-drive (409, in the operator's name); the job stays cancelled.
      const retried = page.waitForResponse((r) => r.url().endsWith('/ops/riverui/api/jobs/retry') && r.request().method() === 'POST');
      await page.getByRole('button', { name: 'Retry', exact: true }).click();
      assert.equal((await retried).status(), 409, 'the gate refused the retry');
      const refused = await poll('the gate refuses the re-drive', async () => {
        const detail = JSON.parse(
          execFileSync(idemctl, ['op', 'get', '--tenant', 'acme', '--tool', 'refund_order', '--key', cancelled.key], { encoding: 'utf8' }),
        );
        const row = detail.audit.find((e) => e.decision === 'denied' && e.user_id === opsUser);
        return { done: row !== undefined, value: { detail, row } };
      }, { timeoutMs: 60_000 });
      assert.match(refused.row.reason, /cancelled by its owner/);
      assert.match(refused.row.reason, /via riverui \(basic\)/);
      assert.equal(refused.detail.status, 'failed');
      assert.equal(refused.detail.error.code, 'cancelled');
      await page.reload();
      await page.getByRole('definition').filter({ hasText: /^Cancelled$/ }).waitFor();
    } catch (err) {
      await dump(page, err);
    }
    assert.deepEqual(errors, [], 'no page errors');
  } finally {
    await context.close();
  }

  // Nothing of the cancelled intent reached Stripe, and no re-drive ran it.
  const stats = await control('GET', '/_stats');
  assert.deepEqual(
    Object.keys(stats.refunds_by_key ?? {}).filter((k) => k.includes(cancelled.operationID)),
    [],
    'no refund under any downstream key of the cancelled operation',
  );
  const after = JSON.parse(
    execFileSync(idemctl, ['op', 'get', '--tenant', 'acme', '--tool', 'refund_order', '--key', cancelled.key], { encoding: 'utf8' }),
  );
  assert.deepEqual(
    after.audit.filter((e) => ['started', 'succeeded', 'redriven'].includes(e.decision)),
    [],
  );
});

// opGet is `idemctl op get` of a refund_order key: the operation with its
// audit trail.
function opGet(k) {
  return JSON.parse(execFileSync(idemctl, ['op', 'get', '--tenant', 'acme', '--tool', 'refund_order', '--key', k], { encoding: 'utf8' }));
}

// redrive runs `idemctl op redrive` of a refund_order key (with more
// flags, --dry-run say) and returns its one JSON line.
function redrive(k, ...flags) {
  const out = execFileSync(
    idemctl,
    ['op', 'redrive', '--tenant', 'acme', '--tool', 'refund_order', '--key', k, '--reason', 'cancelled in River UI by mistake', '--operator', 'ops-browser', ...flags],
    { encoding: 'utf8' },
  );
  const lines = out.trim().split('\n');
  assert.equal(lines.length, 1, out);
  return JSON.parse(lines[0]);
}

test(`an operator's Cancel in River UI is not the owner's: the operation fails job_cancelled_by_operator and is re-driven once (${engine})`, { timeout: 240_000 }, async (t) => {
  await control('POST', '/_charges', { id: 'ch_opcancel', amount: 100_000, currency: 'usd' });

  // The operator pauses the queue (River UI's API) so that the refund stays
  // queued, opens its job in River UI and clicks Cancel. Until the worker
  // has applied the pause it may fetch the job first (River then only asks
  // the running job to stop): the refund is tried again under a new key,
  // with another amount so that it is another intent.
  let chosen;
  await t.test('an operator clicks Cancel on the queued job in River UI', async () => {
    await queue('pause');
    const context = await launch({ httpCredentials: { username: opsUser, password: opsPassword, origin: base } });
    const errors = [];
    try {
      const page = await context.newPage();
      page.on('pageerror', (err) => errors.push(err.message));
      try {
        for (let i = 0; i < 30 && !chosen; i++) {
          const k = `browser-opcancel-${Date.now()}-${i}`;
          const args = { order_id: 'ord_opcancel', amount_cents: 700 + i };
          const res = await fetchPatiently(`${base}/v1/tools/refund_order`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}`, 'idempotency-key': k, 'content-type': 'application/json' },
            body: JSON.stringify(args),
          });
          assert.ok([200, 202].includes(res.status), `refund answered ${res.status}`);
          await res.arrayBuffer();
          const op = opGet(k);
          if (op.status !== 'queued') continue; // a worker fetched it first

          const resp = await page.goto(`${riverUI}/jobs/${op.job_id}`);
          assert.equal(resp.status(), 200);
          await page.getByRole('heading', { level: 1, name: 'refund_order' }).waitFor();
          const cancelButton = page.getByRole('button', { name: 'Cancel', exact: true });
          await cancelButton.waitFor();
          if (!(await cancelButton.isEnabled())) continue; // it already ran
          const cancelCall = page.waitForResponse((r) => r.url().endsWith('/ops/riverui/api/jobs/cancel') && r.request().method() === 'POST');
          await cancelButton.click();
          const answer = await cancelCall;
          assert.ok(answer.ok(), `River UI's cancel answered ${answer.status()}`);

          // River cancels a queued job at once; a running one stays running.
          const jobRes = await fetch(`${riverUI}/api/jobs/${op.job_id}`, { headers: { authorization: opsBasic } });
          assert.equal(jobRes.status, 200);
          const job = await json(jobRes);
          if (job.state !== 'cancelled') continue;
          await page.getByRole('definition').filter({ hasText: /^Cancelled$/ }).waitFor();
          chosen = { key: k, args, operationID: op.operation_id, jobID: op.job_id };
          t.diagnostic(`job ${op.job_id} cancelled while queued, on try ${i + 1}`);
        }
      } catch (err) {
        await dump(page, err);
      } finally {
        await queue('resume');
      }
      assert.ok(chosen, 'an operator cancelled a queued refund in River UI');
      assert.deepEqual(errors, [], 'no page errors');
    } finally {
      await context.close();
    }
  });
  if (!chosen) return;

  let failed;
  await t.test('the reaper fails it job_cancelled_by_operator, not cancelled', async () => {
    failed = await poll(
      'the reaper fails the operation',
      async () => {
        const op = opGet(chosen.key);
        return { done: op.status === 'failed', value: op };
      },
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    assert.equal(failed.operation_id, chosen.operationID);
    assert.equal(failed.error.code, 'job_cancelled_by_operator', JSON.stringify(failed.error));
    assert.match(failed.error.message, new RegExp(`job ${chosen.jobID} was cancelled in River by an operator`));
    assert.match(failed.error.message, /its owner did not cancel it, and an operator can re-drive it/);
    const abandon = failed.audit.find((e) => e.decision === 'failed');
    assert.ok(abandon?.reason.startsWith('abandon: job_cancelled_by_operator: '), JSON.stringify(failed.audit));

    // The agent's retry with the same key is told the same (the REST twin
    // answers 502), and nothing runs.
    const replay = await fetchPatiently(`${base}/v1/tools/refund_order`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'idempotency-key': chosen.key, 'content-type': 'application/json' },
      body: JSON.stringify(chosen.args),
    });
    assert.equal(replay.status, 502);
    const body = await json(replay);
    assert.equal(body.error.code, 'job_cancelled_by_operator', JSON.stringify(body));
    assert.equal(await refundsOfOperation(chosen.operationID), 0, 'no refund of the cancelled operation yet');
  });
  if (!failed) return;

  await t.test('an operator looks first (--dry-run), then re-drives it: one refund', async () => {
    // The dry run says it would re-drive on a fresh job (River will not run
    // a cancelled job again) under the same downstream key, and changes
    // nothing.
    const before = opGet(chosen.key);
    const dry = redrive(chosen.key, '--dry-run');
    assert.equal(dry.action, 'would_redrive', JSON.stringify(dry));
    assert.equal(dry.status, 'failed');
    assert.equal(dry.fresh_job, true);
    assert.equal(dry.next_generation, false);
    assert.deepEqual(opGet(chosen.key), before, 'a dry run changes nothing');
    assert.equal(await refundsOfOperation(chosen.operationID), 0);

    const line = redrive(chosen.key);
    assert.equal(line.action, 'redriven', JSON.stringify(line));
    assert.equal(line.status, 'queued');
    assert.equal(line.fresh_job, true);
    assert.notEqual(line.job_id, chosen.jobID);
    assert.equal(line.downstream_key, failed.downstream_key, 'the downstream key stays');

    const succeeded = await poll(
      'the re-driven refund succeeds',
      async () => {
        const op = opGet(chosen.key);
        return { done: op.status === 'succeeded', value: op };
      },
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    assert.equal(succeeded.operation_id, chosen.operationID);
    assert.equal(succeeded.generation, 0);
    assert.deepEqual(
      succeeded.audit.map((e) => e.decision),
      ['accepted', 'failed', 'replayed', 'redriven', 'started', 'succeeded'],
    );
    assert.equal(succeeded.audit.find((e) => e.decision === 'redriven').user_id, 'ops-browser');

    // Exactly one refund of the operation at the test Stripe, under its
    // downstream key; counted per operation, as the other files refund at
    // the same test Stripe at the same time.
    assert.equal(await refundsOfOperation(chosen.operationID), 1);
    const stats = await control('GET', '/_stats');
    assert.equal(stats.refunds_by_key[succeeded.downstream_key], 1);
    const refunds = (await refundsOf('ch_opcancel')).filter((r) => r.metadata.idemgate_operation_id === chosen.operationID);
    assert.equal(refunds.length, 1, JSON.stringify(refunds));
    assert.equal(refunds[0].amount, chosen.args.amount_cents);
    assert.equal(refunds[0].metadata.idemgate_downstream_key, succeeded.downstream_key);
  });
});
