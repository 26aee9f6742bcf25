package config

import (
	"fmt"
	"log/slog"
	"reflect"
	"time"
)

// LogValue implements slog.LogValuer: every setting under its flag name
// with underscores (plus the driver and the reset link base used),
// durations as text ("2m0s"). A field tagged secret appears only as "set"
// or "unset", and one tagged secret:"password" (DATABASE_URL) with its
// password masked.
func (c *Config) LogValue() slog.Value {
	if c == nil {
		return slog.StringValue("<nil>")
	}
	v := reflect.ValueOf(c).Elem()
	var attrs []slog.Attr
	for _, f := range reflect.VisibleFields(v.Type()) {
		if f.Anonymous || len(f.Index) > 1 && !builtinSettings.Load() {
			continue
		}
		attrs = append(attrs, slog.Attr{Key: logKey(f), Value: logValue(f, v.FieldByIndex(f.Index))})
		if f.Name == "DatabaseURL" {
			attrs = append(attrs, slog.String("driver", c.Driver()))
		}
		if f.Name == "ResetLinkBase" {
			attrs = append(attrs, slog.String("reset_link_base_used", c.ResetLinkBaseOrDefault()))
		}
	}
	return slog.GroupValue(attrs...)
}

// logValue is one field's logged value.
func logValue(f reflect.StructField, v reflect.Value) slog.Value {
	if secret, ok := f.Tag.Lookup("secret"); ok {
		if secret == "password" {
			return slog.StringValue(redactDatabaseURL(v.String()))
		}
		return slog.StringValue(setOrUnset(v.String()))
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return slog.StringValue(x.String())
	case fmt.Stringer:
		return slog.StringValue(x.String())
	}
	return slog.AnyValue(v.Interface())
}

// String formats the configuration like LogValue, so that printing a
// *Config with %v never reveals a secret.
func (c *Config) String() string {
	return c.LogValue().String()
}

func setOrUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return "set"
}
