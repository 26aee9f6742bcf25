package gate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/vocab"
)

type workspace struct {
	WorkspaceID string `json:"workspace_id"`
}

func provision[A any]() *gate.Mutation[A, workspace] {
	return &gate.Mutation[A, workspace]{
		Name: "provision_workspace", Title: "Provision", Description: "Provision a workspace.", Scope: "workspaces:provision",
		Call: func(context.Context, *gate.Op[A]) (*workspace, error) { return &workspace{}, nil },
	}
}

// An option written after a pattern used to be swallowed into it: the tool
// was declared, and every call was refused. Now the declaration is.
func TestIdemTagOptionAfterPatternRefusedAtAdd(t *testing.T) {
	t.Parallel()
	type args struct {
		Workspace string `json:"workspace" idem:"pattern=^[a-z0-9-]+$,minlen=3"`
	}
	err := gate.NewRegistry().Add(provision[args]())
	require.EqualError(t, err, `tool provision_workspace: arguments: field Workspace: idem:"pattern=^[a-z0-9-]+$,minlen=3": `+
		`pattern must be the last option (its value runs to the end of the tag), but ",minlen=3" follows it and reads as an option: `+
		`write "minlen=3,pattern=^[a-z0-9-]+$"`)
}

func TestIdemTagPatternLastValidates(t *testing.T) {
	t.Parallel()
	type args struct {
		Workspace string `json:"workspace" idem:"minlen=3,pattern=^[a-z0-9-]+(,[a-z0-9-]+)*$"`
	}
	spec, err := gate.SpecOf(provision[args]())
	require.NoError(t, err)
	for _, tc := range []struct{ name, raw, code string }{
		{"Valid", `{"workspace":"my-ws"}`, ""},
		{"ValidWithComma", `{"workspace":"a-b,c-d"}`, ""},
		{"TooShort", `{"workspace":"ab"}`, string(vocab.CodeInvalidArgument)},
		{"NoMatch", `{"workspace":"My WS"}`, string(vocab.CodeInvalidArgument)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := spec.Validate(decoded(t, tc.raw))
			if tc.code == "" {
				require.NoError(t, err)
				return
			}
			var derr *vocab.Error
			require.ErrorAs(t, err, &derr)
			require.Equal(t, tc.code, string(derr.Code))
			require.Equal(t, "workspace", derr.Field)
		})
	}
}

func TestIdemTagUnknownOptionNamesTheField(t *testing.T) {
	t.Parallel()
	type args struct {
		Workspace string `json:"workspace" idem:"id,lowercase"`
	}
	err := gate.NewRegistry().Add(provision[args]())
	require.ErrorContains(t, err, `field Workspace: idem:"id,lowercase": unknown option "lowercase"`)
}
