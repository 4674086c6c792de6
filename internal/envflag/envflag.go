// Package envflag holds what idem's two command lines (idem and idemd) do
// alike with the environment variables that stand in for their flags.
package envflag

import (
	"os"

	"github.com/alecthomas/kong"
)

// UnsetEmptyBools unsets the variables of app's boolean flags that are set
// but empty (IDEM_QUIET=), so that each reads as unset, the flag's default,
// as a shell user means it, where kong would refuse "" as not a boolean. A
// variable of any other kind keeps its empty value: an empty address turns
// a listener off, and an empty database URL is refused, never taken for
// none.
func UnsetEmptyBools(app *kong.Application) {
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			if !f.IsBool() {
				continue
			}
			for _, name := range f.Tag.Envs {
				if v, ok := os.LookupEnv(name); ok && v == "" {
					_ = os.Unsetenv(name)
				}
			}
		}
		for _, child := range n.Children {
			walk(child)
		}
	}
	walk(app.Node)
}
