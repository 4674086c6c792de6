package server_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem/server/middleware"
)

// TestLoadTLSConfigErrorsNameFilesNotFlags: the server package knows files,
// not idemd's flags; a *TLSFileError says which file failed so that idemd
// can name its flag.
func TestLoadTLSConfigErrorsNameFilesNotFlags(t *testing.T) {
	t.Parallel()
	_, err := middleware.LoadTLSConfig("/nonexistent/c.pem", "/nonexistent/k.pem", "")
	var fileErr *middleware.TLSFileError
	if !errors.As(err, &fileErr) || fileErr.ClientCA {
		t.Fatalf("LoadTLSConfig = %v; want a *TLSFileError for the certificate and key", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "/nonexistent/c.pem") || strings.Contains(msg, "--") {
		t.Errorf("error %q; want the file named and no flag", msg)
	}
	if _, err := middleware.LoadTLSConfig("", "k.pem", ""); err == nil || strings.Contains(err.Error(), "--") {
		t.Errorf("without a certificate: %v; want an error naming no flag", err)
	}
}
