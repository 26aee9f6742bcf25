// End-to-end tests of idemgate's MCP endpoint (POST /mcp, Streamable HTTP,
// stateless) with the official MCP TypeScript SDK as the client.
//
// Run through e2e/run.sh, which starts the api on a fresh, seeded database
// (e2e/seed.json) without a worker, and sets:
//   IDEMGATE_URL                  the api's base URL, e.g. http://127.0.0.1:41234
//   IDEMGATE_TOKEN_ACME           acme support bot: every mutation scope + operations:read
//   IDEMGATE_TOKEN_ACME_READONLY  acme, operations:read only
//   IDEMGATE_TOKEN_GLOBEX         globex support bot: billing:refund + operations:read
//
// No worker runs, so a mutation stays queued: a repeated call answers
// in_flight. The assertions also accept a terminal claim (replayed), so the
// suite keeps passing once a worker joins the e2e setup.

import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';

function requiredEnv(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run the e2e tests with e2e/run.sh`);
  }
  return v;
}

const baseURL = requiredEnv('IDEMGATE_URL');
const tokens = {
  acme: requiredEnv('IDEMGATE_TOKEN_ACME'),
  acmeReadOnly: requiredEnv('IDEMGATE_TOKEN_ACME_READONLY'),
  globex: requiredEnv('IDEMGATE_TOKEN_GLOBEX'),
};
const mcpURL = new URL('/mcp', baseURL);

const MUTATIONS = ['refund_order', 'apply_credit', 'reset_seat', 'send_password_reset'];
const READS = ['get_operation', 'list_operations', 'get_order'];
const KEY_PATTERN = '^[A-Za-z0-9._:-]+$';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A fresh idempotency key, unique per run so the suite can rerun against one server. */
function freshKey(label) {
  return `e2e:${label}:${Date.now().toString(36)}.${randomBytes(6).toString('hex')}`;
}

/** Opens an MCP session; headers go on every request. */
async function connect(token, name = 'idemgate-e2e') {
  const headers = token === undefined ? {} : { Authorization: `Bearer ${token}` };
  const client = new Client({ name, version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(mcpURL, { requestInit: { headers } });
  await client.connect(transport);
  return client;
}

/** Calls a tool and checks the parts every answer shares. */
async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  assert.ok(res.structuredContent, `${name}: the answer has no structuredContent: ${JSON.stringify(res)}`);
  // Clients that read only the text content see the same JSON.
  const text = res.content?.find((c) => c.type === 'text')?.text;
  assert.ok(text, `${name}: the answer has no text content`);
  assert.deepEqual(JSON.parse(text), res.structuredContent, `${name}: text content differs from structuredContent`);
  return res;
}

/** Calls a tool that must succeed, returning its structuredContent. */
async function callOK(client, name, args) {
  const res = await call(client, name, args);
  assert.ok(!res.isError, `${name}: unexpected tool error: ${JSON.stringify(res.structuredContent)}`);
  return res.structuredContent;
}

/** Calls a tool that must fail with code, returning structuredContent.error. */
async function callError(client, name, args, code) {
  const res = await call(client, name, args);
  assert.equal(res.isError, true, `${name}: expected tool error ${code}, got ${JSON.stringify(res.structuredContent)}`);
  const { error } = res.structuredContent;
  assert.ok(error, `${name}: tool error without "error": ${JSON.stringify(res.structuredContent)}`);
  assert.equal(error.code, code, `${name}: ${JSON.stringify(error)}`);
  assert.equal(typeof error.message, 'string');
  assert.ok(error.message.length > 0, `${name}: ${code} has an empty message`);
  return error;
}

/** Checks a mutation answer's operation handle. */
function assertOperation(op, tool, key) {
  assert.ok(op, 'the answer has no operation');
  assert.match(op.operation_id, UUID);
  assert.equal(op.tool, tool);
  assert.equal(op.idempotency_key, key);
  assert.ok(['queued', 'running', 'succeeded', 'failed'].includes(op.status), `status ${op.status}`);
  assert.equal(typeof op.attempts, 'number');
  assert.ok(Number.isInteger(op.job_id) && op.job_id > 0, `job_id ${op.job_id}`);
  assert.ok(!Number.isNaN(Date.parse(op.created_at)), `created_at ${op.created_at}`);
  assert.ok(!Number.isNaN(Date.parse(op.updated_at)), `updated_at ${op.updated_at}`);
}

/** Checks that a repeated call answered from the existing claim, consistently. */
function assertRepeat(ans, first) {
  assert.ok(['in_flight', 'replayed'].includes(ans.outcome), `outcome ${ans.outcome}`);
  assert.equal(ans.replayed, ans.outcome === 'replayed', `replayed=${ans.replayed} with outcome ${ans.outcome}`);
  if (ans.outcome === 'in_flight') {
    assert.ok(['queued', 'running'].includes(ans.operation.status), `in_flight with status ${ans.operation.status}`);
    assert.ok(ans.retry_after_ms > 0, `in_flight without retry_after_ms: ${JSON.stringify(ans)}`);
  } else {
    assert.ok(['succeeded', 'failed'].includes(ans.operation.status), `replayed with status ${ans.operation.status}`);
  }
  assert.equal(ans.operation.operation_id, first.operation.operation_id, 'a repeat answered another operation');
  assert.equal(ans.operation.job_id, first.operation.job_id, 'a repeat answered another job');
}

let acme;
let acmeReadOnly;
let globex;

before(async () => {
  acme = await connect(tokens.acme, 'e2e-acme');
  // Listing the tools makes the SDK validate every later structuredContent
  // of acme's calls against the tool's outputSchema (and throw on a
  // mismatch), tool errors included.
  await acme.listTools();
  acmeReadOnly = await connect(tokens.acmeReadOnly, 'e2e-acme-readonly');
  globex = await connect(tokens.globex, 'e2e-globex');
});

after(async () => {
  await Promise.allSettled([acme, acmeReadOnly, globex].filter(Boolean).map((c) => c.close()));
});

describe('tools/list', () => {
  test('shows the six tools with schemas and annotations', async () => {
    const { tools } = await acme.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    assert.deepEqual(Object.keys(byName).sort(), [...MUTATIONS, ...READS].sort());

    for (const t of tools) {
      assert.ok(t.description, `${t.name}: no description`);
      const s = t.inputSchema;
      assert.equal(s.type, 'object', `${t.name}: inputSchema.type`);
      assert.equal(s.additionalProperties, false, `${t.name}: additionalProperties must be false`);
      assert.ok(s.properties?.idempotency_key, `${t.name}: no idempotency_key property`);
      assert.equal(t.annotations?.idempotentHint, true, `${t.name}: idempotentHint`);
      assert.equal(t.outputSchema?.type, 'object', `${t.name}: outputSchema.type`);
      assert.equal(t.outputSchema.anyOf?.length, 2, `${t.name}: outputSchema is the answer or a tool error`);
    }
    // A mutation's answer carries its typed result as operation.result.
    const refundAnswer = byName.refund_order.outputSchema.anyOf[0];
    assert.ok(refundAnswer.properties.operation.properties.result.properties.refund_id, 'refund_order: result.refund_id in outputSchema');

    for (const name of MUTATIONS) {
      const t = byName[name];
      assert.ok(t.inputSchema.required.includes('idempotency_key'), `${name}: idempotency_key not required`);
      const key = t.inputSchema.properties.idempotency_key;
      assert.equal(key.type, 'string');
      assert.equal(key.pattern, KEY_PATTERN, `${name}: key pattern`);
      assert.equal(key.minLength, 8, `${name}: key minLength`);
      assert.equal(key.maxLength, 128, `${name}: key maxLength`);
      assert.equal(t.annotations.destructiveHint, true, `${name}: destructiveHint`);
      assert.notEqual(t.annotations.readOnlyHint, true, `${name}: a mutation must not be readOnly`);
    }
    for (const name of READS) {
      const t = byName[name];
      assert.equal(t.annotations.readOnlyHint, true, `${name}: readOnlyHint`);
      assert.notEqual(t.annotations.destructiveHint, true, `${name}: a read must not be destructive`);
    }

    assert.deepEqual([...byName.refund_order.inputSchema.required].sort(), ['amount_cents', 'idempotency_key', 'order_id']);
    assert.deepEqual([...byName.get_operation.inputSchema.required].sort(), ['idempotency_key', 'tool']);
    assert.deepEqual(byName.get_operation.inputSchema.properties.tool.enum?.slice().sort(), [...MUTATIONS].sort());
    // get_order accepts a key but does not require one.
    assert.deepEqual(byName.get_order.inputSchema.required, ['order_id']);
  });
});

describe('refund_order through the gate', () => {
  const key = freshKey('refund');
  const args = { order_id: 'ord_9f2', amount_cents: 1200, reason: 'damaged in transit', idempotency_key: key };
  let first;

  test('a fresh key is accepted with an operation and a job', async () => {
    first = await callOK(acme, 'refund_order', args);
    assert.equal(first.outcome, 'accepted');
    assert.equal(first.replayed, false);
    assertOperation(first.operation, 'refund_order', key);
    if (!['succeeded', 'failed'].includes(first.operation.status)) {
      assert.ok(first.retry_after_ms > 0, `accepted but not terminal without retry_after_ms: ${JSON.stringify(first)}`);
    }
  });

  test('the same call again answers the same operation and job', async () => {
    assert.ok(first, 'needs the accepted call');
    const again = await callOK(acme, 'refund_order', args);
    assertOperation(again.operation, 'refund_order', key);
    assertRepeat(again, first);
  });

  test('a retry from another session, with another volatile reason, is the same operation', async () => {
    assert.ok(first, 'needs the accepted call');
    const other = await connect(tokens.acme, 'e2e-acme-retry');
    try {
      const again = await callOK(other, 'refund_order', { ...args, reason: 'customer called again' });
      assertRepeat(again, first);
    } finally {
      await other.close();
    }
  });

  test('the same key with another amount_cents is a conflict naming the field', async () => {
    assert.ok(first, 'needs the accepted call');
    const error = await callError(acme, 'refund_order', { ...args, amount_cents: 1300 },
      'idempotency_key_reuse_with_different_args');
    assert.deepEqual(error.fields, ['amount_cents']);
  });

  test('get_operation by tool and key returns the operation', async () => {
    assert.ok(first, 'needs the accepted call');
    const op = await callOK(acme, 'get_operation', { tool: 'refund_order', idempotency_key: key });
    assertOperation(op, 'refund_order', key);
    assert.equal(op.operation_id, first.operation.operation_id);
    assert.equal(op.job_id, first.operation.job_id);
  });

  test('the read-only token can read the operation but not refund', async () => {
    assert.ok(first, 'needs the accepted call');
    const op = await callOK(acmeReadOnly, 'get_operation', { tool: 'refund_order', idempotency_key: key });
    assert.equal(op.operation_id, first.operation.operation_id);
    await callError(acmeReadOnly, 'refund_order', { ...args, idempotency_key: freshKey('forbidden') }, 'forbidden');
  });

  test('another tenant cannot see the operation and gets its own for the same key string', async () => {
    assert.ok(first, 'needs the accepted call');
    await callError(globex, 'get_operation', { tool: 'refund_order', idempotency_key: key }, 'not_found');

    const theirs = await callOK(globex, 'refund_order', { ...args, order_id: 'ord_g55', amount_cents: 500 });
    assert.equal(theirs.outcome, 'accepted', 'globex reused acme\'s claim');
    assertOperation(theirs.operation, 'refund_order', key);
    assert.notEqual(theirs.operation.operation_id, first.operation.operation_id);
    assert.notEqual(theirs.operation.job_id, first.operation.job_id);

    // Each tenant still sees its own operation under the shared key string.
    const mine = await callOK(acme, 'get_operation', { tool: 'refund_order', idempotency_key: key });
    assert.equal(mine.operation_id, first.operation.operation_id);
    const ours = await callOK(globex, 'get_operation', { tool: 'refund_order', idempotency_key: key });
    assert.equal(ours.operation_id, theirs.operation.operation_id);
  });
});

describe('argument and key validation', () => {
  const base = { order_id: 'ord_9f2', amount_cents: 100 };

  test('a missing idempotency_key is idempotency_key_required', async () => {
    const error = await callError(acme, 'refund_order', base, 'idempotency_key_required');
    assert.equal(error.field, 'idempotency_key');
  });

  test('"bad key!" is invalid_idempotency_key', async () => {
    const error = await callError(acme, 'refund_order', { ...base, idempotency_key: 'bad key!' }, 'invalid_idempotency_key');
    assert.equal(error.field, 'idempotency_key');
  });

  test('an unknown argument is invalid_argument naming it', async () => {
    const error = await callError(acme, 'refund_order',
      { ...base, idempotency_key: freshKey('unknown'), refund_everything: true }, 'invalid_argument');
    assert.equal(error.field, 'refund_everything');
    assert.match(error.message, /unknown argument/);
  });

  test('a rejected call claims nothing: the key is still fresh', async () => {
    const key = freshKey('rejected');
    await callError(acme, 'refund_order', { ...base, amount_cents: -5, idempotency_key: key }, 'invalid_argument');
    await callError(acme, 'get_operation', { tool: 'refund_order', idempotency_key: key }, 'not_found');
    const ans = await callOK(acme, 'refund_order', { ...base, idempotency_key: key });
    assert.equal(ans.outcome, 'accepted');
  });
});

describe('authentication', () => {
  test('no token: connecting fails with HTTP 401', async () => {
    await assert.rejects(connect(undefined, 'e2e-anonymous'), (err) => {
      assert.ok(err instanceof StreamableHTTPError, `expected a StreamableHTTPError, got ${err?.constructor?.name}: ${err}`);
      assert.equal(err.code, 401, String(err));
      return true;
    });
  });

  test('an unknown token: connecting fails with HTTP 401', async () => {
    await assert.rejects(connect('idg_e2e_no_such_token', 'e2e-unknown'), (err) => {
      assert.ok(err instanceof StreamableHTTPError, `expected a StreamableHTTPError, got ${err?.constructor?.name}: ${err}`);
      assert.equal(err.code, 401, String(err));
      return true;
    });
  });
});

describe('get_order', () => {
  test('returns the seeded order', async () => {
    const order = await callOK(acme, 'get_order', { order_id: 'ord_a71' });
    assert.equal(order.order_id, 'ord_a71');
    assert.equal(order.amount_cents, 12900);
    assert.equal(order.currency, 'usd');
    assert.equal(order.refunded_cents, 0);
    assert.equal(order.refundable_cents, 12900);
  });

  test('accepts and ignores an idempotency_key', async () => {
    const plain = await callOK(acme, 'get_order', { order_id: 'ord_a71' });
    const keyed = await callOK(acme, 'get_order', { order_id: 'ord_a71', idempotency_key: freshKey('read') });
    assert.deepEqual(keyed, plain);
    // Not even a key the mutations would refuse is checked on a read.
    const odd = await callOK(acme, 'get_order', { order_id: 'ord_a71', idempotency_key: 'bad key!' });
    assert.deepEqual(odd, plain);
  });

  test('an order id is scoped to the tenant', async () => {
    const acmeOrder = await callOK(acme, 'get_order', { order_id: 'ord_9f2' });
    const globexOrder = await callOK(globex, 'get_order', { order_id: 'ord_9f2' });
    assert.equal(acmeOrder.amount_cents, 5000);
    assert.equal(acmeOrder.currency, 'usd');
    assert.equal(globexOrder.amount_cents, 7700);
    assert.equal(globexOrder.currency, 'eur');
    await callError(globex, 'get_order', { order_id: 'ord_a71' }, 'not_found');
  });
});
