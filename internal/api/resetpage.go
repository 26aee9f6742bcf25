package api

// ResetPagePath is the api's own password-reset page, where the mails link
// unless IDEMGATE_RESET_LINK_BASE or the tenant's base says otherwise.
const ResetPagePath = "/reset-password"

// resetPage is GET /reset-password?token=…: a page whose button POSTs the
// token to the redeem route and shows the answer. Fetching the page
// redeems nothing, so a mail scanner that opens links does no harm.
var resetPage = buildPage("resetpage")
