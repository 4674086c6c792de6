package middleware

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFileError is a PEM file LoadTLSConfig could not use: the certificate
// and key pair, or the client CA. A caller that took the files' names from
// flags or settings can name those instead of the files.
type TLSFileError struct {
	// ClientCA is true when the client CA's file failed, false when the
	// certificate and key did.
	ClientCA bool
	// Files are the files' names: the certificate and the key, or the CA.
	Files []string
	// Err is what was wrong with them.
	Err error
}

func (e *TLSFileError) Error() string {
	if e.ClientCA {
		return fmt.Sprintf("client CA %s: %v", e.Files[0], e.Err)
	}
	return fmt.Sprintf("TLS certificate %s and key %s: %v", e.Files[0], e.Files[1], e.Err)
}

func (e *TLSFileError) Unwrap() error { return e.Err }

// LoadTLSConfig returns the server's TLS configuration from PEM files: its
// certificate chain and key, and, when clientCAFile is not empty, the CA
// that every client's certificate must be signed by (mutual TLS). A client
// certificate may then name a tenant through client_cert_subjects in the
// config file. A file it cannot use is a *TLSFileError.
func LoadTLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both a certificate file and a key file")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, &TLSFileError{Files: []string{certFile, keyFile}, Err: err}
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, &TLSFileError{ClientCA: true, Files: []string{clientCAFile}, Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &TLSFileError{ClientCA: true, Files: []string{clientCAFile}, Err: errors.New("no PEM certificate in it")}
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
