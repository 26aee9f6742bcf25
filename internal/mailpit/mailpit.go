// Package mailpit is a small client of Mailpit's HTTP API (v1.33), for tests
// that send real mail over SMTP and then look at what arrived, and a helper,
// Start, that gives a test a Mailpit to talk to.
//
// Mailpit stores a message before it answers the SMTP DATA command with 250,
// so a message whose send returned without error is already visible here: no
// polling is needed.
//
// Several test processes may share one Mailpit (scripts/test.sh starts one
// for the whole run). Tests should therefore find their messages by something
// unique to them, such as a Message-ID built from a random key, and not
// assume an empty mailbox; DeleteAll is for private instances.
package mailpit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// pageSize is how many messages one list or search request asks for.
const pageSize = 250

// Client talks to one Mailpit's HTTP API.
type Client struct {
	base string
	http *http.Client
}

// New returns a client of the Mailpit whose web UI and API are at baseURL,
// such as "http://127.0.0.1:8025" (the value of MAILPIT_API_URL).
func New(baseURL string) *Client {
	return &Client{
		base: strings.TrimRight(baseURL, "/"),
		http: &http.Client{Timeout: 30 * time.Second},
	}
}

// Address is a mail address as Mailpit reports it.
type Address struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

// Message is the summary of a stored message.
type Message struct {
	// ID is Mailpit's database ID, the handle for Body.
	ID string `json:"ID"`
	// MessageID is the Message-ID header as Mailpit stores it: without the
	// angle brackets.
	MessageID string    `json:"MessageID"`
	From      Address   `json:"From"`
	To        []Address `json:"To"`
	Cc        []Address `json:"Cc"`
	Bcc       []Address `json:"Bcc"`
	Subject   string    `json:"Subject"`
	// Username is the SMTP user the sender authenticated as, if any.
	Username string `json:"Username"`
	// Created is when Mailpit received the message.
	Created time.Time `json:"Created"`
}

// messagesPage is one answer of GET /api/v1/messages or /api/v1/search.
type messagesPage struct {
	Total         int       `json:"total"`
	MessagesCount int       `json:"messages_count"`
	Start         int       `json:"start"`
	Messages      []Message `json:"messages"`
}

// Messages lists every stored message, newest first, paging through all of
// them.
func (c *Client) Messages(ctx context.Context) ([]Message, error) {
	return c.pages(ctx, "/api/v1/messages", nil)
}

// Search lists every message matching a Mailpit search query (see Mailpit's
// search filters, such as `to:ana@example.com` or `subject:"Reset your"`),
// newest first.
func (c *Client) Search(ctx context.Context, query string) ([]Message, error) {
	return c.pages(ctx, "/api/v1/search", url.Values{"query": {query}})
}

// pages GETs path page by page until a short page. Messages that arrive
// meanwhile shift the pages; a message seen twice is kept once.
func (c *Client) pages(ctx context.Context, path string, q url.Values) ([]Message, error) {
	if q == nil {
		q = url.Values{}
	}
	var all []Message
	seen := map[string]bool{}
	for start := 0; ; start += pageSize {
		q.Set("start", strconv.Itoa(start))
		q.Set("limit", strconv.Itoa(pageSize))
		var page messagesPage
		if err := c.getJSON(ctx, path+"?"+q.Encode(), &page); err != nil {
			return nil, err
		}
		for _, m := range page.Messages {
			if !seen[m.ID] {
				seen[m.ID] = true
				all = append(all, m)
			}
		}
		if len(page.Messages) < pageSize {
			return all, nil
		}
	}
}

// ByMessageID lists the messages whose Message-ID is exactly messageID,
// given with or without its angle brackets, newest first.
//
// It narrows with Mailpit's `message-id:` search, which matches substrings
// case-insensitively, and then keeps exact matches only.
func (c *Client) ByMessageID(ctx context.Context, messageID string) ([]Message, error) {
	id := strings.Trim(strings.TrimSpace(messageID), "<>")
	if id == "" {
		return nil, fmt.Errorf("mailpit: empty Message-ID")
	}
	if strings.ContainsAny(id, "\" \t\r\n") {
		return nil, fmt.Errorf("mailpit: Message-ID %q has quotes or spaces, which Mailpit's search cannot express", messageID)
	}
	found, err := c.Search(ctx, `message-id:"`+id+`"`)
	if err != nil {
		return nil, err
	}
	var exact []Message
	for _, m := range found {
		if m.MessageID == id {
			exact = append(exact, m)
		}
	}
	return exact, nil
}

// CountByMessageID counts the messages whose Message-ID is exactly
// messageID (with or without angle brackets).
func (c *Client) CountByMessageID(ctx context.Context, messageID string) (int, error) {
	ms, err := c.ByMessageID(ctx, messageID)
	return len(ms), err
}

// Body returns the plain-text body of the message with Mailpit ID id,
// decoded from its transfer encoding. (Reading a message marks it read.)
func (c *Client) Body(ctx context.Context, id string) (string, error) {
	var m struct {
		Text string `json:"Text"`
	}
	if err := c.getJSON(ctx, "/api/v1/message/"+url.PathEscape(id), &m); err != nil {
		return "", err
	}
	return m.Text, nil
}

// Headers returns the headers of the message with Mailpit ID id, keyed by
// their canonical names.
func (c *Client) Headers(ctx context.Context, id string) (map[string][]string, error) {
	h := map[string][]string{}
	if err := c.getJSON(ctx, "/api/v1/message/"+url.PathEscape(id)+"/headers", &h); err != nil {
		return nil, err
	}
	return h, nil
}

// DeleteAll deletes every stored message. Only for a Mailpit the test owns
// (see StartPrivate): on a shared one it deletes other tests' mail too.
func (c *Client) DeleteAll(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+"/api/v1/messages", nil)
	if err != nil {
		return err
	}
	_, err = c.do(req)
	return err
}

func (c *Client) getJSON(ctx context.Context, pathAndQuery string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+pathAndQuery, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	body, err := c.do(req)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("mailpit: GET %s: decoding the answer: %w", req.URL.Path, err)
	}
	return nil
}

// do sends req and returns the body of a 2xx answer; anything else is an
// error naming the status and the start of the body.
func (c *Client) do(req *http.Request) ([]byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("mailpit: %s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("mailpit: %s %s: reading the answer: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		snippet := strings.TrimSpace(string(body))
		if len(snippet) > 300 {
			snippet = snippet[:300] + "…"
		}
		return nil, fmt.Errorf("mailpit: %s %s: %s: %s", req.Method, req.URL.Path, resp.Status, snippet)
	}
	return body, nil
}
