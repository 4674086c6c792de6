// Package config reads and validates idemd's configuration file: the tenants
// that share one idem service, the hashes of their tokens, the client
// certificates that name them, the namespaces each may use, and their rate
// and size limits. It knows nothing of gRPC; cmd/idemd loads the file and
// the server package turns it into per-request lookups.
package config

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemhq/idem/limits"
)

// File is the configuration file.
type File struct {
	// Tenants are the teams that share the service. A file without tenants
	// may only hold Policies: idemd then serves the one tenant "default"
	// without authentication, as it does without a file.
	Tenants []Tenant `yaml:"tenants"`
	// Policies are the policies of the tenant "default", when the file has
	// no tenants. A file with tenants gives each its own.
	Policies []Policy `yaml:"policies,omitempty"`
}

// IsAdmin reports whether the tenant may call AdminService: admin: true,
// or operator: true, which implies it.
func (t *Tenant) IsAdmin() bool { return t.Admin || t.Operator }

// Tenant is one team. Its records are invisible to every other tenant.
type Tenant struct {
	// Name is part of every record's primary key:
	// ^[a-z0-9][a-z0-9_.-]{0,63}$, unique in the file.
	Name string `yaml:"name"`
	// Tokens are the hashes of the bearer tokens that authenticate as this
	// tenant, each "sha256:<64 hex digits>" (HashToken). Several may be
	// valid at once, which is how a token is rotated.
	Tokens []string `yaml:"tokens,omitempty"`
	// NamedTokens are bearer tokens that name who holds them: each
	// authenticates as the tenant, as one of Tokens does, and the records'
	// timelines and idemd's audit log name the holder (the person at the
	// console, say) rather than only the tenant. The hashes are unique
	// across Tokens and NamedTokens of the whole file.
	NamedTokens []NamedToken `yaml:"named_tokens,omitempty"`
	// ClientCertSubjects name the tenant by a verified client certificate's
	// subject, exactly as RFC 2253 prints it ("CN=payments-worker,O=Acme",
	// what `openssl x509 -noout -subject -nameopt RFC2253` shows). They need
	// idemd's --client-ca.
	ClientCertSubjects []string `yaml:"client_cert_subjects,omitempty"`
	// Namespaces, when set, is the allow-list of namespaces the tenant may
	// use, as path.Match globs ("refund.*"). Unset allows every namespace.
	Namespaces []string `yaml:"namespaces,omitempty"`
	// RateLimit, when set, is a token bucket on the tenant's RPCs. Unset
	// means no limit.
	RateLimit *RateLimit `yaml:"rate_limit,omitempty"`
	// MaxResultBytes, when above 0, lowers the largest result the tenant may
	// Complete with below the server's --max-result-bytes.
	MaxResultBytes int `yaml:"max_result_bytes,omitempty"`
	// Admin admits the tenant to AdminService, the RPCs that list, delete
	// and count its own records (ListRecords, DeleteRecord, Stats).
	// Other tenants get PERMISSION_DENIED / NOT_ADMIN from them.
	Admin bool `yaml:"admin,omitempty"`
	// Operator makes the tenant the operator of the shared service: its
	// AdminService calls may name any tenant in the file, or all of them,
	// and each such call is logged. It implies Admin. An operator has no
	// namespace allow-list: it would not say whose namespaces it limits.
	// Give the role to a tenant of its own, held by the people who run idem.
	Operator bool `yaml:"operator,omitempty"`
	// Policies set lease and retention defaults and bounds per namespace
	// glob. The first policy whose globs match a namespace applies to it; a
	// namespace none matches gets the server's defaults and bounds.
	Policies []Policy `yaml:"policies,omitempty"`
}

// NamedToken is a bearer token that names who holds it.
type NamedToken struct {
	// Name is who holds the token ("alice@example.com"): 1 to
	// MaxOperatorNameBytes bytes of UTF-8 without control characters. Names
	// need not be unique: a person rotating a token has two.
	Name string `yaml:"name"`
	// Token is the token's hash, "sha256:<64 hex digits>" (HashToken).
	Token string `yaml:"token"`
}

