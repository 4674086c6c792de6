package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/server/middleware"
	"github.com/idemhq/idem/server/services"
)

// securityFlags are serve's flags for tenants, authentication and TLS.
type securityFlags struct {
	Config                       string `env:"IDEM_CONFIG" placeholder:"FILE" help:"YAML file of tenants, their token hashes, namespaces and limits (see docs/security.md). Without it idemd serves one tenant, default, without authentication."`
	TLSCert                      string `name:"tls-cert" env:"IDEM_TLS_CERT" placeholder:"FILE" help:"PEM certificate chain to serve TLS with; needs --tls-key."`
	TLSKey                       string `name:"tls-key" env:"IDEM_TLS_KEY" placeholder:"FILE" help:"PEM private key of --tls-cert."`
	ClientCA                     string `name:"client-ca" env:"IDEM_CLIENT_CA" placeholder:"FILE" help:"PEM CA that every client's certificate must be signed by (mutual TLS); needs --tls-cert."`
	InsecureAllowUnauthenticated bool   `env:"IDEM_INSECURE_ALLOW_UNAUTHENTICATED" help:"Serve without --config on a non-loopback address: anyone who reaches it can read and change every record."`
}

// validate checks the flags alone, before any file is read.
func (f *securityFlags) validate(listen string) error {
	if (f.TLSCert == "") != (f.TLSKey == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together; pass both or neither")
	}
	if f.ClientCA != "" && f.TLSCert == "" {
		return fmt.Errorf("--client-ca needs TLS; pass --tls-cert and --tls-key too")
	}
	if f.Config == "" && f.ClientCA == "" && !f.InsecureAllowUnauthenticated && !isLoopback(listen) {
		return fmt.Errorf("refusing to serve without authentication on %s, which is not a loopback address: pass --config with tenants and tokens, or --insecure-allow-unauthenticated to let anyone who reaches it read and change every record", listen)
	}
	return nil
}

// security is what load read: the tenants (nil without a config file), the
// server options they need, and what to log once idemd serves (not before:
// a start-up error must stay one line).
type security struct {
	tenants *services.Tenants
	// policies are the default tenant's, from a config file without tenants.
	policies []config.Policy
	opts     []grpc.ServerOption
	warnings []string
	// configTenants counts the config file's tenants, for the log line that
	// says it was loaded.
	configTenants int
}

// load reads the config file and the TLS files.
func (f *securityFlags) load(listen string, maxResultBytes int) (*security, error) {
	sec := &security{}
	var tokens bool
	if f.Config != "" {
		file, err := config.Load(f.Config)
		if err != nil {
			return nil, err
		}
		if err := file.CheckMaxResultBytes(maxResultBytes); err != nil {
			return nil, fmt.Errorf("config %s: %w", f.Config, err)
		}
		if file.UsesClientCerts() && f.ClientCA == "" {
			return nil, fmt.Errorf("config %s: client_cert_subjects need --client-ca, the CA that signs the client certificates", f.Config)
		}
		for _, t := range file.Tenants {
			tokens = tokens || len(t.Tokens) > 0 || len(t.NamedTokens) > 0
		}
		sec.configTenants = len(file.Tenants)
		if len(file.Tenants) == 0 {
			// Only policies: the tenant "default", as without a file.
			if f.ClientCA == "" && !f.InsecureAllowUnauthenticated && !isLoopback(listen) {
				return nil, fmt.Errorf("config %s has no tenants, so idemd would serve without authentication on %s, which is not a loopback address: add tenants and tokens, or pass --insecure-allow-unauthenticated to let anyone who reaches it read and change every record", f.Config, listen)
			}
			sec.policies = file.Policies
		} else if sec.tenants, err = services.NewTenants(file); err != nil {
			return nil, fmt.Errorf("config %s: %w", f.Config, err)
		}
	}
	tenants := sec.tenants

	if f.TLSCert != "" {
		cfg, err := f.tlsConfig()
		if err != nil {
			return nil, err
		}
		sec.opts = append(sec.opts, grpc.Creds(credentials.NewTLS(cfg)))
	}

	// Without tenants, what idemd serves: the tenant "default", with the
	// policies of a config file that holds only those.
	served := `no --config`
	if f.Config != "" {
		served = fmt.Sprintf("config %s has no tenants, only %d %s for the tenant %q", f.Config, len(sec.policies), plural(len(sec.policies), "policy", "policies"), "default")
	}
	var warnings []string
	switch {
	case tenants == nil && f.ClientCA != "":
		warnings = append(warnings, served+`: every client with a certificate from --client-ca is tenant "default" and can read and change every record`)
	case tenants == nil:
		warnings = append(warnings, served+`: serving without authentication; every caller is tenant "default" and can read and change every record`)
	case tokens && f.TLSCert == "" && !isLoopback(listen):
		warnings = append(warnings, "bearer tokens cross the network in plaintext: pass --tls-cert and --tls-key, or terminate TLS in front of idemd")
	}
	sec.warnings = warnings
	return sec, nil
}

// tlsConfig loads the TLS files the flags name; an error names the flag of
// the file that failed.
func (f *securityFlags) tlsConfig() (*tls.Config, error) {
	cfg, err := middleware.LoadTLSConfig(f.TLSCert, f.TLSKey, f.ClientCA)
	var fileErr *middleware.TLSFileError
	switch {
	case errors.As(err, &fileErr) && fileErr.ClientCA:
		return nil, fmt.Errorf("--client-ca %s: %w", f.ClientCA, fileErr.Err)
	case errors.As(err, &fileErr):
		return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", f.TLSCert, f.TLSKey, fileErr.Err)
	case err != nil:
		return nil, fmt.Errorf("--tls-cert and --tls-key: %w", err)
	}
	return cfg, nil
}

// isLoopback reports whether a listen address accepts connections from this
// machine only. A host name other than localhost counts as not loopback.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// plural is one or many, as n asks.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
