// Package clip shortens text to a number of bytes without cutting a UTF-8
// character in half, for messages, logs and stored text with a byte limit.
// It imports nothing of idem's, so the server, the config and the client
// can all use it.
package clip

import "unicode/utf8"

// Prefix returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 character. Text that is not UTF-8 is cut at byte n
// less the bytes of an incomplete character at the cut, never more than
// utf8.UTFMax-1 of them.
func Prefix(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	// Step back over the continuation bytes of a character that s[n]
	// continues, at most utf8.UTFMax-1 of them.
	cut := n
	for cut > 0 && n-cut < utf8.UTFMax-1 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = n // not UTF-8 here: no character to keep whole
	}
	return s[:cut]
}

// Ellipsis returns s for a message: whole when it is at most n bytes, its
// Prefix of n bytes followed by "…" otherwise.
func Ellipsis(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Prefix(s, n) + "…"
}
