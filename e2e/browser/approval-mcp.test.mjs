// MCP clients waiting for a person's approval, with a person deciding on
// the page in Chromium. A refund above acme's threshold (seed.json:
// refund_order above 10000 cents):
//   - the official TypeScript SDK (revision 2025-11-25, experimental tasks):
//     the task is input_required with the page in its status message, a
//     retry gets the same task, fin-lead approves on the page, the task
//     completes and the test Stripe made exactly one refund; a denied one
//     ends approval_denied with no refund;
//   - the go-sdk v1.8 client (revision 2026-07-28; e2e/goclient, run as a
//     subprocess): a plain call and the tasks extension's task wait with the
//     page as a URL-mode elicitation, retries get the same task,
//     tasks/update only acknowledges, fin-lead approves on the page and the
//     task completes with one refund; an expired one ends approval_expired
//     with no refund (its window moved into the past in the database).
//
// Run by e2e/browser/run.sh once per engine, which sets IDEMGATE_URL,
// TESTSTRIPE_URL, IDEMGATE_ENGINE, DATABASE_URL and GOCLIENT (the built
// e2e/goclient).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { decideOnPage, env, poll, refundsOf } from './helpers.mjs';

const base = env('IDEMGATE_URL');
const stripe = env('TESTSTRIPE_URL');
const engine = env('IDEMGATE_ENGINE');
const databaseURL = env('DATABASE_URL');
const goclient = env('GOCLIENT');

const seed = JSON.parse(readFileSync(new URL('./seed.json', import.meta.url), 'utf8'));
const tokenOf = (user) => seed.tokens.find((t) => t.tenant === 'acme' && t.user === user).token;
const requester = tokenOf('support-bot');
const approver = tokenOf('fin-lead');

const orderID = 'ord_approval_mcp';
const run = Date.now();
const args = (key, amount) => ({ order_id: orderID, amount_cents: amount, idempotency_key: key });

let client;
before(async () => {
  const res = await fetch(`${stripe}/_charges`, { method: 'POST', body: JSON.stringify({ id: 'ch_approval_mcp', amount: 500_000, currency: 'usd' }) });
  assert.equal(res.status, 200, 'the test Stripe takes the charge');
  await res.arrayBuffer();
  client = new Client({ name: 'idemgate-e2e-approval', version: '0.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL('/mcp', base), {
    requestInit: { headers: { Authorization: `Bearer ${requester}` } },
  }));
  await client.listTools(); // the SDK learns which tools take tasks
});
after(async () => {
  await client?.close();
});

// createTask makes the task-augmented call and returns the task it
// created, without waiting for its end.
async function createTask(key, amount) {
  for await (const m of client.experimental.tasks.callToolStream({ name: 'refund_order', arguments: args(key, amount) })) {
    if (m.type === 'error') throw m.error;
    if (m.type === 'taskCreated') return m.task;
  }
  throw new Error('the stream ended without a task');
}

// pageOf is the approval page's URL in a task's status message.
function pageOf(task) {
  const url = /https?:\/\/\S+\/approvals\/[0-9a-f-]{36}/.exec(task.statusMessage ?? '')?.[0];
  assert.ok(url, `no approval page in ${JSON.stringify(task)}`);
  assert.ok(url.startsWith(`${base}/approvals/${task.taskId}`), url);
  return url;
}

// go runs e2e/goclient as the requester and returns its JSON answer.
function go(...argv) {
  const out = execFileSync(goclient, argv, { encoding: 'utf8', env: { ...process.env, IDEMGATE_TOKEN: requester } });
  return JSON.parse(out);
}

// sql runs one statement on the test's database (Postgres or SQLite).
function sql(statement) {
  if (databaseURL.startsWith('sqlite:')) {
    execFileSync('sqlite3', ['-cmd', '.timeout 10000', databaseURL.replace(/^sqlite:(\/\/)?/, ''), statement]);
  } else {
    // pgx's own parameters (pool_max_conns, …) are not libpq's.
    const url = new URL(databaseURL);
    for (const name of [...url.searchParams.keys()].filter((k) => k.startsWith('pool_'))) url.searchParams.delete(name);
    execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', url.toString(), '-c', statement]);
  }
}

test(`TypeScript SDK task (2025-11-25): waits input_required, a person approves on the page, one refund (${engine})`, { timeout: 180_000 }, async () => {
  const key = `mcp-ts-approve-${run}`;
  const task = await createTask(key, 25_000);
  assert.equal(task.status, 'input_required', JSON.stringify(task));
  assert.match(task.statusMessage, /who is not support-bot must approve it at /);
  const url = pageOf(task);
  // Retried: the same task, still waiting; nothing refunded.
  const again = await createTask(key, 25_000);
  assert.equal(again.taskId, task.taskId);
  assert.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'input_required');
  assert.equal(await refundsOf(task.taskId), 0);

  await decideOnPage(task.taskId, url, approver, 'Approve');

  const done = await poll('the approved task completes', async () => {
    const t = await client.experimental.tasks.getTask(task.taskId);
    return { done: t.status !== 'input_required' && t.status !== 'working', value: t };
  }, { timeoutMs: 60_000 });
  assert.equal(done.status, 'completed', JSON.stringify(done));
  // The agent's plain retry: the same operation, succeeded, replayed.
  const replay = await client.callTool({ name: 'refund_order', arguments: args(key, 25_000) });
  assert.equal(replay.structuredContent.operation.operation_id, task.taskId);
  assert.equal(replay.structuredContent.operation.status, 'succeeded');
  assert.equal(replay.structuredContent.replayed, true);
  assert.equal(await refundsOf(task.taskId), 1, 'exactly one refund reached the test Stripe');
});

