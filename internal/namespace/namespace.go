// Package namespace holds the rule every namespace meets, in one place for
// the server, which refuses a request whose namespace breaks it, and the
// config, which refuses a namespace glob that could never match one.
package namespace

import "regexp"

// Pattern is what a namespace matches: 1 to 64 characters of a-z, 0-9, '_',
// '.', '-', starting with a letter or digit.
var Pattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// Valid reports whether s is a namespace.
func Valid(s string) bool { return Pattern.MatchString(s) }
