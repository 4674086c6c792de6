// Package config reads and validates idemd's configuration file: the tenants
// that share one idem service, the hashes of their tokens, the client
// certificates that name them, the namespaces each may use, and their rate
// and size limits. It knows nothing of gRPC; cmd/idemd loads the file and
// the server package turns it into per-request lookups.
package config

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is the configuration file.
type File struct {
	// Tenants are the teams that share the service. At least one is needed.
	Tenants []Tenant `yaml:"tenants"`
}

// Tenant is one team. Its records are invisible to every other tenant.
type Tenant struct {
	// Name is part of every record's primary key:
	// ^[a-z0-9][a-z0-9_.-]{0,63}$, unique in the file.
	Name string `yaml:"name"`
	// Tokens are the hashes of the bearer tokens that authenticate as this
	// tenant, each "sha256:<64 hex digits>" (HashToken). Several may be
	// valid at once, which is how a token is rotated.
	Tokens []string `yaml:"tokens,omitempty"`
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
	// Admin is reserved for operator RPCs; no RPC reads it yet.
	Admin bool `yaml:"admin,omitempty"`
}

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

// Parse decodes a configuration strictly (an unknown field is an error) and
// validates it.
func Parse(data []byte) (*File, error) {
	// First pass: the node tree, to name fields by their path (tenants[1].
	// rate_limit) rather than by a line and a Go type.
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, oneLine(err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, errors.New("the file is empty; it needs a tenants list")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the file must be a mapping with a tenants list", root.Line)
	}
	walk := newFieldWalk()
	if err := walk.check(root, "", fileFields); err != nil {
		return nil, err
	}

	// Second pass: the strict decode itself.
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, withPath(err, walk.paths)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the file holds more than one YAML document; keep one")
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// CheckTenantName checks a tenant's name: 1 to 64 characters of a-z, 0-9,
// '_', '.', '-', starting with a letter or digit.
func CheckTenantName(name string) error {
	switch {
	case name == "":
		return errors.New("missing; every tenant needs a name")
	case !namePattern.MatchString(name):
		return fmt.Errorf("%q must match %s", truncate(name, 80), namePattern)
	}
	return nil
}

// Validate checks every rule of the file and returns the first broken one as
// "<path>: <what is wrong>".
func (f *File) Validate() error {
	if f == nil || len(f.Tenants) == 0 {
		return errors.New("tenants: empty; list at least one tenant")
	}
	names := map[string]int{}
	tokens := map[[sha256.Size]byte]string{}
	subjects := map[string]string{}
	for i := range f.Tenants {
		t := &f.Tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		if err := CheckTenantName(t.Name); err != nil {
			return fmt.Errorf("%s.name: %w", p, err)
		}
		if j, dup := names[t.Name]; dup {
			return fmt.Errorf("%s.name: %q is also the name of tenants[%d]", p, t.Name, j)
		}
		names[t.Name] = i
		if len(t.Tokens) == 0 && len(t.ClientCertSubjects) == 0 {
			return fmt.Errorf("%s: tenant %q has no tokens and no client_cert_subjects, so nobody can authenticate as it", p, t.Name)
		}
		for j, tok := range t.Tokens {
			sum, ok := ParseTokenHash(tok)
			if !ok {
				// Never echo the value: it may be a token pasted by mistake.
				return fmt.Errorf("%s.tokens[%d]: want %q (the hash `idemd token new` prints, never the token itself)", p, j, TokenHashPrefix+"<64 hex digits>")
			}
			if other, dup := tokens[sum]; dup {
				return fmt.Errorf("%s.tokens[%d]: duplicate token hash; %s has it too", p, j, other)
			}
			tokens[sum] = fmt.Sprintf("%s.tokens[%d]", p, j)
		}
		for j, subj := range t.ClientCertSubjects {
			q := fmt.Sprintf("%s.client_cert_subjects[%d]", p, j)
			if err := checkSubject(subj); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
			if other, dup := subjects[subj]; dup {
				return fmt.Errorf("%s: duplicate subject %q; %s has it too", q, subj, other)
			}
			subjects[subj] = q
		}
		if t.Namespaces != nil && len(t.Namespaces) == 0 {
			return fmt.Errorf("%s.namespaces: empty, which would allow nothing; list globs, or leave it out to allow every namespace", p)
		}
		for j, pattern := range t.Namespaces {
			if err := checkGlob(pattern); err != nil {
				return fmt.Errorf("%s.namespaces[%d]: %w", p, j, err)
			}
		}
		if rl := t.RateLimit; rl != nil {
			if !(rl.PerSecond > 0) || math.IsInf(rl.PerSecond, 0) {
				return fmt.Errorf("%s.rate_limit.per_second: %v; it must be a number above 0", p, rl.PerSecond)
			}
			if rl.Burst < 1 {
				return fmt.Errorf("%s.rate_limit.burst: %d; it must be at least 1", p, rl.Burst)
			}
		}
		if t.MaxResultBytes < 0 {
			return fmt.Errorf("%s.max_result_bytes: %d; it must be positive, or left out for the server's limit", p, t.MaxResultBytes)
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
		return fmt.Errorf("%q is not a valid glob (path.Match syntax: * ? [a-z] \\x)", truncate(pattern, 80))
	}
	if !strings.ContainsAny(pattern, `*?[\`) && !namePattern.MatchString(pattern) {
		return fmt.Errorf("%q can never match: namespaces match %s", truncate(pattern, 80), namePattern)
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
		return fmt.Errorf("%q is not a subject; want e.g. \"CN=payments-worker\" or \"CN=worker,O=Acme\"", truncate(subj, 80))
	}
	if hasSpacedComma(subj) || strings.HasPrefix(subj, " ") || strings.HasSuffix(subj, " ") {
		return fmt.Errorf("%q has spaces around its parts; write it as RFC 2253 prints it (\"CN=worker,O=Acme\"), which is what is compared", truncate(subj, 80))
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

// ---- field paths for YAML errors ----

// fields maps a mapping's known keys to the fields of the mapping inside
// them (nil for a scalar or a list of scalars).
type fields map[string]fieldsOf

type fieldsOf struct {
	list   bool // the value is a list of mappings with these fields
	fields fields
}

var (
	rateLimitFields = fields{"per_second": {}, "burst": {}}
	tenantFields    = fields{
		"name": {}, "tokens": {}, "client_cert_subjects": {}, "namespaces": {},
		"rate_limit": {fields: rateLimitFields}, "max_result_bytes": {}, "admin": {},
	}
	fileFields = fields{"tenants": {list: true, fields: tenantFields}}
)

// fieldWalk checks a file's keys against the known fields.
type fieldWalk struct {
	// paths maps a line to the path of the field on it, for withPath.
	paths map[int]string
	// active holds the mappings being walked, so that a mapping merging
	// itself in ("&a {<<: *a}") ends the walk instead of recursing forever;
	// the strict decode then reports it.
	active map[*yaml.Node]bool
	// budget bounds the mappings walked, which merge keys over aliases
	// could otherwise make exponential.
	budget int
}

func newFieldWalk() *fieldWalk {
	return &fieldWalk{paths: map[int]string{}, active: map[*yaml.Node]bool{}, budget: 10000}
}

// check walks a mapping node and reports an unknown key by its path.
func (w *fieldWalk) check(n *yaml.Node, prefix string, known fields) error {
	if n.Kind != yaml.MappingNode || w.active[n] {
		return nil // the strict decode reports the wrong kind, with withPath's help
	}
	if w.budget--; w.budget < 0 {
		return errors.New("the file merges mappings (<<) too many times over")
	}
	w.active[n] = true
	defer delete(w.active, n)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" { // "<<: *defaults" merges another mapping in
			for _, m := range mergedMappings(v) {
				if err := w.check(m, prefix, known); err != nil {
					return err
				}
			}
			continue
		}
		p := k.Value
		if prefix != "" {
			p = prefix + "." + k.Value
		}
		sub, ok := known[k.Value]
		if !ok {
			return fmt.Errorf("%s: unknown field (line %d); known fields here: %s", p, k.Line, keys(known))
		}
		recordPath(w.paths, k.Line, p)
		recordPath(w.paths, v.Line, p)
		switch {
		case sub.list && v.Kind == yaml.SequenceNode:
			for j, item := range v.Content {
				ip := fmt.Sprintf("%s[%d]", p, j)
				recordPath(w.paths, item.Line, ip)
				if err := w.check(item, ip, sub.fields); err != nil {
					return err
				}
			}
		case sub.fields != nil:
			if err := w.check(v, p, sub.fields); err != nil {
				return err
			}
		case v.Kind == yaml.SequenceNode:
			for j, item := range v.Content {
				recordPath(w.paths, item.Line, fmt.Sprintf("%s[%d]", p, j))
			}
		}
	}
	return nil
}

// mergedMappings are the mappings a merge key's value names: one alias, or
// a list of them.
func mergedMappings(v *yaml.Node) []*yaml.Node {
	var out []*yaml.Node
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		items = v.Content
	}
	for _, n := range items {
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		out = append(out, n)
	}
	return out
}

// recordPath keeps the deepest path seen on a line.
func recordPath(paths map[int]string, line int, p string) {
	if old, ok := paths[line]; !ok || len(p) > len(old) {
		paths[line] = p
	}
}

func keys(f fields) string {
	return strings.Join(slices.Sorted(maps.Keys(f)), ", ")
}

var linePrefix = regexp.MustCompile(`^line (\d+): (.*)$`)

// goTypes names the decoder's Go types the way the file's reader knows them.
var goTypes = strings.NewReplacer(
	"into []config.Tenant", "into a list of tenants",
	"into config.Tenant", "into a tenant (a mapping with name, tokens, …)",
	"into *config.RateLimit", "into a rate limit ({per_second: N, burst: N})",
	"into config.RateLimit", "into a rate limit ({per_second: N, burst: N})",
	"into config.File", "into the file (a mapping with a tenants list)",
	"into []string", "into a list of strings",
	"into float64", "into a number",
	"into int", "into an integer",
	"into bool", "into true or false",
)

// withPath turns the decoder's errors ("line 7: cannot unmarshal !!str …")
// into one line led by the field's path.
func withPath(err error, paths map[int]string) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return oneLine(err)
	}
	parts := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		e = goTypes.Replace(e)
		if m := linePrefix.FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			if p, ok := paths[line]; ok {
				parts = append(parts, fmt.Sprintf("%s: %s (line %d)", p, m[2], line))
				continue
			}
		}
		parts = append(parts, e)
	}
	return errors.New(strings.Join(parts, "; "))
}

// oneLine flattens a YAML error to one line without its "yaml: " prefix.
func oneLine(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return errors.New(strings.Join(strings.Fields(msg), " "))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
