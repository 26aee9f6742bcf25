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
