//go:build !unix

package buildcache

// lock does nothing where there is no flock: there, two suites that build
// at the same moment may race on the binary.
func lock(string) (func(), error) { return func() {}, nil }
