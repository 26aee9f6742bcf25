'use strict';
// Redeems the token of this page's link once, on the button: a mail
// scanner that only fetches the link redeems nothing.
(function () {
  const token = new URLSearchParams(window.location.search).get('token') || '';
  const form = document.getElementById('redeem-form');
  const button = document.getElementById('redeem');
  const result = document.getElementById('result');
  const show = (outcome, text) => {
    result.dataset.outcome = outcome;
    result.textContent = text;
  };
  const messages = {
    reset_token_used: 'This link was already used.',
    reset_token_expired: 'This link has expired: ask for a new password-reset mail.',
    not_found: 'This link is not valid.',
    invalid_argument: 'This link is incomplete: open the whole link from the mail.',
  };
  if (!token) {
    button.disabled = true;
    show('refused', 'This link has no token: open the whole link from the mail.');
    return;
  }
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    button.disabled = true;
    show('busy', 'Checking the link…');
    let res, body;
    try {
      res = await fetch('/v1/password-resets/redeem', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token }),
        credentials: 'omit',
        cache: 'no-store',
      });
      body = await res.json().catch(() => ({}));
    } catch (err) {
      button.disabled = false;
      show('refused', 'The server did not answer: try again.');
      return;
    }
    if (res.ok) {
      show('ok', `Password reset link accepted for user ${body.user_id} (tenant ${body.tenant_id}).`);
      return;
    }
    const code = body.error && body.error.code;
    if (code === 'rate_limited' || code === 'unavailable' || code === 'internal') {
      button.disabled = false;
      const wait = res.headers.get('Retry-After');
      show('refused', `Not now (${code}): try again${wait ? ` in ${wait} s` : ''}.`);
      return;
    }
    show('refused', messages[code] || `The link was refused (HTTP ${res.status}).`);
  });
})();
