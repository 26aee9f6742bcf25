// MCP 2026-07-28 (sessionless: server/discover, no initialize, the client's
// info and capabilities in each request's _meta) with the official
// TypeScript SDK v2 (@modelcontextprotocol/client) as the client, and its
// tasks extension (@modelcontextprotocol/ext-tasks):
//   - plain tools/call of refund_order and get_operation;
//   - multi round-trip requests (MRTR), which the client answers through
//     its elicitation/create handler and retries on its own: an approval
//     wait (a refund above acme's threshold, seed.json) as a URL-mode
//     elicitation, approved by another person of the tenant through the
//     api; a re-minted key (a possible duplicate) as a form elicitation,
//     confirmed or declined;
//   - a task of the extension io.modelcontextprotocol/tasks, polled with
//     tasks/get until it completes.
// Each refund is counted where it lands: the operations of its order
// (list_operations) and the test Stripe's refunds by operation.
//
// Run through e2e/run.sh (the variables of tasks.test.mjs); this file runs
// a worker of its own, like tasks.test.mjs, one file at a time.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createTaskSessionFromClient } from '@modelcontextprotocol/ext-tasks/client';

import { eventually, requiredEnv, startWorker, stopWorker, stripeStats } from './worker.mjs';

const REVISION = '2026-07-28';
const baseURL = requiredEnv('IDEMGATE_URL');
const token = requiredEnv('IDEMGATE_TOKEN_ACME');
const mcpURL = new URL('/mcp', baseURL);

// The approver: another person of acme, with approvals:decide.
const seed = JSON.parse(readFileSync(new URL('./seed.json', import.meta.url), 'utf8'));
const approverToken = seed.tokens.find((t) => t.tenant === 'acme' && t.scopes.includes('approvals:decide'))?.token;
assert.ok(approverToken, 'seed.json has an acme token with approvals:decide');
const threshold = seed.tenants?.find((t) => t.tenant === 'acme')?.approval_thresholds?.refund_order;
assert.ok(threshold > 0, 'seed.json sets acme\'s refund_order approval threshold');

// Each client gives up after this many rounds of one call.
const MAX_ROUNDS = 4;

function freshKey(label) {
  return `e2e:v2:${label}:${Date.now().toString(36)}.${randomBytes(6).toString('hex')}`;
}

/** A fetch that records each JSON-RPC request it sends (headers and body). */
function recordingFetch(sent) {
  return async (url, init = {}) => {
    if (typeof init.body === 'string') {
      sent.push({ headers: new Headers(init.headers), body: JSON.parse(init.body) });
    }
    return fetch(url, init);
  };
}

/**
 * Connects a v2 client pinned to 2026-07-28. With elicit, it declares form
 * and URL elicitation and answers elicitation/create with elicit(params);
 * client.sent is what it sent.
 */
async function connect(elicit) {
  const client = new Client({ name: 'idemgate-e2e-v2', version: '0.0.0' }, {
    versionNegotiation: { mode: { pin: REVISION } },
    inputRequired: { maxRounds: MAX_ROUNDS },
    ...(elicit ? { capabilities: { elicitation: { form: {}, url: {} } } } : {}),
  });
  if (elicit) {
    client.setRequestHandler('elicitation/create', (request) => elicit(request.params));
  }
  client.sent = [];
  await client.connect(new StreamableHTTPClientTransport(mcpURL, {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
    fetch: recordingFetch(client.sent),
  }));
  return client;
}

/** Calls a tool that must succeed; returns its structuredContent. */
async function callOK(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  assert.ok(!res.isError, `${name}: unexpected tool error: ${JSON.stringify(res.structuredContent)}`);
  assert.ok(res.structuredContent, `${name}: no structuredContent: ${JSON.stringify(res)}`);
  return res.structuredContent;
}

/** The tools/call requests the client sent. */
const toolCalls = (client) => client.sent.filter((m) => m.body.method === 'tools/call');

/** The refund operations of an order, newest first. */
async function operationsOf(client, orderID) {
  const page = await callOK(client, 'list_operations', { tool: 'refund_order', arg: `order_id=${orderID}`, limit: 100 });
  assert.equal(page.next_cursor, undefined);
  return page.operations;
}

