package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/tools"
)

// helpVars are the values the commands' help tags interpolate (${name}).
func helpVars() kong.Vars {
	db, _ := config.LookupSetting(config.EnvDatabaseURL)
	return kong.Vars{
		"database_url_help":       db.Help + " (default $" + db.Env + ")",
		"scopes":                  strings.Join(tools.Scopes(), ", "),
		"operator_tenant_env":     "$" + config.EnvOperatorTenant,
		"default_operator_tenant": config.DefaultOperatorTenant,
		"scope_ops_admin":         tenancy.ScopeOpsAdmin,
		"scope_approvals_decide":  tokenspec.ScopeApprovalsDecide,
		"default_list_limit":      strconv.Itoa(defaultListLimit),
		"max_list_limit":          strconv.Itoa(maxListLimit),
		"default_redrive_limit":   strconv.Itoa(ops.DefaultRedriveLimit),
		"max_redrive_limit":       strconv.Itoa(ops.MaxRedriveLimit),
		"max_reason_len":          strconv.Itoa(ops.MaxReasonLen),
		"default_prune_batches":   strconv.Itoa(defaultPruneBatches),
	}
}

// printHelp prints a command's help as idemctl wrote it, line breaks kept
// (kong's printer would reflow it), then "Usage:" with the command's usage
// tag, then kong's lists of flags and subcommands.
func printHelp(opts kong.HelpOptions, kctx *kong.Context) error {
	node := kctx.Model.Node
	if sel := kctx.Selected(); sel != nil {
		node = sel
	}
	text := node.Detail
	if text == "" {
		text = node.Help
	}
	if _, err := fmt.Fprintf(kctx.Stdout, "%s\n\nUsage:\n  %s\n", strings.TrimRight(text, "\n"), usageLine(node)); err != nil {
		return err
	}
	help, detail := node.Help, node.Detail
	node.Help, node.Detail = "", ""
	defer func() { node.Help, node.Detail = help, detail }()
	opts.NoAppSummary = true
	return kong.DefaultHelpPrinter(opts, kctx)
}

// usageLine is node's path with its usage tag, or <command> for a node
// with subcommands.
func usageLine(node *kong.Node) string {
	path := node.FullPath()
	switch {
	case len(node.Children) > 0:
		return path + " <command>"
	case node.Tag != nil && node.Tag.Get("usage") != "":
		return path + " " + node.Tag.Get("usage") + " [flags]"
	}
	return path + " [flags]"
}

// helpValue is a flag's help with its default when that is not the zero
// value.
func helpValue(v *kong.Value) string {
	switch {
	case !v.HasDefault, v.Default == "", v.Default == "0", v.Default == "false":
		return v.Help
	}
	return v.Help + " (default " + v.Default + ")"
}

// helpCmd is `idemctl help [COMMAND...]`: the help of idemctl or of a
// command, as -h prints it.
type helpCmd struct {
	Command []string `arg:"" optional:"" help:"the command to describe, such as: op redrive"`
}

func (h *helpCmd) Run(kctx *kong.Context) error {
	sub, err := kong.Trace(kctx.Kong, h.Command)
	if err == nil {
		err = sub.Error
	}
	if err != nil {
		return &usageError{err}
	}
	return sub.PrintUsage(false)
}

// flagGiven reports whether the flag name is on the command line, rather
// than at its default.
func flagGiven(kctx *kong.Context, name string) bool {
	for _, p := range kctx.Path {
		if p.Flag != nil && p.Flag.Name == name {
			return true
		}
	}
	return false
}
