// Package migrations holds idem's database schema as numbered SQL files,
// embedded in every binary. store/postgres applies them in order; the idemd
// migrate command and the test helpers run the same code.
package migrations

import "embed"

// FS holds the migrations, named NNN_description.sql.
//
//go:embed *.sql
var FS embed.FS
