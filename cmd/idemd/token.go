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
	Name   string `help:"Who holds the token (alice@example.com): the config line is then a named_tokens entry, and the records' timelines and idemd's audit log name its holder."`
	Output string `short:"o" enum:"text,json" default:"text" help:"Output format: text (the token and the config line, with comments for people) or json (one object: tenant, name, token, hash, for scripts)."`
}

// newToken is what -o json prints.
type newToken struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name,omitempty"`
	Token  string `json:"token"`
	Hash   string `json:"hash"`
}

func (c *tokenNewCmd) Run() error { return c.print(os.Stdout) }

func (c *tokenNewCmd) print(w io.Writer) error {
	if err := config.CheckTenantName(c.Tenant); err != nil {
		return fmt.Errorf("--tenant: %w", err)
	}
	if c.Name != "" {
		if err := config.CheckOperatorName(c.Name); err != nil {
			return fmt.Errorf("--name: %w", err)
		}
	}
	token, err := config.NewToken()
	if err != nil {
		return err
	}
	if c.Output == "json" {
		return json.NewEncoder(w).Encode(newToken{Tenant: c.Tenant, Name: c.Name, Token: token, Hash: config.HashToken(token)})
	}
	if c.Name != "" {
		entry, err := json.Marshal(map[string]string{"name": c.Name, "token": config.HashToken(token)})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, `# A new token for %[2]s, of tenant %[1]q. Give it to them alone: idemd keeps
# only its hash, so it cannot be shown again.
%[3]s
# Add this entry to the named_tokens of tenant %[1]q in the config file:
named_tokens: [%[4]s]
`, c.Tenant, c.Name, token, entry)
		return err
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
