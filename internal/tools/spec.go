package tools

import (
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// Spec returns the spec the assembly derives from one declaration, or the
// error naming its first invalid field.
func Spec(t gate.Tool) (*toolspec.Spec, error) {
	reg := gate.NewRegistry()
	if err := reg.Add(t); err != nil {
		return nil, err
	}
	return toolspec.Of(reg).All()[0], nil
}
