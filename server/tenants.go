package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"fmt"
	"path"
	"slices"
	"sync"

	"golang.org/x/time/rate"

	"github.com/idemhq/idem/config"
)

// Tenants is the set of tenants from the configuration file, built once at
// start for lookups on every request: a token's hash, a client
// certificate's subject or a tenant's name each find the tenant with one map
// lookup and no allocation.
type Tenants struct {
	byName    map[string]*tenant
	byToken   map[[sha256.Size]byte]*tenant
	bySubject map[string]*tenant // RFC 2253 subject from the config file

	// subjects caches which tenant a certificate's raw DER subject names, so
	// that Subject.String() runs once per distinct certificate subject, not
	// once per request. Only certificates the client CA verified get here,
	// and the cache stops growing at maxCachedSubjects.
	subjectsMu sync.RWMutex
	subjects   map[string]*tenant
}

const maxCachedSubjects = 4096

// tenant is one tenant's policy.
type tenant struct {
	name string
	// tokens are the hashes of its tokens, for the constant-time comparison.
	tokens [][sha256.Size]byte
	// namespaces is the allow-list of globs; nil allows every namespace.
	namespaces []string
	// limiter is its token bucket; nil means no limit.
	limiter *rate.Limiter
	// maxResultBytes is its result limit; 0 means the server's.
	maxResultBytes int
	// admin admits it to AdminService (AdminOnly).
	admin bool
	// policies are its namespaces' policies, first match wins.
	policies []*policy
	// operator lets its AdminService calls name other tenants
	// (AdminService.targetTenants).
	operator bool
}

// NewTenants builds the tenant set of a configuration file. It validates f
// again, so that a File built in code gets the same checks as a file read
// from disk.
func NewTenants(f *config.File) (*Tenants, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	ts := &Tenants{
		byName:    make(map[string]*tenant, len(f.Tenants)),
		byToken:   map[[sha256.Size]byte]*tenant{},
		bySubject: map[string]*tenant{},
		subjects:  map[string]*tenant{},
	}
	for _, c := range f.Tenants {
		t := &tenant{name: c.Name, namespaces: c.Namespaces, maxResultBytes: c.MaxResultBytes,
			admin: c.IsAdmin(), operator: c.Operator, policies: newPolicies(c.Policies)}
		if c.RateLimit != nil {
			t.limiter = rate.NewLimiter(rate.Limit(c.RateLimit.PerSecond), c.RateLimit.Burst)
		}
		for _, h := range c.Tokens {
			sum, ok := config.ParseTokenHash(h)
			if !ok { // Validate checked it
				return nil, fmt.Errorf("tenant %q: bad token hash", c.Name)
			}
			t.tokens = append(t.tokens, sum)
			ts.byToken[sum] = t
		}
		for _, s := range c.ClientCertSubjects {
			ts.bySubject[s] = t
		}
		ts.byName[c.Name] = t
	}
	return ts, nil
}

// names returns the tenants' names in order.
func (ts *Tenants) names() []string {
	names := make([]string, 0, len(ts.byName))
	for name := range ts.byName {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// lookup returns the tenant named name, nil when there is none (or no
// tenants at all: a nil ts).
func (ts *Tenants) lookup(name string) *tenant {
	if ts == nil {
		return nil
	}
	return ts.byName[name]
}

// byTokenHash returns the tenant whose token hashes to sum. The map lookup
// works on a SHA-256 of the token, so its timing tells nothing usable about
// the token; the final comparison is constant-time all the same.
func (ts *Tenants) byTokenHash(sum *[sha256.Size]byte) *tenant {
	t := ts.byToken[*sum]
	if t == nil {
		return nil
	}
	match := 0
	for i := range t.tokens {
		match |= subtle.ConstantTimeCompare(t.tokens[i][:], sum[:])
	}
	if match != 1 {
		return nil
	}
	return t
}

// byCertificate returns the tenant that a verified client certificate
// names, nil when none does.
func (ts *Tenants) byCertificate(cert *x509.Certificate) *tenant {
	if len(ts.bySubject) == 0 {
		return nil
	}
	ts.subjectsMu.RLock()
	t, ok := ts.subjects[string(cert.RawSubject)]
	ts.subjectsMu.RUnlock()
	if ok {
		return t
	}
	t = ts.bySubject[cert.Subject.String()]
	ts.subjectsMu.Lock()
	if len(ts.subjects) < maxCachedSubjects {
		ts.subjects[string(cert.RawSubject)] = t
	}
	ts.subjectsMu.Unlock()
	return t
}

// allows reports whether the tenant may use namespace.
func (t *tenant) allows(namespace string) bool {
	if t.namespaces == nil {
		return true
	}
	for _, pattern := range t.namespaces {
		// The patterns were checked at load, so Match cannot fail here.
		if ok, _ := path.Match(pattern, namespace); ok {
			return true
		}
	}
	return false
}
