package idemgate

import (
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/config"
)

// TestConfigMirrorsSettings: the public Config has exactly the internal
// configuration's settings, by name and type, so that a setting added
// there is one a program can write here (and Open copies it).
func TestConfigMirrorsSettings(t *testing.T) {
	t.Parallel()
	internal := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[config.Config]()) {
		if !f.Anonymous && f.IsExported() {
			internal[f.Name] = f.Type
		}
	}
	public := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		require.False(t, f.Anonymous, "Config embeds %s: keep it a plain struct", f.Name)
		if f.IsExported() {
			public[f.Name] = f.Type
		}
	}
	require.NotEmpty(t, internal)
	for name, typ := range internal {
		pt, ok := public[name]
		require.True(t, ok, "idemgate.Config lacks the setting %s (%s): add the field, with its default in its doc comment", name, typ)
		require.Equal(t, typ, pt, "idemgate.Config.%s has another type than the setting", name)
	}
	for name := range public {
		_, ok := internal[name]
		require.True(t, ok, "idemgate.Config.%s is no setting of the internal configuration", name)
	}
}

// Every field survives the copy both ways: set each to a value of its own
// (not a default), and compare.
func TestConfigCopiesEveryField(t *testing.T) {
	t.Parallel()
	c := &Config{}
	v := reflect.ValueOf(c).Elem()
	for i, f := range reflect.VisibleFields(v.Type()) {
		if !f.IsExported() {
			continue
		}
		fv := v.FieldByIndex(f.Index)
		switch fv.Interface().(type) {
		case string:
			fv.SetString(f.Name)
		case time.Duration:
			fv.SetInt(int64(i+1) * int64(time.Second))
		case slog.Level:
			fv.SetInt(int64(slog.LevelWarn))
		case float64:
			fv.SetFloat(float64(i) + 0.5)
		case int:
			fv.SetInt(int64(i + 7))
		default:
			t.Fatalf("field %s: type %s not covered by this test", f.Name, f.Type)
		}
	}
	ic := c.internal()
	require.Equal(t, c.DatabaseURL, ic.DatabaseURL)
	require.Equal(t, c.StripeAPIBase, ic.StripeAPIBase, "the built-ins' group is copied too")
	back := fromInternal(ic, nil)
	require.Equal(t, c, back)
}

// DefaultConfig is what LoadConfig gives without flags and environment.
func TestDefaultConfigIsLoadWithNothing(t *testing.T) {
	t.Parallel()
	loaded, _, err := config.LoadArgs(nil, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, fromInternal(loaded, nil), DefaultConfig())
}
