package limits_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/limits"
)

// root is the repository's root, seen from this package's directory.
const root = ".."

// sdkCopy is a constant that an SDK in another language copies from this
// package: the file that defines it, the definition's pattern (its first
// group is the value, a product of numbers such as 5 * 60_000), and the
// value it must have in the unit that SDK counts in.
type sdkCopy struct {
	file string
	def  string
	want float64
}

var sdkCopies = []sdkCopy{
	{"clients/typescript/src/text.ts", `export const MAX_ERROR_BYTES = ([^;]+);`, limits.MaxErrorBytes},
	{"clients/typescript/src/do.ts", `export const MAX_WAIT_MS = ([^;]+);`, ms(limits.MaxWait)},
	{"clients/typescript/src/do.ts", `const DEFAULT_LEASE_TTL_MS = ([^;]+);`, ms(limits.DefaultLeaseTTL)},
	{"clients/typescript/src/client.ts", `const RESULT_BYTES_CEILING = ([^;]+);`, limits.ResultBytesCeiling},
	{"clients/python/src/idem/_do.py", `(?m)^MAX_ERROR_BYTES = (.+)$`, limits.MaxErrorBytes},
	{"clients/python/src/idem/_do.py", `(?m)^_DEFAULT_LEASE_TTL = (.+)$`, limits.DefaultLeaseTTL.Seconds()},
	{"clients/python/src/idem/_types.py", `(?m)^MAX_WAIT = (.+)$`, limits.MaxWait.Seconds()},
	{"clients/typescript/src/httpidem.ts", `const MAX_KEY_BYTES = ([^;]+);`, limits.MaxKeyBytes},
	{"clients/typescript/src/express.ts", `const MIN_LEASE_TTL_MS = ([^;]+);`, ms(limits.MinLeaseTTL)},
	{"clients/typescript/src/express.ts", `const MAX_LEASE_TTL_MS = ([^;]+);`, ms(limits.MaxLeaseTTL)},
	{"clients/typescript/src/express.ts", `const MIN_RETENTION_MS = ([^;]+);`, ms(limits.MinRetention)},
	{"clients/typescript/src/express.ts", `const MAX_RETENTION_MS = ([^;]+);`, ms(limits.MaxRetention)},
	{"clients/typescript/src/express.ts", `const RESULT_BYTES_CEILING = ([^;]+);`, limits.ResultBytesCeiling},
	{"clients/python/src/idem/web.py", `(?m)^_MAX_KEY_BYTES = (.+)$`, limits.MaxKeyBytes},
	{"clients/python/src/idem/web.py", `(?m)^_MIN_LEASE_TTL = (.+)$`, limits.MinLeaseTTL.Seconds()},
	{"clients/python/src/idem/web.py", `(?m)^_MAX_LEASE_TTL = (.+)$`, limits.MaxLeaseTTL.Seconds()},
	{"clients/python/src/idem/web.py", `(?m)^_MIN_RETENTION = (.+)$`, limits.MinRetention.Seconds()},
	{"clients/python/src/idem/web.py", `(?m)^_MAX_RETENTION = (.+)$`, limits.MaxRetention.Seconds()},
	{"clients/python/src/idem/web.py", `(?m)^_RESULT_BYTES_CEILING = (.+)$`, limits.ResultBytesCeiling},
}

func ms(d time.Duration) float64 { return float64(d.Milliseconds()) }

// TestSDKCopies fails when the TypeScript or Python SDK's copy of a bound
// disagrees with this package, or when a copy is no longer where this test
// looks: then move the test with it.
func TestSDKCopies(t *testing.T) {
	t.Parallel()
	for _, c := range sdkCopies {
		src, err := os.ReadFile(filepath.Join(root, c.file))
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		m := regexp.MustCompile(c.def).FindSubmatch(src)
		if m == nil {
			t.Errorf("%s: no definition matching %s; update this test to where the copy went", c.file, c.def)
			continue
		}
		got, err := product(string(m[1]))
		if err != nil {
			t.Errorf("%s: %s: %v", c.file, m[0], err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: %s is %v; the limits package says %v", c.file, strings.TrimSpace(string(m[0])), got, c.want)
		}
	}
}

// product evaluates a product of number literals, such as "5 * 60_000" or
// "300.0".
func product(expr string) (float64, error) {
	v := 1.0
	for _, f := range strings.Split(expr, "*") {
		n, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(f), "_", ""), 64)
		if err != nil {
			return 0, err
		}
		v *= n
	}
	return v, nil
}

// namespacePatternLike finds what reads like a namespace pattern in
// documentation: a character class, another with a repeat count, anchored.
var namespacePatternLike = regexp.MustCompile(`\^\[a-z0-9\]\[[^\]]*\]\{\d+,\d+\}\$`)

// TestNamespacePatternCopies fails when an SDK's, the proto's or the docs'
// quotation of the namespace pattern disagrees with NamespacePattern.
func TestNamespacePatternCopies(t *testing.T) {
	t.Parallel()
	want := limits.NamespacePattern.String()
	found := 0
	for _, dir := range []string{"client", "clients/typescript/src", "clients/python/src", "proto", "docs"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "node_modules" {
					return filepath.SkipDir
				}
				return nil
			}
			switch filepath.Ext(path) {
			case ".go", ".ts", ".py", ".proto", ".md":
			default:
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range namespacePatternLike.FindAll(src, -1) {
				found++
				if string(m) != want {
					t.Errorf("%s quotes the namespace pattern as %s; limits.NamespacePattern is %s", path, m, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found == 0 {
		t.Fatal("found no quotation of the namespace pattern: the test looks in the wrong places")
	}
}

// TestStandardLibraryOnly keeps the package importable by a Go SDK user
// without the server's dependencies.
func TestStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s; the limits package imports only the standard library", name, path)
			}
		}
	}
}
