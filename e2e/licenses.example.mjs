// The example service examples/licenses (a team's own chi router and go-sdk
// server with idemgate's tools added, and the team's own API keys) driven
// by the official MCP TypeScript SDK over its own listener.
//
// Run by scripts/example.sh, which starts the example on a fresh database
// and sets LICENSES_URL (its base URL), LICENSES_KEY (a key of tenant acme,
// user e2e-agent, with every scope) and LICENSES_KEY_READONLY (licenses:read
// only).

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

function requiredEnv(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run it with scripts/example.sh`);
  return v;
}

const mcpURL = new URL('/mcp', requiredEnv('LICENSES_URL'));

async function connect(key) {
  const client = new Client({ name: 'licenses-e2e', version: '1.0.0' });
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  await client.connect(new StreamableHTTPClientTransport(mcpURL, { requestInit: { headers } }));
  return client;
}

const freshKey = (label) => `e2e-${label}-${randomBytes(6).toString('hex')}`;

test('one server: the team tool beside the gated ones', async () => {
  const client = await connect(requiredEnv('LICENSES_KEY'));
  try {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(),
      ['get_license', 'get_operation', 'grant_license', 'list_operations', 'list_plans', 'provision_workspace']);
    const grant = tools.find((t) => t.name === 'grant_license');
    assert.ok(grant.inputSchema.required.includes('idempotency_key'));
    const plans = await client.callTool({ name: 'list_plans', arguments: {} });
    // The team's own tool reads the caller idemgate authenticated.
    assert.equal(plans.isError, undefined, JSON.stringify(plans.content));
    assert.deepEqual(plans.structuredContent, { plans: ['team', 'enterprise'], tenant: 'acme', user: 'e2e-agent' });
  } finally {
    await client.close();
  }
});

test('a retried grant is one license, replayed; the read sees it', async () => {
  const client = await connect(requiredEnv('LICENSES_KEY'));
  try {
    const args = { idempotency_key: freshKey('grant'), customer_id: 'cus_42', plan: 'team', seats: 7 };
    const first = await client.callTool({ name: 'grant_license', arguments: args });
    assert.equal(first.isError, undefined, JSON.stringify(first.content));
    let op = first.structuredContent.operation;
    for (let i = 0; op.status !== 'succeeded' && i < 100; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const got = await client.callTool({ name: 'get_operation', arguments: { tool: 'grant_license', idempotency_key: args.idempotency_key } });
      op = got.structuredContent;
    }
    assert.equal(op.status, 'succeeded');
    const again = await client.callTool({ name: 'grant_license', arguments: args });
    assert.equal(again.structuredContent.outcome, 'replayed');
    assert.equal(again.structuredContent.operation.operation_id, op.operation_id);
    const lic = await client.callTool({ name: 'get_license', arguments: { license_id: op.result.license_id } });
    assert.deepEqual(lic.structuredContent, { license_id: op.result.license_id, customer_id: 'cus_42', plan: 'team', seats: 7 });
    const conflict = await client.callTool({ name: 'grant_license', arguments: { ...args, seats: 8 } });
    assert.equal(conflict.isError, true);
    assert.equal(conflict.structuredContent.error.code, 'idempotency_key_reuse_with_different_args');
    assert.deepEqual(conflict.structuredContent.error.fields, ['seats']);
  } finally {
    await client.close();
  }
});

test('a key without the scope is refused by the gate; no key is a 401', async () => {
  const client = await connect(requiredEnv('LICENSES_KEY_READONLY'));
  try {
    const res = await client.callTool({ name: 'grant_license', arguments: { idempotency_key: freshKey('ro'), customer_id: 'cus_1', plan: 'team', seats: 1 } });
    assert.equal(res.isError, true);
    assert.equal(res.structuredContent.error.code, 'forbidden');
  } finally {
    await client.close();
  }
  await assert.rejects(connect(''), /401|Unauthorized|unauthenticated/i);
});
