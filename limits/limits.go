// Package limits holds every bound idem puts on its input, and the defaults
// inside them, in one place: the server refuses a request that breaks them,
// the config refuses a file that could never meet them, and the Go SDK
// shapes what it sends to fit them. The TypeScript and Python SDKs carry
// copies; a test of this package fails when a copy disagrees.
//
// It imports nothing but the standard library, so that a Go SDK user can
// read the bounds without the server's dependencies.
package limits

import (
	"regexp"
	"time"
	"unicode/utf8"
)

// NamespacePattern is what a namespace matches: 1 to 64 characters of a-z,
// 0-9, '_', '.', '-', starting with a letter or digit (DESIGN §2).
var NamespacePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// NamespaceRule says NamespacePattern in words, for messages.
const NamespaceRule = "1 to 64 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit"

// ValidNamespace reports whether s is a namespace: whether it matches
// NamespacePattern. It runs for every call, so it tests the bytes itself
// rather than running the pattern (FuzzValidNamespace holds the two to the
// same answer).
func ValidNamespace(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// The bounds of a request's fields (DESIGN §2), in bytes.
const (
	// MaxKeyBytes bounds the idempotency key; a key is at least 1 byte.
	MaxKeyBytes = 256
	// MaxFingerprintBytes bounds a Claim's fingerprint.
	MaxFingerprintBytes = 64
	// MaxClaimantBytes bounds a Claim's claimant.
	MaxClaimantBytes = 128
	// MaxErrorBytes bounds the error text of a Fail or a ResolveRecord.
	MaxErrorBytes = 4096
	// MaxReasonBytes bounds the reason of a resolution or a deletion.
	MaxReasonBytes = 1024
	// MaxResolverBytes bounds the name a resolver gives itself; a name is
	// at least 1 byte.
	MaxResolverBytes = 128
)

// The bounds of a Claim's lease, and the default of a Claim or Heartbeat
// that sends none. A server's --default-lease-ttl and a policy's lease_ttl
// and max_lease_ttl keep within the bounds too.
const (
	MinLeaseTTL     = time.Second
	MaxLeaseTTL     = 24 * time.Hour
	DefaultLeaseTTL = 5 * time.Minute
)

// The bounds of how long a record is kept after it leaves PROCESSING, and
// the default of a Claim that sends none. A server's --default-retention and
// a policy's retention keep within the bounds too.
const (
	MinRetention     = time.Minute
	MaxRetention     = 90 * 24 * time.Hour
	DefaultRetention = 24 * time.Hour
)

// MaxWait bounds ClaimRequest.wait: how long a Claim that finds the job in
// progress may wait for it to finish.
const MaxWait = 60 * time.Second

// The bounds of a job's steps (StartStep, CompleteStep). A step's name is
// 1 to MaxStepNameBytes of UTF-8 without control characters, as a key is;
// its result is bounded as Complete's is. A server keeps at most its
// --max-steps steps per job, DefaultMaxSteps unless set, and at most its
// --max-step-bytes of their names and results together,
// DefaultMaxStepBytes unless set.
const (
	MaxStepNameBytes    = 128
	DefaultMaxSteps     = 64
	DefaultMaxStepBytes = 64 << 10
)

// The bounds of Complete's result, in bytes. A server accepts results of at
// most its --max-result-bytes, DefaultMaxResultBytes unless set and at most
// ResultBytesCeiling; a tenant's max_result_bytes may lower it.
const (
	DefaultMaxResultBytes = 64 << 10
	ResultBytesCeiling    = 16 << 20
)

// Clip returns the longest prefix of s of at most n bytes that does not end
// inside a UTF-8 character, to fit text to a byte bound. Text that is not
// UTF-8 is cut at byte n less the bytes of an incomplete character at the
// cut, never more than utf8.UTFMax-1 of them.
func Clip(s string, n int) string {
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
// Clip of n bytes followed by "…" otherwise, so that a message quoting the
// input stays short.
func Ellipsis(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Clip(s, n) + "…"
}