// MaxOperatorNameBytes bounds a NamedToken's name.
const MaxOperatorNameBytes = 128

// CheckOperatorName checks a NamedToken's name.
func CheckOperatorName(name string) error {
	switch {
	case name == "":
		return errors.New("missing; name who holds the token, such as \"alice@example.com\"")
	case len(name) > MaxOperatorNameBytes:
		return fmt.Errorf("%d bytes; the limit is %d", len(name), MaxOperatorNameBytes)
	case !utf8.ValidString(name):
		return errors.New("not valid UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%q has a control character; names are printable text", limits.Ellipsis(name, 80))
		}
	}
	return nil
}

// Policy is how the records of the namespaces it matches are held. Its
// zero fields leave the server's default in place.
type Policy struct {
	// Namespaces are path.Match globs ("payments.*"); at least one. The
	// policy's name, which every record it applied to shows, is these globs
	// joined by commas (PolicyName).
	Namespaces []string `yaml:"namespaces"`
	// LeaseTTL is the lease of a Claim or Heartbeat that asks for none
	// (within limits.MinLeaseTTL–limits.MaxLeaseTTL). Unset, the server's
	// default lease, lowered to MaxLeaseTTL when that is below it.
	LeaseTTL time.Duration `yaml:"lease_ttl,omitempty"`
	// MaxLeaseTTL bounds the lease a Claim or Heartbeat may ask for: one that
	// asks for more is refused with INVALID_ARGUMENT. Unset, the server's
	// bound (limits.MaxLeaseTTL). It may not be below LeaseTTL.
	MaxLeaseTTL time.Duration `yaml:"max_lease_ttl,omitempty"`
	// Retention is the retention of a Claim that asks for none (within
	// limits.MinRetention–limits.MaxRetention). Unset, the server's default.
	Retention time.Duration `yaml:"retention,omitempty"`
	// OnLeaseExpiry is what happens to a record whose lease runs out without
	// a Complete or Fail: "retry" (the default) lets the next Claim take it
	// over; "hold" makes it UNRESOLVED, which no Claim takes over, until its
	// holder's late Complete or Fail or an operator's ResolveRecord.
	OnLeaseExpiry string `yaml:"on_lease_expiry,omitempty"`
	// OnUnfinishedStep is what happens to a job with a step started and not
	// finished (StartStep without CompleteStep) when a Claim would take it
	// over: "rerun" (the default) lets it, and the successor runs the step
	// again; "hold" makes the record UNRESOLVED instead, for its holder or a
	// person to decide whether the step's effect happened.
	OnUnfinishedStep string `yaml:"on_unfinished_step,omitempty"`
}

// The values of Policy.OnLeaseExpiry.
const (
	OnLeaseExpiryRetry = "retry"
	OnLeaseExpiryHold  = "hold"
)

// The values of Policy.OnUnfinishedStep.
const (
	OnUnfinishedStepRerun = "rerun"
	OnUnfinishedStepHold  = "hold"
)

// PolicyName is the name a record shows for the policy that applied to it:
// the policy's globs joined by commas.
func (p *Policy) PolicyName() string { return strings.Join(p.Namespaces, ",") }

// RateLimit is a token bucket: PerSecond tokens are added every second, up
// to Burst, and every RPC takes one.
type RateLimit struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"`
}

// TokenHashPrefix starts every token hash in the file.
const TokenHashPrefix = "sha256:"

// tokenPrefix starts every token NewToken makes, so that secret scanners and
// people recognise one.
const tokenPrefix = "idem_"

// NewToken returns a fresh random bearer token: 256 bits from crypto/rand.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashToken returns the line the config file stores for token:
// "sha256:" and the hex of its SHA-256.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return TokenHashPrefix + hex.EncodeToString(sum[:])
}

