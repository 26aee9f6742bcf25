package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Setting describes one configuration setting, read from Config's tags, for
// the help texts of commands that parse their own flags (idemctl).
type Setting struct {
	Field   string // Config's field, e.g. "Wait"
	Env     string // environment variable, e.g. "IDEMGATE_WAIT"
	Flag    string // flag name without dashes, e.g. "wait"; "" when env-only
	Default string // default as text, "" when none
	Help    string // one-line help
	Secret  bool   // never shown: logged as set or unset
}

// Settings returns every setting in Config's field order.
func Settings() []Setting {
	return slices.Clone(settingsOnce())
}

// LookupSetting returns the setting read from the environment variable env.
func LookupSetting(env string) (Setting, bool) {
	for _, s := range settingsOnce() {
		if s.Env == env {
			return s, true
		}
	}
	return Setting{}, false
}

// settingsOnce lists the settings: the built-ins' only while Load reads
// them.
func settingsOnce() []Setting {
	if builtinSettings.Load() {
		return withBuiltins()
	}
	return withoutBuiltins()
}

var withBuiltins = sync.OnceValue(func() []Setting { return listSettings(true) })
var withoutBuiltins = sync.OnceValue(func() []Setting { return listSettings(false) })

// listSettings reads the settings off Config's tags.
func listSettings(builtins bool) []Setting {
	var out []Setting
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if f.Anonymous || len(f.Index) > 1 && !builtins {
			continue // the group itself; its settings only when linked
		}
		s := Setting{
			Field:   f.Name,
			Env:     f.Tag.Get("env"),
			Flag:    f.Tag.Get("name"),
			Default: f.Tag.Get("default"),
			Help:    f.Tag.Get("help"),
		}
		if _, ok := f.Tag.Lookup("envonly"); ok {
			s.Flag = ""
		}
		_, s.Secret = f.Tag.Lookup("secret")
		out = append(out, s)
	}
	return out
}

// SettingError reports an invalid setting. Callers may use errors.As to tell
// configuration errors from others.
type SettingError struct {
	Setting string // environment variable, e.g. "IDEMGATE_WAIT"
	Msg     string // what is wrong, quoting the value unless it is secret
}

// Error names the environment variable and, when the setting has one, its
// flag: `IDEMGATE_WAIT (--wait): "2 secs" is not a duration …`.
func (e *SettingError) Error() string {
	if s, ok := LookupSetting(e.Setting); ok && s.Flag != "" {
		return e.Setting + " (--" + s.Flag + "): " + e.Msg
	}
	return e.Setting + ": " + e.Msg
}

func settingErr(env, format string, args ...any) *SettingError {
	return &SettingError{Setting: env, Msg: fmt.Sprintf(format, args...)}
}

// logKey is a setting's key in the logged configuration: its flag name
// with underscores, e.g. "inflight_timeout".
func logKey(f reflect.StructField) string {
	return strings.ReplaceAll(f.Tag.Get("name"), "-", "_")
}