/** Waits until the refund with key has succeeded; returns the operation. */
async function succeeded(client, key) {
  return eventually(async () => {
    const op = await callOK(client, 'get_operation', { tool: 'refund_order', idempotency_key: key });
    assert.ok(!['failed', 'awaiting_approval'].includes(op.status), JSON.stringify(op));
    return op.status === 'succeeded' && op;
  }, `refund ${key} succeeded`);
}

/** The refunds the test Stripe made for an operation. */
async function refundsOf(operationID) {
  const stats = await stripeStats();
  return stats.refunds_by_metadata?.idemgate_operation_id?.[operationID] ?? 0;
}

/** The operation id an approval page's URL names. */
function approvalID(url) {
  const id = /\/approvals\/([0-9a-f-]{36})$/.exec(new URL(url).pathname)?.[1];
  assert.ok(id, `not an approval page: ${url}`);
  return id;
}

/**
 * Approves operation id as the approver, as the approval page does: reads
 * it (GET /v1/approvals/{id}), then decides on the fingerprint it showed.
 */
async function approve(id) {
  const headers = { Authorization: `Bearer ${approverToken}`, 'Content-Type': 'application/json' };
  const shown = await fetch(new URL(`/v1/approvals/${id}`, baseURL), { headers });
  assert.equal(shown.status, 200);
  const approval = await shown.json();
  assert.equal(approval.status, 'awaiting_approval');
  const res = await fetch(new URL(`/v1/approvals/${id}`, baseURL), {
    method: 'POST', headers, body: JSON.stringify({ decision: 'approve', args_hash: approval.args_hash }),
  });
  const body = await res.text();
  assert.equal(res.status, 200, body);
  return JSON.parse(body);
}

let worker;
before(() => {
  worker = startWorker();
});
after(async () => {
  if (worker) {
    await stopWorker(worker);
  }
});

test('plain tools/call over 2026-07-28: refund_order, then get_operation; one refund', async () => {
  const client = await connect();
  try {
    assert.equal(client.getProtocolEra(), 'modern');
    assert.equal(client.getNegotiatedProtocolVersion(), REVISION);
    const key = freshKey('plain');
    const first = await callOK(client, 'refund_order', { order_id: 'ord_v2_plain', amount_cents: 1500, idempotency_key: key });
    assert.equal(first.outcome, 'accepted');
    assert.equal(first.operation.idempotency_key, key);
    const op = await callOK(client, 'get_operation', { tool: 'refund_order', idempotency_key: key });
    assert.equal(op.operation_id, first.operation.operation_id);

    // Sessionless on the wire: server/discover, no initialize; each call
    // names the revision in its header and its _meta.
    const methods = client.sent.map((m) => m.body.method);
    assert.ok(methods.includes('server/discover'), methods.join());
    assert.ok(!methods.includes('initialize'), methods.join());
    for (const { headers, body } of toolCalls(client)) {
      assert.equal(headers.get('mcp-protocol-version'), REVISION);
      assert.equal(body.params._meta['io.modelcontextprotocol/protocolVersion'], REVISION);
    }

    const done = await succeeded(client, key);
    assert.match(done.result.refund_id, /^re_/);
    assert.equal(await refundsOf(done.operation_id), 1, 'one refund at the test Stripe');
    assert.equal((await operationsOf(client, 'ord_v2_plain')).length, 1);
  } finally {
    await client.close();
  }
});

