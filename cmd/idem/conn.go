package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"

	"github.com/idemhq/idem/client"
)

// wantsTLS reports whether any TLS flag was given: each implies --tls.
func (g *globals) wantsTLS() bool {
	return g.TLS || g.TLSCA != "" || g.TLSCert != "" || g.TLSKey != "" || g.TLSServerName != ""
}

// dial makes the client, refusing plaintext that would leave the machine
// unless --insecure says it is intended.
func (g *globals) dial() (*client.Client, error) {
	loopback := client.IsLoopback(g.Addr)
	var opts []client.Option
	switch {
	case g.wantsTLS() && g.Insecure:
		return nil, usageError("--insecure and --tls (or a --tls-* flag) contradict each other; pass one of them")
	case g.wantsTLS():
		cfg, err := g.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTLS(cfg))
	case loopback || g.Insecure:
		opts = append(opts, client.WithInsecure())
	default:
		return nil, usageError("--addr %s is not a loopback address, so plaintext would cross the network: pass --tls (and --tls-ca FILE unless a system CA signed idemd's certificate), or --insecure if plaintext is intended", g.Addr)
	}
	if g.Token != "" {
		if !g.wantsTLS() && !loopback {
			return nil, usageError("refusing to send --token in plaintext to %s: pass --tls, or reach idemd on a loopback address", g.Addr)
		}
		opts = append(opts, client.WithToken(g.Token))
	}
	c, err := client.New(g.Addr, opts...)
	if err != nil {
		return nil, usageError("--addr %s: %v", g.Addr, err)
	}
	return c, nil
}

func (g *globals) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: g.TLSServerName}
	if g.TLSCA != "" {
		pem, err := os.ReadFile(g.TLSCA)
		if err != nil {
			return nil, usageError("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageError("--tls-ca %s holds no PEM certificate; pass the CA certificate (-----BEGIN CERTIFICATE-----)", g.TLSCA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case g.TLSCert != "" && g.TLSKey == "":
		return nil, usageError("--tls-cert needs --tls-key, the client certificate's private key")
	case g.TLSKey != "" && g.TLSCert == "":
		return nil, usageError("--tls-key needs --tls-cert, the client certificate it belongs to")
	case g.TLSCert != "":
		cert, err := tls.LoadX509KeyPair(g.TLSCert, g.TLSKey)
		if err != nil {
			return nil, usageError("--tls-cert %s / --tls-key %s: %v", g.TLSCert, g.TLSKey, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