// ParseTokenHash decodes a "sha256:<64 hex digits>" entry.
func ParseTokenHash(s string) ([sha256.Size]byte, bool) {
	var sum [sha256.Size]byte
	hexPart, ok := strings.CutPrefix(s, TokenHashPrefix)
	if !ok || len(hexPart) != 2*sha256.Size {
		return sum, false
	}
	if _, err := hex.Decode(sum[:], []byte(hexPart)); err != nil {
		return sum, false
	}
	return sum, true
}

// Load reads and validates the file at name. Its errors are one line that
// starts with the file's name and names the offending field.
func Load(name string) (*File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	return f, nil
}

// tenantNamePattern is what a tenant's name matches. It reads like
// limits.NamespacePattern but is a rule of its own: a namespace glob is checked
// against limits.NamespacePattern, never against this.
var tenantNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// CheckTenantName checks a tenant's name: 1 to 64 characters of a-z, 0-9,
// '_', '.', '-', starting with a letter or digit.
func CheckTenantName(name string) error {
	switch {
	case name == "":
		return errors.New("missing; every tenant needs a name")
	case !tenantNamePattern.MatchString(name):
		return fmt.Errorf("%q must match %s", limits.Ellipsis(name, 80), tenantNamePattern)
	}
	return nil
}

// Validate checks every rule of the file and returns the first broken one as
// "<path>: <what is wrong>". Parse adds the line the field is on.
func (f *File) Validate() error {
	if f == nil || (len(f.Tenants) == 0 && len(f.Policies) == 0) {
		return fieldErrorf("tenants", "empty; list at least one tenant")
	}
	if len(f.Tenants) > 0 && len(f.Policies) > 0 {
		return fieldErrorf("policies", "top-level policies are for the tenant \"default\" of a file without tenants; put them under each tenant's policies")
	}
	if err := checkPolicies("policies", f.Policies); err != nil {
		return err
	}
	names := map[string]int{}
	seen := credentials{tokens: map[[sha256.Size]byte]string{}, subjects: map[string]string{}}
	for i := range f.Tenants {
		t := &f.Tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		if err := CheckTenantName(t.Name); err != nil {
			return fieldErrorf(p+".name", "%w", err)
		}
		if j, dup := names[t.Name]; dup {
			return fieldErrorf(p+".name", "%q is also the name of tenants[%d]", t.Name, j)
		}
		names[t.Name] = i
		if err := seen.check(p, t); err != nil {
			return err
		}
		if err := t.checkLimits(p); err != nil {
			return err
		}
	}
	return nil
}

// credentials are the token hashes and client certificate subjects of the
// tenants checked so far, each by where it stands: no two tenants, and no
// two entries of one, may share one.
type credentials struct {
	tokens   map[[sha256.Size]byte]string
	subjects map[string]string
}

// check checks the ways to authenticate as t, the tenant at p.
func (c credentials) check(p string, t *Tenant) error {
	if len(t.Tokens) == 0 && len(t.NamedTokens) == 0 && len(t.ClientCertSubjects) == 0 {
		return fieldErrorf(p, "tenant %q has no tokens, named_tokens or client_cert_subjects, so nobody can authenticate as it", t.Name)
	}
	for j, tok := range t.Tokens {
		if err := c.checkHash(fmt.Sprintf("%s.tokens[%d]", p, j), tok); err != nil {
			return err
		}
	}
	for j, nt := range t.NamedTokens {
		q := fmt.Sprintf("%s.named_tokens[%d]", p, j)
		if err := CheckOperatorName(nt.Name); err != nil {
			return fieldErrorf(q+".name", "%w", err)
		}
		if nt.Token == "" {
			return fieldErrorf(q+".token", "missing; want %q (the hash `idemd token new --name` prints)", TokenHashPrefix+"<64 hex digits>")
		}
		if err := c.checkHash(q+".token", nt.Token); err != nil {
			return err
		}
	}
	for j, subj := range t.ClientCertSubjects {
		q := fmt.Sprintf("%s.client_cert_subjects[%d]", p, j)
		if err := checkSubject(subj); err != nil {
			return fieldErrorf(q, "%w", err)
		}
		if other, dup := c.subjects[subj]; dup {
			return fieldErrorf(q, "duplicate subject %q; %s has it too", subj, other)
		}
		c.subjects[subj] = q
	}
	return nil
}