test('approval: the URL elicitation names the page, a person approves, the automatic retry gets the outcome; one refund', async () => {
  const asked = [];
  let decision;
  const client = await connect(async (params) => {
    asked.push(params);
    assert.equal(params.mode, 'url', JSON.stringify(params));
    // "A person approves on the page": another person of the tenant
    // decides through the api the page posts to.
    decision = await approve(approvalID(params.url));
    return { action: 'accept' };
  });
  try {
    const key = freshKey('approval');
    const amount = threshold + 2345;
    const ans = await callOK(client, 'refund_order', { order_id: 'ord_v2_approval', amount_cents: amount, idempotency_key: key });
    const opID = ans.operation.operation_id;

    assert.equal(asked.length, 1, 'asked once');
    assert.equal(asked[0].mode, 'url');
    assert.equal(approvalID(asked[0].url), opID, 'the page is the operation\'s');
    assert.ok(asked[0].message.includes(opID), asked[0].message);
    assert.equal(decision.operation_id, opID);
    assert.notEqual(decision.status, 'awaiting_approval');

    // The outcome came with the client's own retry: the same call with the
    // state the server issued and the handler's answer.
    const calls = toolCalls(client);
    assert.equal(calls.length, 2, 'the call and one retry');
    assert.equal(calls[0].body.params.requestState, undefined);
    assert.equal(typeof calls[1].body.params.requestState, 'string');
    assert.deepEqual(calls[1].body.params.inputResponses, { approval: { action: 'accept' } });
    assert.deepEqual(calls[1].body.params.arguments, calls[0].body.params.arguments);
    assert.ok(['accepted', 'in_flight', 'replayed'].includes(ans.outcome), ans.outcome);
    assert.ok(['queued', 'running', 'succeeded'].includes(ans.operation.status), ans.operation.status);

    const done = await succeeded(client, key);
    assert.equal(done.operation_id, opID);
    const ops = await operationsOf(client, 'ord_v2_approval');
    assert.deepEqual(ops.map((o) => o.operation_id), [opID], 'exactly one operation');
    assert.equal(await refundsOf(opID), 1, 'exactly one refund at the test Stripe');
  } finally {
    await client.close();
  }
});

describe('a re-minted key for the same refund (possible duplicate)', () => {
  const orderID = 'ord_v2_dup';
  const args = (key) => ({ order_id: orderID, amount_cents: 2222, reason: 'parcel lost', idempotency_key: key });
  let first;
  let second;

  test('confirmed as new through the form elicitation: one more, separate refund', async () => {
    const plain = await connect();
    try {
      first = await callOK(plain, 'refund_order', args(freshKey('dup-k1')));
      assert.equal(first.outcome, 'accepted');
    } finally {
      await plain.close();
    }

    const asked = [];
    const client = await connect(async (params) => {
      asked.push(params);
      return { action: 'accept', content: { confirm: true } };
    });
    try {
      const key = freshKey('dup-k2');
      second = await callOK(client, 'refund_order', args(key));
      assert.equal(asked.length, 1, 'asked once');
      assert.equal(asked[0].mode, 'form');
      assert.ok(asked[0].message.includes(first.operation.operation_id), asked[0].message);
      assert.equal(asked[0].requestedSchema.properties.confirm.type, 'boolean');
      assert.deepEqual(toolCalls(client)[1].body.params.inputResponses,
        { confirm_new_intent: { action: 'accept', content: { confirm: true } } });
      assert.equal(second.outcome, 'accepted');
      assert.equal(second.operation.idempotency_key, key);
      assert.notEqual(second.operation.operation_id, first.operation.operation_id);

      // The same key again is that second operation, without a question.
      const again = await callOK(client, 'refund_order', args(key));
      assert.equal(again.operation.operation_id, second.operation.operation_id);
      assert.equal(asked.length, 1);

      const ids = [first, second].map((a) => a.operation.operation_id);
      assert.deepEqual((await operationsOf(client, orderID)).map((o) => o.operation_id).sort(), [...ids].sort());
      for (const a of [first, second]) {
        await succeeded(client, a.operation.idempotency_key);
        assert.equal(await refundsOf(a.operation.operation_id), 1, `one refund for ${a.operation.operation_id}`);
      }
    } finally {
      await client.close();
    }
  });

  test('declined: asked once, then the tool error possible_duplicate; nothing new', async () => {
    assert.ok(second, 'needs the confirmed refund');
    const asked = [];
    const client = await connect(async (params) => {
      asked.push(params);
      return { action: 'decline' };
    });
    try {
      const key = freshKey('dup-k3');
      const res = await client.callTool({ name: 'refund_order', arguments: args(key) });
      assert.equal(res.isError, true, JSON.stringify(res));
      assert.equal(res.structuredContent.error.code, 'possible_duplicate');
      assert.equal(asked.length, 1);
      assert.equal(asked[0].mode, 'form');
      const missing = await client.callTool({ name: 'get_operation', arguments: { tool: 'refund_order', idempotency_key: key } });
      assert.equal(missing.isError, true);
      assert.equal(missing.structuredContent.error.code, 'not_found');
      assert.equal((await operationsOf(client, orderID)).length, 2, 'no operation more');
    } finally {
      await client.close();
    }
  });

  test('a client without elicitation gets the tool error possible_duplicate naming the earlier operation', async () => {
    assert.ok(second, 'needs the confirmed refund');
    const client = await connect();
    try {
      const res = await client.callTool({ name: 'refund_order', arguments: args(freshKey('dup-k4')) });
      assert.equal(res.isError, true);
      const { error, operation } = res.structuredContent;
      assert.equal(error.code, 'possible_duplicate');
      assert.ok([first, second].some((a) => a.operation.operation_id === operation.operation_id), JSON.stringify(operation));
      assert.ok(error.message.includes(operation.operation_id), error.message);
      assert.equal((await operationsOf(client, orderID)).length, 2, 'no operation more');
    } finally {
      await client.close();
    }
  });
});

