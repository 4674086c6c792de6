package grpctarget_test

import (
	"testing"

	"github.com/idemhq/idem/internal/grpctarget"
)

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for target, want := range map[string]bool{
		"127.0.0.1:7070":                 true,
		"127.1.2.3:7070":                 true,
		"[::1]:7070":                     true,
		"::1":                            true,
		"localhost:7070":                 true,
		"LOCALHOST:7070":                 true,
		"localhost":                      true,
		"dns:///localhost:7070":          true,
		"passthrough:///127.0.0.1:1":     true,
		"unix:///run/idem.sock":          true,
		"unix:idem.sock":                 true,
		"unix-abstract:idem":             true,
		"idem.example.com:7070":          false,
		"dns:///idem.example.com:7070":   false,
		"dns://8.8.8.8/localhost.x:7070": false,
		"10.0.0.1:7070":                  false,
		"localhost.example.com:7070":     false,
		"[::2]:7070":                     false,
		"":                               false,
	} {
		if got := grpctarget.IsLoopback(target); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", target, got, want)
		}
	}
}
