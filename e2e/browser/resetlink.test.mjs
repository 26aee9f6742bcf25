// A password-reset link in a real browser: send_password_reset through the
// worker, the mail read from Mailpit's API, its link opened in Chromium;
// the page's button redeems it once ("accepted"), and after a reload the
// same button says the link was already used.
//
// Run by e2e/browser/run.sh, which starts the api and the worker (mailing to
// Mailpit, with IDEMGATE_RESET_LINK_BASE on the api's /reset-password) and
// sets IDEMGATE_URL and MAILPIT_API_URL (and CHROMIUM_PATH).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { env, json, launch, poll } from './helpers.mjs';

const base = env('IDEMGATE_URL');
const mailpit = env('MAILPIT_API_URL');

// The seeded token of acme's reset-bot (users:password_reset, operations:read).
const token = JSON.parse(readFileSync(new URL('./seed.json', import.meta.url), 'utf8')).tokens.find(
  (t) => t.user === 'reset-bot',
).token;
const key = `browser-reset-${Date.now()}`;

// mailedLink sends the mail and returns the reset link of the one message
// Mailpit holds with its Message-ID.
async function mailedLink() {
  const res = await fetch(`${base}/v1/tools/send_password_reset`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: 'usr_1' }),
  });
  assert.ok([200, 202].includes(res.status), `send_password_reset answered ${res.status}`);
  const op = await poll('the mail is sent', async () => {
    const r = await fetch(`${base}/v1/operations/send_password_reset/${key}`, { headers: { authorization: `Bearer ${token}` } });
    const o = await json(r);
    return { done: o.status === 'succeeded', value: o };
  });
  const messageID = op.result.message_id.replace(/^<|>$/g, '');
  const found = await json(await fetch(`${mailpit}/api/v1/search?query=${encodeURIComponent(`message-id:"${messageID}"`)}`));
  const ours = found.messages.filter((m) => m.MessageID === messageID);
  assert.equal(ours.length, 1, `messages with Message-ID ${messageID}`);
  const message = await json(await fetch(`${mailpit}/api/v1/message/${ours[0].ID}`));
  const links = message.Text.match(/https?:\/\/\S+[?&]token=[A-Za-z0-9_-]{43}/g);
  assert.equal(links?.length, 1, message.Text);
  return links[0];
}

test('a reset link from Mailpit opens the page, whose button redeems it once', { timeout: 120_000 }, async () => {
  const link = await mailedLink();
  assert.ok(link.startsWith(`${base}/reset-password?token=`), link);

  const context = await launch();
  const errors = [];
  try {
    const page = await context.newPage();
    page.on('pageerror', (err) => errors.push(err.message));
    page.on('console', (msg) => {
      // A CSP violation, say; not Chromium's note of the expected 410.
      if (msg.type() === 'error' && !/Failed to load resource: .* 410 \(Gone\)/.test(msg.text())) errors.push(msg.text());
    });
    const resp = await page.goto(link);
    assert.equal(resp.status(), 200);
    const button = page.getByRole('button', { name: 'Use this link' });
    const result = page.getByRole('status');

    await button.click();
    await result.filter({ hasText: 'Password reset link accepted for user usr_1' }).waitFor();

    await page.reload();
    await button.click();
    await result.filter({ hasText: 'This link was already used' }).waitFor();
    assert.deepEqual(errors, [], 'the page ran without errors');
  } finally {
    await context.close();
  }
});