// checkHash checks tok, the token hash at q.
func (c credentials) checkHash(q, tok string) error {
	sum, ok := ParseTokenHash(tok)
	if !ok {
		// Never echo the value: it may be a token pasted by mistake.
		return fieldErrorf(q, "want %q (the hash `idemd token new` prints, never the token itself)", TokenHashPrefix+"<64 hex digits>")
	}
	if other, dup := c.tokens[sum]; dup {
		return fieldErrorf(q, "duplicate token hash; %s has it too", other)
	}
	c.tokens[sum] = q
	return nil
}

// checkLimits checks what t, the tenant at p, may do: its namespaces, rate
// limit, result limit and policies.
func (t *Tenant) checkLimits(p string) error {
	if t.Namespaces != nil && len(t.Namespaces) == 0 {
		return fieldErrorf(p+".namespaces", "empty, which would allow nothing; list globs, or leave it out to allow every namespace")
	}
	if t.Operator && t.Namespaces != nil {
		return fieldErrorf(p+".namespaces", "tenant %q is an operator, which manages every tenant's namespaces; drop namespaces, or give the operator a tenant entry of its own", t.Name)
	}
	for j, pattern := range t.Namespaces {
		if err := checkGlob(pattern); err != nil {
			return fieldErrorf(fmt.Sprintf("%s.namespaces[%d]", p, j), "%w", err)
		}
	}
	if rl := t.RateLimit; rl != nil {
		if !(rl.PerSecond > 0) || math.IsInf(rl.PerSecond, 0) {
			return fieldErrorf(p+".rate_limit.per_second", "%v; it must be a number above 0", rl.PerSecond)
		}
		if rl.Burst < 1 {
			return fieldErrorf(p+".rate_limit.burst", "%d; it must be at least 1", rl.Burst)
		}
	}
	if t.MaxResultBytes < 0 {
		return fieldErrorf(p+".max_result_bytes", "%d; it must be positive, or left out for the server's limit", t.MaxResultBytes)
	}
	return checkPolicies(p+".policies", t.Policies)
}

// checkPolicies checks a list of policies at path.
func checkPolicies(path string, policies []Policy) error {
	for i := range policies {
		pol := &policies[i]
		p := fmt.Sprintf("%s[%d]", path, i)
		if len(pol.Namespaces) == 0 {
			return fieldErrorf(p+".namespaces", "missing; list the globs of the namespaces the policy applies to (\"payments.*\")")
		}
		for j, pattern := range pol.Namespaces {
			if err := checkGlob(pattern); err != nil {
				return fieldErrorf(fmt.Sprintf("%s.namespaces[%d]", p, j), "%w", err)
			}
		}
		if d := pol.LeaseTTL; d != 0 && (d < limits.MinLeaseTTL || d > limits.MaxLeaseTTL) {
			return fieldErrorf(p+".lease_ttl", "%v is outside %v–%v", d, limits.MinLeaseTTL, limits.MaxLeaseTTL)
		}
		if d := pol.MaxLeaseTTL; d != 0 && (d < limits.MinLeaseTTL || d > limits.MaxLeaseTTL) {
			return fieldErrorf(p+".max_lease_ttl", "%v is outside %v–%v", d, limits.MinLeaseTTL, limits.MaxLeaseTTL)
		}
		if pol.MaxLeaseTTL != 0 && pol.LeaseTTL > pol.MaxLeaseTTL {
			return fieldErrorf(p+".max_lease_ttl", "%v is below the policy's lease_ttl (%v); raise it or lower lease_ttl", pol.MaxLeaseTTL, pol.LeaseTTL)
		}
		if d := pol.Retention; d != 0 && (d < limits.MinRetention || d > limits.MaxRetention) {
			return fieldErrorf(p+".retention", "%v is outside %v–%v", d, limits.MinRetention, limits.MaxRetention)
		}
		switch pol.OnLeaseExpiry {
		case "", OnLeaseExpiryRetry, OnLeaseExpiryHold:
		default:
			return fieldErrorf(p+".on_lease_expiry", "%q; want %q or %q", limits.Ellipsis(pol.OnLeaseExpiry, 40), OnLeaseExpiryRetry, OnLeaseExpiryHold)
		}
		switch pol.OnUnfinishedStep {
		case "", OnUnfinishedStepRerun, OnUnfinishedStepHold:
		default:
			return fieldErrorf(p+".on_unfinished_step", "%q; want %q or %q", limits.Ellipsis(pol.OnUnfinishedStep, 40), OnUnfinishedStepRerun, OnUnfinishedStepHold)
		}
	}
	return nil
}

