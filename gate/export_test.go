package gate

import (
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// SpecOf derives t's spec, for the tests of the derivation.
func SpecOf(t Tool) (*toolspec.Spec, error) { return t.spec() }

// The idem tag's short forms, for the schema tests.
const (
	IDPattern  = idPattern
	MaxTextLen = maxTextLen
)

// ScopesOf is every scope a token may be granted with reg's tools.
func ScopesOf(reg *Registry) []string { return reg.inner.Scopes() }

// ToolspecCaller converts a domain.Caller, for tests that call a spec directly.
func ToolspecCaller(c domain.Caller) toolspec.Caller { return toolspec.Caller(c) }
