package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// WorkspaceClient calls the team's provisioning API: POST /workspaces with
// an Idempotency-Key, answered 201 with the workspace (200 with the same
// workspace for a key it has seen).
type WorkspaceClient struct {
	// BaseURL is the API's base URL.
	BaseURL string
	// HTTP defaults to a client with a 10 s timeout.
	HTTP *http.Client
}

// RefusedError is the API's 4xx: it made nothing.
type RefusedError struct {
	Status  int
	Message string
}

func (e *RefusedError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// Create creates a workspace named name for tenant, once per key;
// reference is kept with it (as Stripe keeps metadata), to find it again.
func (c *WorkspaceClient) Create(ctx context.Context, key, tenant, name, reference string) (*Workspace, error) {
	body, _ := json.Marshal(map[string]string{"tenant": tenant, "name": name, "reference": reference})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/workspaces", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, &RefusedError{Status: resp.StatusCode, Message: string(b)}
	case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated:
		return nil, fmt.Errorf("provisioning API: %s", resp.Status)
	}
	var w Workspace
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("provisioning API: %w", err)
	}
	return &w, nil
}

// WorkspaceAPI stands in for the team's provisioning API (in a real
// deployment it is a service of its own): it keeps workspaces in memory
// and honours Idempotency-Key as Stripe does, so that a retried request
// makes no second workspace.
type WorkspaceAPI struct {
	mu    sync.Mutex
	byKey map[string]*Workspace
	byRef map[string]int
	next  int
}

// NewWorkspaceAPI returns an empty API.
func NewWorkspaceAPI() *WorkspaceAPI {
	return &WorkspaceAPI{byKey: map[string]*Workspace{}, byRef: map[string]int{}}
}

// Created is how many workspaces the API made: the effects, counted where
// they land.
func (a *WorkspaceAPI) Created() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.next
}

// Made is how many workspaces the API made with reference (an operation
// id, as provision_workspace sends it).
func (a *WorkspaceAPI) Made(reference string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byRef[reference]
}

// ServeHTTP serves POST /workspaces.
func (a *WorkspaceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/workspaces" {
		http.NotFound(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	var in struct{ Tenant, Name, Reference string }
	if key == "" || json.NewDecoder(r.Body).Decode(&in) != nil || in.Name == "" {
		http.Error(w, "an Idempotency-Key and a JSON body with tenant and name are required", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	ws, seen := a.byKey[key]
	if !seen {
		a.next++
		ws = &Workspace{WorkspaceID: "ws_" + strconv.Itoa(a.next), Name: in.Name}
		a.byKey[key] = ws
		a.byRef[in.Reference]++
	}
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !seen {
		w.WriteHeader(http.StatusCreated)
	}
	_ = json.NewEncoder(w).Encode(ws)
}
