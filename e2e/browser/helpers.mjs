// What the browser tests share: their settings, JSON answers, polling,
// patient requests, and Chromium on a fresh profile removed when the test
// file ends.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

import { chromium } from 'playwright-core';

// env returns a setting run.sh must have set.
export const env = (name) => {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run e2e/browser/run.sh`);
  return v;
};

const executablePath = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

// json reads a JSON answer, or fails naming what came instead.
export async function json(res) {
  const text = await res.text();
  try {
    return JSON.parse(text);
  } catch {
    assert.fail(`${res.url} answered ${res.status} with non-JSON: ${text.slice(0, 200)}`);
  }
}

// poll calls fn until it returns { done: true, value }, or fails after
// timeoutMs with the last value it saw.
export async function poll(what, fn, { timeoutMs = 30_000, intervalMs = 200 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last?.done) return last.value;
    if (Date.now() > deadline) assert.fail(`${what}: gave up after ${timeoutMs}ms; last: ${JSON.stringify(last?.value)}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

// fetchPatiently sends a request to the api again while it answers 503
// (unavailable: retry with the same idempotency key), for up to 60s: on a
// loaded machine the embedded SQLite process's one connection can stay busy
// past the api's bounds.
export async function fetchPatiently(url, init) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const res = await fetch(url, init);
    if (res.status !== 503 || Date.now() > deadline) return res;
    await res.arrayBuffer();
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

// Every profile is a fresh directory of its own, removed at the end.
const profiles = [];
after(async () => {
  await Promise.all(profiles.map((dir) => rm(dir, { recursive: true, force: true })));
});

// launch starts Chromium on a fresh profile; options go to the context
// (httpCredentials, say).
export async function launch(options = {}) {
  const dir = await mkdtemp(join(tmpdir(), 'idemgate-chromium-'));
  profiles.push(dir);
  const context = await chromium.launchPersistentContext(dir, {
    executablePath,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
    ...options,
  });
  context.setDefaultTimeout(20_000);
  return context;
}

// refundsOf counts the refunds the test Stripe made for an operation (the
// refund's metadata names it).
export async function refundsOf(operationID) {
  const res = await fetch(`${env('TESTSTRIPE_URL')}/_stats`);
  assert.equal(res.status, 200);
  const stats = await json(res);
  return stats.refunds_by_metadata?.idemgate_operation_id?.[operationID] ?? 0;
}

// openPage opens the approval page of id (at url: by default the api's own)
// in a fresh Chromium; errors collects page errors and console errors (a
// CSP violation, say), but for Chromium's note of a refusal whose status
// is in expected.
export async function openPage(id, expected = [], url = `${env('IDEMGATE_URL')}/approvals/${id}`) {
  const context = await launch();
  const errors = [];
  const page = await context.newPage();
  page.on('pageerror', (err) => errors.push(err.message));
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const status = /Failed to load resource: the server responded with a status of (\d+)/.exec(msg.text())?.[1];
    // 503: the api was busy and the page asked again (a loaded SQLite).
    if (status && (expected.includes(Number(status)) || status === '503')) return;
    errors.push(msg.text());
  });
  const resp = await page.goto(url);
  assert.equal(resp.status(), 200);
  return { context, page, errors };
}

// signIn enters token on the page and waits for the call's tool.
export async function signIn(page, token) {
  await page.getByLabel('Your token').fill(token);
  await page.getByRole('button', { name: 'Show the call' }).click();
}

// dump shows what the page looked like when a step failed.
export async function dump(page, err) {
  try {
    console.error(`page ${page.url()}:\n${await page.locator('body').ariaSnapshot()}`);
  } catch {}
  throw err;
}

// decideOnPage opens url (an approval page an agent was given), signs in
// with token and clicks decision ('Approve' or 'Deny'); it waits for the
// page to say so and requires that the page ran without errors.
export async function decideOnPage(id, url, token, decision) {
  const { context, page, errors } = await openPage(id, [], url);
  try {
    try {
      await signIn(page, token);
      await page.locator('#status').filter({ hasText: /^awaiting_approval$/ }).waitFor();
      await page.getByRole('button', { name: decision }).click();
      const said = decision === 'Approve' ? /^Approved: the operation is/ : /^Denied: the operation is failed/;
      await page.getByRole('status').filter({ hasText: said }).waitFor();
    } catch (err) {
      await dump(page, err);
    }
    assert.deepEqual(errors, [], 'the page ran without errors');
  } finally {
    await context.close();
  }
}