// CheckMaxResultBytes checks that no tenant's max_result_bytes exceeds the
// server's limit, serverMax.
func (f *File) CheckMaxResultBytes(serverMax int) error {
	for i, t := range f.Tenants {
		if t.MaxResultBytes > serverMax {
			return fmt.Errorf("tenants[%d].max_result_bytes: %d is above the server's --max-result-bytes (%d); lower it or raise the flag", i, t.MaxResultBytes, serverMax)
		}
	}
	return nil
}

// UsesClientCerts reports whether any tenant is named by a client
// certificate.
func (f *File) UsesClientCerts() bool {
	for _, t := range f.Tenants {
		if len(t.ClientCertSubjects) > 0 {
			return true
		}
	}
	return false
}

// checkGlob rejects a pattern path.Match cannot use, and a literal that can
// never match a namespace (namespaces are lower case).
func checkGlob(pattern string) error {
	if pattern == "" {
		return errors.New("empty pattern")
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return fmt.Errorf("%q is not a valid glob (path.Match syntax: * ? [a-z] \\x)", limits.Ellipsis(pattern, 80))
	}
	if !strings.ContainsAny(pattern, `*?[\`) && !limits.ValidNamespace(pattern) {
		return fmt.Errorf("%q can never match: namespaces match %s", limits.Ellipsis(pattern, 80), limits.NamespacePattern)
	}
	return nil
}

// checkSubject accepts what RFC 2253 prints: TYPE=value pairs joined by
// commas, without the spaces some tools add after them.
func checkSubject(subj string) error {
	if subj == "" {
		return errors.New("empty subject; want e.g. \"CN=payments-worker\"")
	}
	if !strings.Contains(subj, "=") || strings.HasPrefix(subj, "=") {
		return fmt.Errorf("%q is not a subject; want e.g. \"CN=payments-worker\" or \"CN=worker,O=Acme\"", limits.Ellipsis(subj, 80))
	}
	if hasSpacedComma(subj) || strings.HasPrefix(subj, " ") || strings.HasSuffix(subj, " ") {
		return fmt.Errorf("%q has spaces around its parts; write it as RFC 2253 prints it (\"CN=worker,O=Acme\"), which is what is compared", limits.Ellipsis(subj, 80))
	}
	return nil
}

// hasSpacedComma reports an unescaped comma followed by a space: "CN=w, O=x"
// where RFC 2253 prints "CN=w,O=x". An escaped one (`O=Acme\, Inc.`) is
// part of a value.
func hasSpacedComma(subj string) bool {
	for i := 0; i < len(subj); i++ {
		switch subj[i] {
		case '\\':
			i++
		case ',':
			if i+1 < len(subj) && subj[i+1] == ' ' {
				return true
			}
		}
	}
	return false
}
