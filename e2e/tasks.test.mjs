// MCP tasks (protocol revision 2025-11-25) with the official TypeScript SDK
// as the client: client.experimental.tasks.callToolStream, getTask,
// listTasks, cancelTask. Refunds land at the test Stripe (internal/stripetest),
// which counts them per downstream key.
//
// Run through e2e/run.sh, which besides the variables of mcp.test.mjs sets:
//   IDEMGATE_WORKER_BIN        the built cmd/worker, started and stopped here
//   IDEMGATE_TEST_STRIPE_URL   the test Stripe's base URL (GET /_stats)
//   E2E_WORKER_STRIPE_API_BASE, E2E_WORKER_SECRET   the worker's settings
// The files run one at a time (--test-concurrency=1): the worker this file
// starts must not meet mcp.test.mjs's operations, which stay queued.

import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { EmptyResultSchema, ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

import { eventually, requiredEnv, startWorker, stopWorker, stripeStats } from './worker.mjs';

const baseURL = requiredEnv('IDEMGATE_URL');
const token = requiredEnv('IDEMGATE_TOKEN_ACME');
const stripeURL = requiredEnv('IDEMGATE_TEST_STRIPE_URL');

function freshKey(label) {
  return `e2e:task:${label}:${Date.now().toString(36)}.${randomBytes(6).toString('hex')}`;
}

async function connect() {
  const client = new Client({ name: 'idemgate-e2e-tasks', version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', baseURL), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  // The client learns which tools support tasks from tools/list.
  await client.listTools();
  return client;
}

async function stripeControl(method, path, body) {
  const resp = await fetch(new URL(path, stripeURL), {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.equal(resp.status, 200, `${method} ${path}`);
  return resp.json();
}

function refundArgs(key, amount) {
  return { order_id: 'ord_a71', amount_cents: amount, idempotency_key: key };
}

/** Runs callToolStream to its end and returns its messages by type. */
async function streamAll(client, args) {
  const messages = [];
  for await (const m of client.experimental.tasks.callToolStream({ name: 'refund_order', arguments: args })) {
    messages.push(m);
  }
  return messages;
}

/** Sends the task-augmented call and stops reading after the task is created. */
async function createTask(client, args) {
  for await (const m of client.experimental.tasks.callToolStream({ name: 'refund_order', arguments: args })) {
    if (m.type === 'error') {
      throw m.error;
    }
    if (m.type === 'taskCreated') {
      return m.task;
    }
  }
  throw new Error('the stream ended without a task');
}

describe('MCP tasks', () => {
  let client;
  let worker;

  before(async () => {
    client = await connect();
  });
  after(async () => {
    if (worker) {
      await stopWorker(worker);
    }
    await client?.close();
  });

  test('an unknown method is an McpError -32601; a foreign Origin is refused with 403', async () => {
    await assert.rejects(client.request({ method: 'no/such/method' }, EmptyResultSchema), (err) => {
      assert.ok(err instanceof McpError, `an McpError, not a transport error: ${err}`);
      assert.equal(err.code, ErrorCode.MethodNotFound);
      return true;
    });
    // The same over plain HTTP: a JSON-RPC error in a JSON body.
    const headers = {
      Authorization: `Bearer ${token}`,
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      'Mcp-Protocol-Version': '2025-11-25',
    };
    const unknown = await fetch(new URL('/mcp', baseURL), {
      method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'no/such/method' }),
    });
    assert.equal(unknown.headers.get('content-type'), 'application/json');
    const body = await unknown.json();
    assert.equal(body.id, 7);
    assert.equal(body.error.code, -32601);

    const foreign = await fetch(new URL('/mcp', baseURL), {
      method: 'POST', headers: { ...headers, Origin: 'http://evil.example.com' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/list' }),
    });
    assert.equal(foreign.status, 403);
    assert.equal(foreign.headers.get('content-type'), 'application/json');
    // And through the SDK's transport: the client cannot connect.
    const evil = new Client({ name: 'idemgate-e2e-evil', version: '0.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL('/mcp', baseURL), {
      requestInit: { headers: { Authorization: `Bearer ${token}`, Origin: 'http://evil.example.com' } },
    });
    await assert.rejects(evil.connect(transport), /403|Forbidden/);
  });

  test('mutations advertise optional task support; reads do not', async () => {
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    for (const name of ['refund_order', 'apply_credit', 'reset_seat', 'send_password_reset']) {
      assert.equal(byName[name].execution?.taskSupport, 'optional', name);
    }
    assert.equal(byName.get_operation.execution, undefined);
    assert.ok(client.getServerCapabilities().tasks?.requests?.tools?.call, 'capabilities.tasks.requests.tools.call');
  });

  test('callToolStream yields the task, then the result; the same key is the same task and one refund', async () => {
    worker = startWorker();
    const key = freshKey('refund');
    const first = await streamAll(client, refundArgs(key, 1200));
    const errors = first.filter((m) => m.type === 'error');
    assert.deepEqual(errors, [], `stream errors: ${errors.map((e) => e.error?.message)}\n${worker.log()}`);
    const created = first.find((m) => m.type === 'taskCreated');
    assert.ok(created, 'a taskCreated message');
    assert.equal(first[0].type, 'taskCreated', 'the task comes first');
    const result = first.at(-1);
    assert.equal(result.type, 'result');
    const answer = result.result.structuredContent;
    assert.equal(answer.operation.status, 'succeeded');
    assert.equal(answer.operation.operation_id, created.task.taskId, 'task id = operation id');
    assert.match(answer.operation.result.refund_id, /^re_/);

    const again = await streamAll(client, refundArgs(key, 1200));
    const createdAgain = again.find((m) => m.type === 'taskCreated');
    assert.equal(createdAgain.task.taskId, created.task.taskId, 'the same key retried as a task is the same task');
    assert.equal(again.at(-1).type, 'result');

    const stats = await stripeStats();
    assert.equal(stats.refunds_by_key[`idg_${created.task.taskId}_0`], 1, 'one refund at the test Stripe');

    const task = await client.experimental.tasks.getTask(created.task.taskId);
    assert.equal(task.status, 'completed');
    const listed = await client.experimental.tasks.listTasks();
    assert.ok(listed.tasks.some((t) => t.taskId === created.task.taskId), 'listTasks shows it');
  });

  test('during a Stripe outage, get_operation and the task show the last error and the next attempt; cancelTask is refused', async () => {
    assert.ok(worker, 'the previous test started a worker');
    // ord_9f2's charge answers 503 until the outage is cleared.
    await stripeControl('POST', '/_charges', {
      id: 'ch_123', amount: 5000, currency: 'usd', fail: { status: 503, type: 'api_error', code: 'service_unavailable' },
    });
    try {
      const key = freshKey('outage');
      const task = await createTask(client, { order_id: 'ord_9f2', amount_cents: 250, idempotency_key: key });
      const op = await eventually(async () => {
        const res = await client.callTool({ name: 'get_operation', arguments: { tool: 'refund_order', idempotency_key: key } });
        const got = res.structuredContent;
        return got.status === 'queued' && got.last_error && got.next_attempt_at ? got : undefined;
      }, `the refund retried after the outage's 503\n${worker.log()}`);
      assert.equal(op.operation_id, task.taskId);
      assert.ok(op.attempts >= 1);
      assert.match(op.last_error.code, /^downstream_/);
      assert.match(op.last_error.message, /503|unavailable/i);
      assert.ok(!Number.isNaN(Date.parse(op.next_attempt_at)), op.next_attempt_at);

      const status = await client.experimental.tasks.getTask(task.taskId);
      assert.equal(status.status, 'working');
      assert.match(status.statusMessage, /last error: downstream_/);
      assert.ok(status.pollInterval >= 200);
      // An attempt may have reached Stripe: the task is not cancelled.
      await assert.rejects(client.experimental.tasks.cancelTask(task.taskId), /started/);
    } finally {
      await stripeControl('POST', '/_clear_charge_error?id=ch_123');
    }
  });

  test('cancelTask on a queued operation (worker stopped) cancels it; no refund once the worker runs again', async () => {
    assert.ok(worker, 'the previous test started a worker');
    await stopWorker(worker);
    worker = undefined;

    const key = freshKey('cancel');
    const task = await createTask(client, refundArgs(key, 300));
    assert.equal(task.status, 'working');
    const cancelled = await client.experimental.tasks.cancelTask(task.taskId);
    assert.equal(cancelled.status, 'cancelled');
    assert.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'cancelled');
    await assert.rejects(client.experimental.tasks.cancelTask(task.taskId), /terminal/, 'a cancelled task cannot be cancelled again');

    // The worker starts again and works: a later refund succeeds, the
    // cancelled one never reaches Stripe.
    worker = startWorker();
    const sentinel = await streamAll(client, refundArgs(freshKey('after-cancel'), 100));
    assert.equal(sentinel.at(-1).type, 'result', `the worker runs again\n${worker.log()}`);
    await eventually(async () => (await stripeStats()).refunds_created > 0, 'the sentinel refund');
    const stats = await stripeStats();
    assert.equal(stats.refunds_by_key[`idg_${task.taskId}_0`], undefined, 'no refund for the cancelled task');
    assert.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'cancelled');
  });
});
