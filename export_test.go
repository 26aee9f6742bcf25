package idemgate

import "github.com/idemgate/idemgate/internal/config"

// ConfigFrom wraps settings built in a test.
func ConfigFrom(c *config.Config) *Config { return &Config{c: c} }