test(`TypeScript SDK task (2025-11-25): denied on the page, approval_denied, no refund (${engine})`, { timeout: 180_000 }, async () => {
  const key = `mcp-ts-deny-${run}`;
  const task = await createTask(key, 30_000);
  assert.equal(task.status, 'input_required');
  await decideOnPage(task.taskId, pageOf(task), approver, 'Deny');
  const ended = await client.experimental.tasks.getTask(task.taskId);
  assert.equal(ended.status, 'failed', JSON.stringify(ended));
  assert.match(ended.statusMessage, /^approval_denied: denied by fin-lead/);
  const replay = await client.callTool({ name: 'refund_order', arguments: args(key, 30_000) });
  assert.equal(replay.isError, true);
  assert.equal(replay.structuredContent.error.code, 'approval_denied');
  assert.equal(await refundsOf(task.taskId), 0);
});

test(`go-sdk client (2026-07-28): the task extension's URL elicitation, approved on the page, one refund (${engine})`, { timeout: 180_000 }, async () => {
  const key = `mcp-go-approve-${run}`;
  const arguments_ = JSON.stringify(args(key, 40_000));
  // A task of the extension: input_required; retried, the same task.
  const created = go('task-call', 'refund_order', arguments_);
  assert.equal(created.resultType, 'task', JSON.stringify(created));
  assert.equal(created.status, 'input_required');
  const id = created.taskId;
  assert.equal(go('task-call', 'refund_order', arguments_).taskId, id);
  // The go-sdk session's plain call with the key: the same waiting
  // operation, with its page.
  const plain = go('call', 'refund_order', arguments_);
  assert.equal(plain.structuredContent.operation.operation_id, id, JSON.stringify(plain));
  assert.equal(plain.structuredContent.operation.status, 'awaiting_approval');
  assert.equal(plain.structuredContent.retry_after_ms, 5000);

  // tasks/get asks for the page as a URL-mode elicitation.
  const waiting = go('task-get', id);
  assert.equal(waiting.status, 'input_required');
  const request = waiting.inputRequests.approval;
  assert.equal(request.method, 'elicitation/create');
  assert.equal(request.params.mode, 'url');
  assert.equal(request.params.url, plain.structuredContent.operation.approval.url);
  assert.equal(request.params.url, `${base}/approvals/${id}`);
  // The client answering the elicitation decides nothing.
  assert.equal(go('task-update', id).resultType, 'complete');
  assert.equal(go('task-get', id).status, 'input_required');
  assert.equal(await refundsOf(id), 0);

  await decideOnPage(id, request.params.url, approver, 'Approve');
  assert.equal(go('task-update', id).resultType, 'complete');

  const done = await poll('the approved task completes', async () => {
    const t = go('task-get', id);
    return { done: t.status === 'completed', value: t };
  }, { timeoutMs: 60_000 });
  assert.equal(done.result.structuredContent.operation.status, 'succeeded', JSON.stringify(done));
  assert.equal(done.inputRequests, undefined);
  assert.equal(await refundsOf(id), 1, 'exactly one refund reached the test Stripe');
  assert.equal(go('call', 'refund_order', arguments_).structuredContent.replayed, true);
  assert.equal(await refundsOf(id), 1);
});

test(`go-sdk client (2026-07-28): nobody decides in time, approval_expired, no refund (${engine})`, { timeout: 180_000 }, async () => {
  const key = `mcp-go-expire-${run}`;
  const arguments_ = JSON.stringify(args(key, 45_000));
  const created = go('task-call', 'refund_order', arguments_);
  assert.equal(created.status, 'input_required', JSON.stringify(created));
  const id = created.taskId;
  // The window ends (moved into the past); the reaper's pass expires it.
  const past = databaseURL.startsWith('sqlite:') ? `'2000-01-01T00:00:00.000Z'` : `now() - interval '1 second'`;
  sql(`UPDATE idempotency_claims SET approval_expires_at = ${past} WHERE operation_id = '${id}'`);
  const done = await poll('the task expires', async () => {
    const t = go('task-get', id);
    return { done: t.status === 'completed', value: t };
  }, { timeoutMs: 60_000 });
  assert.equal(done.result.isError, true, JSON.stringify(done));
  assert.equal(done.result.structuredContent.error.code, 'approval_expired');
  const replay = go('call', 'refund_order', arguments_);
  assert.equal(replay.structuredContent.error.code, 'approval_expired');
  assert.equal(await refundsOf(id), 0);
});
