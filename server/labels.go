package server

import (
	"strings"
	"sync"
)

// OtherNamespace is the namespace label of the Claims whose namespace has
// no label of its own. No namespace can be called that: namespaces start
// with a letter or a digit.
const OtherNamespace = "_other"

// DefaultNamespaceLabels is how many namespaces, beyond those the config
// names literally, get a label of their own unless LimitNamespaceLabels
// says otherwise.
const DefaultNamespaceLabels = 100

// namespaceLabels decides which namespaces idem_claims_total labels: the
// namespaces tenants' allow-lists name literally, then the first max others
// that Claims use; every other namespace is counted as OtherNamespace. A
// tenant that may use a glob's worth of namespaces can thus add at most max
// series, whatever it claims.
type namespaceLabels struct {
	mu     sync.RWMutex
	known  map[string]bool // namespace → it has a label of its own
	max    int             // how many first-seen namespaces may join known
	joined int
}

func newNamespaceLabels() *namespaceLabels {
	return &namespaceLabels{known: map[string]bool{}, max: DefaultNamespaceLabels}
}

// label returns namespace's label value.
func (l *namespaceLabels) label(namespace string) string {
	l.mu.RLock()
	known, full := l.known[namespace], l.joined >= l.max
	l.mu.RUnlock()
	switch {
	case known:
		return namespace
	case full:
		return OtherNamespace
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.known[namespace] {
		return namespace
	}
	if l.joined >= l.max {
		return OtherNamespace
	}
	l.known[namespace] = true
	l.joined++
	return namespace
}

// addLiteral labels the namespaces of an allow-list that are not globs;
// they do not count against max.
func (l *namespaceLabels) addLiteral(patterns []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range patterns {
		if !strings.ContainsAny(p, `*?[\`) {
			l.known[p] = true
		}
	}
}
