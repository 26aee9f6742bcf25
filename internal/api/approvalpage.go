package api

// ApprovalPagePath is the prefix of the api's approval page,
// GET /approvals/{id}: where a person decides on an operation awaiting
// approval.
const ApprovalPagePath = "/approvals/"

// approvalPage is GET /approvals/{id}: the same static page for every id,
// with no data in it, so fetching it reveals and changes nothing. Its
// script asks the approver for their token (kept in the tab's
// sessionStorage), reads GET /v1/approvals/{id} with it and POSTs the
// decision as JSON with the fingerprint it showed: a bearer header and a
// JSON body, which a page of another site cannot make the browser send.
var approvalPage = buildPage("approvalpage")
