package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/idemhq/idem/config"
)

type tokenCmd struct {
	New tokenNewCmd `cmd:"" help:"Print a fresh random token and the hash to paste into the config file."`
}

type tokenNewCmd struct {
	Tenant string `required:"" help:"The tenant the token is for."`
	Output string `short:"o" enum:"text,json" default:"text" help:"Output format: text (the token and the config line, with comments for people) or json (one object: tenant, token, hash, for scripts)."`
}

// newToken is what -o json prints.
type newToken struct {
	Tenant string `json:"tenant"`
	Token  string `json:"token"`
	Hash   string `json:"hash"`
}

func (c *tokenNewCmd) Run() error { return c.print(os.Stdout) }

func (c *tokenNewCmd) print(w io.Writer) error {
	if err := config.CheckTenantName(c.Tenant); err != nil {
		return fmt.Errorf("--tenant: %w", err)
	}
	token, err := config.NewToken()
	if err != nil {
		return err
	}
	if c.Output == "json" {
		return json.NewEncoder(w).Encode(newToken{Tenant: c.Tenant, Token: token, Hash: config.HashToken(token)})
	}
	_, err = fmt.Fprintf(w, `# A new token for tenant %[1]q. Give it to the tenant's workers: idemd keeps
# only its hash, so it cannot be shown again.
%[2]s
# Add this hash to the tokens of tenant %[1]q in the config file (keep the old
# hash until every worker uses the new token, then remove it):
tokens: [%[3]q]
`, c.Tenant, token, config.HashToken(token))
	return err
}
