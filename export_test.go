package idemgate

import "github.com/idemgate/idemgate/internal/config"

// ConfigFrom is settings built in a test as a Config.
func ConfigFrom(c *config.Config) *Config { return fromInternal(c, nil) }
