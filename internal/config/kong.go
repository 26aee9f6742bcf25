package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
)

// load reads args, getenv and the default tags into a Config with kong,
// which calls Config.Validate; help goes to stdout (os.Stdout when nil).
// Environment variables are read through getenv by a kong resolver (kong's
// own lookup goes to os.LookupEnv and counts an empty variable as set), so
// that tests need not change the process's environment. Every value that
// fails to parse is reported.
func load(args []string, getenv func(string) string, stdout io.Writer) (*Config, error) {
	c, _, err := loadGrammar(args, getenv, stdout, false)
	return c, err
}

// LoadArgs is Load leaving positional arguments (a subcommand and its
// arguments, in one run before or after the flags) to the caller: it
// returns them.
func LoadArgs(args []string, getenv func(string) string) (*Config, []string, error) {
	return loadGrammar(args, getenv, nil, true)
}

// withArgs is the grammar of LoadArgs: the settings and the positional
// arguments.
type withArgs struct {
	Config `embed:""`
	Args   []string `arg:"" optional:"" name:"args" help:"the program's own arguments"`
}

// loadGrammar parses args into a Config, and with positional into its
// positional arguments too (else they are an error).
func loadGrammar(args []string, getenv func(string) string, stdout io.Writer, positional bool) (*Config, []string, error) {
	if stdout == nil {
		stdout = os.Stdout
	}
	w := &withArgs{}
	c := &w.Config
	var grammar any = c
	if positional {
		grammar = w
	}
	var envErrs []error
	helped := false
	opts := []kong.Option{
		kong.Description("Each setting is read from its flag, else its environment variable, else its default."),
		kong.Writers(stdout, io.Discard),
		kong.Exit(func(int) { helped = true }),
		kong.TypeMapper(reflect.TypeFor[string](), textMapper(func(s string) (string, error) { return s, nil })),
		kong.TypeMapper(reflect.TypeFor[time.Duration](), textMapper(parseDuration)),
		kong.TypeMapper(reflect.TypeFor[slog.Level](), textMapper(parseLevel)),
		kong.TypeMapper(reflect.TypeFor[float64](), textMapper(parseFloat)),
		kong.TypeMapper(reflect.TypeFor[int](), textMapper(parseInt)),
		kong.PostBuild(takeEnvLookup),
		kong.Resolvers(envResolver(getenv, &envErrs)),
		kong.WithBeforeApply(func(ctx *kong.Context) error { return beforeValidate(ctx, envErrs) }),
		kong.ValueFormatter(helpValue),
		kong.Help(printHelp),
	}
	if builtinSettings.Load() {
		opts = append(opts, kong.Embed(&c.BuiltinSettings))
	}
	k, err := kong.New(grammar, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	_, err = k.Parse(args)
	switch {
	case helped:
		return nil, nil, ErrHelp
	case err != nil:
		return nil, nil, settingErrors(err)
	}
	c.StripeAPIBase = strings.TrimRight(c.StripeAPIBase, "/")
	return c, w.Args, nil
}

// beforeValidate reports the environment variables that did not parse and
// refuses an env-only setting given as a flag.
func beforeValidate(ctx *kong.Context, envErrs []error) error {
	if len(envErrs) > 0 {
		return errors.Join(envErrs...)
	}
	for _, p := range ctx.Path {
		if p.Flag != nil && !p.Resolved && p.Flag.Tag.Has("envonly") {
			return settingErr(p.Flag.Tag.Get("env"), "has no flag (--%s given): set it in the environment, "+
				"since command lines are visible to other users", p.Flag.Name)
		}
	}
	return nil
}

// takeEnvLookup leaves environment variables to envResolver, and hides the
// env-only settings' flags (printHelp lists them apart).
func takeEnvLookup(k *kong.Kong) error {
	for _, f := range k.Model.Flags {
		f.Envs = nil
		f.Tag.Envs = nil
		if f.Tag.Has("envonly") {
			f.Hidden = true
		}
	}
	return nil
}

// envResolver gives kong each flag's environment variable read with getenv,
// trimmed; empty counts as unset. A value that does not parse is added to
// errs and left out, so that every bad variable is reported at once.
func envResolver(getenv func(string) string, errs *[]error) kong.Resolver {
	return kong.ResolverFunc(func(_ *kong.Context, _ *kong.Path, f *kong.Flag) (any, error) {
		env := f.Tag.Get("env")
		if env == "" || getenv == nil {
			return nil, nil
		}
		v := strings.TrimSpace(getenv(env))
		if v == "" {
			return nil, nil
		}
		scratch := reflect.New(f.Target.Type()).Elem()
		if err := f.Parse(kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: v}), scratch); err != nil {
			*errs = append(*errs, settingErrors(err))
			return nil, nil
		}
		return v, nil
	})
}

// textMapper decodes a trimmed value with parse; its error becomes a
// *SettingError naming the field's environment variable.
func textMapper[T any](parse func(string) (T, error)) kong.MapperFunc {
	return func(ctx *kong.DecodeContext, target reflect.Value) error {
		var s string
		if err := ctx.Scan.PopValueInto(ctx.Value.Name, &s); err != nil {
			return err
		}
		v, err := parse(strings.TrimSpace(s))
		if err != nil {
			return &SettingError{Setting: ctx.Value.Tag.Get("env"), Msg: err.Error()}
		}
		target.Set(reflect.ValueOf(v))
		return nil
	}
}

// settingErrors unwraps the *SettingError, or the *SettingErrors joined
// by Validate, from kong's wrapping (the flag's name, *kong.ParseError);
// other errors (an unknown flag, a missing value, a positional argument)
// are prefixed with "config:".
func settingErrors(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch e.(type) {
		case *SettingError, interface{ Unwrap() []error }:
			return e
		}
	}
	return fmt.Errorf("config: %w", err)
}

// helpValue is a flag's help with its environment variable and default.
func helpValue(v *kong.Value) string {
	env := v.Tag.Get("env")
	if env == "" {
		return v.Help
	}
	extra := "$" + env
	if v.HasDefault {
		extra += ", default " + v.Default
	}
	return v.Help + " (" + extra + ")"
}

// printHelp is kong's help followed by the env-only settings.
func printHelp(options kong.HelpOptions, ctx *kong.Context) error {
	if err := kong.DefaultHelpPrinter(options, ctx); err != nil {
		return err
	}
	fmt.Fprintln(ctx.Stdout, "\nEnvironment only (no flag: keep secrets off command lines):")
	for _, s := range settingsOnce() {
		if s.Flag == "" {
			fmt.Fprintf(ctx.Stdout, "  $%-24s %s\n", s.Env, s.Help)
		}
	}
	return nil
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (examples: 500ms, 2s, 1m)", v)
	}
	return d, nil
}

func parseFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number (examples: 50, 0.5, 0)", v)
	}
	return f, nil
}

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number (examples: 200, 1)", v)
	}
	return n, nil
}

func parseLevel(v string) (slog.Level, error) {
	switch strings.ToLower(v) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is not a level (want debug, info, warn or error)", v)
}
