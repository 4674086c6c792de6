package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	linkRE       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fencedRE     = regexp.MustCompile("(?ms)^ *(```|~~~).*?^ *(```|~~~)")
	inlineCodeRE = regexp.MustCompile("`[^`\n]*`")
)

// TestLinks checks that every link of README.md and docs/*.md to a file of
// the repository finds it, and that a link to a heading (page.md#anchor)
// finds the heading, so that moving a section cannot leave a link behind.
func TestLinks(t *testing.T) {
	t.Parallel()
	files, err := pages(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	parsed := map[string]*page{}
	headings := func(file string) map[string]bool {
		if p, ok := parsed[file]; ok {
			return p.headings
		}
		p, err := parsePage(repoRoot, file)
		if err != nil {
			t.Fatal(err)
		}
		parsed[file] = p
		return p.headings
	}
	for _, file := range files {
		raw, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		text := inlineCodeRE.ReplaceAllString(fencedRE.ReplaceAllString(string(raw), ""), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			rel := file
			if path != "" {
				rel = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
				if _, err := os.Stat(filepath.Join(repoRoot, rel)); err != nil {
					t.Errorf("%s: the link %s finds no file %s", file, target, rel)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(rel, ".md") && !headings(rel)[anchor] {
				t.Errorf("%s: the link %s finds no heading #%s in %s", file, target, anchor, rel)
			}
		}
	}
}