/**
 * The raw request path @modelcontextprotocol/ext-tasks needs for the
 * extension's wire shapes on 2026-07-28 (the SDK's codecs refuse a
 * CreateTaskResult): one JSON-RPC request per POST, with the standard
 * headers (Mcp-Name is the tool, or the task id of tasks/*).
 */
function rawDispatch(sent) {
  let id = 0;
  return async (request, options = {}) => {
    const body = { ...request, jsonrpc: '2.0', id: `ext-${++id}` };
    const name = body.method === 'tools/call' ? body.params?.name : body.params?.taskId;
    sent.push(body);
    const res = await fetch(mcpURL, {
      method: 'POST',
      headers: {
        Authorization: `Bearer ${token}`,
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        'Mcp-Protocol-Version': REVISION,
        'Mcp-Method': body.method,
        ...(name ? { 'Mcp-Name': name } : {}),
        ...options.context?.headers,
      },
      body: JSON.stringify(body),
      signal: options.signal,
    });
    assert.equal(res.headers.get('content-type'), 'application/json', `${body.method}: HTTP ${res.status}`);
    const msg = await res.json();
    assert.equal(msg.id, body.id);
    return msg.error ? { kind: 'error', error: msg.error } : { kind: 'result', result: msg.result };
  };
}

test('tasks extension through @modelcontextprotocol/ext-tasks: a task, tasks/get until completed; one refund', async () => {
  // No worker while the task is created: the refund cannot finish within
  // the call's wait, so the server answers a task.
  await stopWorker(worker);
  worker = undefined;
  const client = await connect();
  const sent = [];
  const session = createTaskSessionFromClient(client, {
    endpointId: 'idemgate-e2e-v2',
    rawDispatch: rawDispatch(sent),
    v2RequestFraming: { protocolVersion: REVISION, clientInfo: { name: 'idemgate-e2e-v2', version: '0.0.0' }, clientCapabilities: {} },
  });
  try {
    assert.equal(session.capabilities.execution, true, 'server/discover declared the extension');
    const key = freshKey('task');
    const execution = await session.callTool('refund_order', { order_id: 'ord_v2_task', amount_cents: 1700, idempotency_key: key },
      { task: { preference: 'require' } });
    assert.equal(execution.kind, 'task');
    const taskID = execution.handle.taskId;
    const op = await callOK(client, 'get_operation', { tool: 'refund_order', idempotency_key: key });
    assert.equal(taskID, op.operation_id, 'the task id is the operation id');
    const working = await session.task(taskID).snapshot();
    assert.equal(working.status, 'working');
    assert.ok(working.suggestedPollIntervalMs >= 200, JSON.stringify(working.raw));

    worker = startWorker();
    const { outcome } = await execution.settle();
    assert.equal(outcome.status, 'completed', `${JSON.stringify(outcome)}\n${worker.log()}`);
    const answer = outcome.result.structuredContent;
    assert.equal(answer.operation.operation_id, taskID);
    assert.equal(answer.operation.status, 'succeeded');
    assert.match(answer.operation.result.refund_id, /^re_/);
    assert.ok(sent.filter((m) => m.method === 'tasks/get').length >= 2, 'polled with tasks/get');
    assert.ok(sent.every((m) => m.params._meta['io.modelcontextprotocol/clientCapabilities'].extensions['io.modelcontextprotocol/tasks']),
      'each request declares the extension');
    assert.equal((await session.task(taskID).snapshot()).status, 'completed');

    assert.equal(await refundsOf(taskID), 1, 'one refund at the test Stripe');
    assert.equal((await operationsOf(client, 'ord_v2_task')).length, 1);
  } finally {
    await session.close();
    await client.close();
  }
});
