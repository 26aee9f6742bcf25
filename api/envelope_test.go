package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckEnvelope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
	}{
		{"Single", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":1,"b":[{"a":1},{"a":2}]}}}`, ""},
		{"Batch", ` [{"jsonrpc":"2.0","id":1,"method":"ping"}]`, "batches"},
		{"TopLevelDuplicate", `{"id":1,"id":2}`, `"id" appears twice`},
		{"DuplicateArguments", `{"params":{"arguments":{},"arguments":{}}}`, `"arguments" appears twice`},
		{"DeepDuplicate", `{"params":{"meta":{"x":{"y":1,"y":2}}}}`, `"y" appears twice`},
		// Inside the arguments the tool's decoder refuses duplicates, with
		// its code, the field and an audit row.
		{"DuplicateInsideArguments", `{"params":{"arguments":{"a":1,"a":2,"b":{"c":1,"c":2}}}}`, ""},
		{"ArgumentsElsewhere", `{"other":{"arguments":{"a":1,"a":2}}}`, `"a" appears twice`},
		{"SameNameInSiblings", `{"a":{"k":1},"b":{"k":2},"c":[{"k":1},{"k":2}]}`, ""},
		{"ValueEqualsKeyName", `{"a":"b","b":"a"}`, ""},
		{"Malformed", `{"a":`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkEnvelope([]byte(tc.body))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func FuzzCheckEnvelope(f *testing.F) {
	f.Add([]byte(`{"a":{"b":[1,{"c":2}]},"d":"e"}`))
	f.Add([]byte(`[{}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_ = checkEnvelope(body) // never panics
	})
}
