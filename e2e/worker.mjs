// What the e2e tests that run cmd/worker share: starting and stopping it,
// and the test Stripe's counts. e2e/run.sh sets the variables.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

/** requiredEnv returns a variable e2e/run.sh sets, or throws naming it. */
export function requiredEnv(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run the e2e tests with e2e/run.sh`);
  }
  return v;
}

/** Starts cmd/worker (IDEMGATE_WORKER_BIN); proc.log() is its output so far. */
export function startWorker() {
  const proc = spawn(requiredEnv('IDEMGATE_WORKER_BIN'), [], {
    env: {
      ...process.env,
      STRIPE_API_KEY: 'sk_test_e2e',
      STRIPE_API_BASE: requiredEnv('E2E_WORKER_STRIPE_API_BASE'),
      IDEMGATE_SECRET: requiredEnv('E2E_WORKER_SECRET'),
      IDEMGATE_WORKER_ADDR: '127.0.0.1:0',
      IDEMGATE_REAPER_INTERVAL: '1s',
      IDEMGATE_LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  proc.log = () => log;
  proc.exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return proc;
}

/** Stops a worker with SIGTERM and waits for it to exit. */
export async function stopWorker(proc) {
  if (proc.exitCode !== null || proc.signalCode !== null) {
    return;
  }
  proc.kill('SIGTERM');
  await proc.exited;
}

/** The test Stripe's counts (GET /_stats). */
export async function stripeStats() {
  const resp = await fetch(new URL('/_stats', requiredEnv('IDEMGATE_TEST_STRIPE_URL')));
  assert.equal(resp.status, 200);
  return resp.json();
}

/** Polls fn until it returns a truthy value, for up to timeoutMs. */
export async function eventually(fn, what, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) {
      return v;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
