package doctest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The harness's own rules: a page that shows the wrong output must fail.
func TestMatchLines(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		want, got string
		match     bool
	}{
		{"exit 0", "exit 0", true},
		{"exit 0", "exit 1", false},
		{"exit 0", "", false},
		{"", "exit 0", false},
		{`{"token":"1",…}`, `{"token":"1", "attempt":1}`, true},      // spaces after , and : do not count
		{`{"token":"1",…}`, `{"token":"2", "attempt":1}`, false},     // … stands for text, not for what is shown
		{"a\n…\nz", "a\nb\nc\nz", true},                              // … on its own line: any lines
		{"a\n…\nz", "a\nz", true},                                    // … none at all
		{"a\n…\nz", "a\nb", false},                                   // the line after … must come
		{"idemd … (commit …)", "idemd v1 (commit abc)", true},        // several … in a line
		{"idemd … (commit …)", "idemd v1 (commit abc) extra", false}, // a line matches whole
		{"ok  ", "ok", true},                                         // trailing spaces do not count
	} {
		got := strings.Split(c.got, "\n")
		if c.got == "" {
			got = nil
		}
		want := strings.Split(c.want, "\n")
		if c.want == "" {
			want = nil
		}
		if m := matchLines(want, got); m != c.match {
			t.Errorf("matchLines(%q, %q) = %v, want %v", c.want, c.got, m, c.match)
		}
	}
}

func TestParseConsole(t *testing.T) {
	t.Parallel()
	b := block{file: "x.md", line: 10, lang: "console", text: "$ curl -s http://h/ \\\n    -d '{}'\n{\"a\":1}\n$ cat > f <<'EOF'\n> x\n> EOF\n$ echo done\ndone\n"}
	steps, err := parseConsole(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 {
		t.Fatalf("%d steps, want 3: %+v", len(steps), steps)
	}
	if steps[0].cmd != "curl -s http://h/ \\\n    -d '{}'" || strings.Join(steps[0].want, "\n") != `{"a":1}` {
		t.Errorf("a continued command: %q, output %q", steps[0].cmd, steps[0].want)
	}
	if steps[1].cmd != "cat > f <<'EOF'\nx\nEOF" || len(steps[1].want) != 0 {
		t.Errorf("a here-document: %q, output %q", steps[1].cmd, steps[1].want)
	}
	if steps[2].line != 17 {
		t.Errorf("the third command is on line %d of the page, want 17", steps[2].line)
	}
	if _, err := parseConsole(block{file: "x.md", line: 1, text: "output first\n$ echo"}); err == nil {
		t.Error("a console block that starts with output is accepted")
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Held for resolution":                   "held-for-resolution",
		"1. Model":                              "1-model",
		"4. Layout, and why":                    "4-layout-and-why",
		"The Go SDK from a clone":               "the-go-sdk-from-a-clone",
		"`idemd serve`":                         "idemd-serve",
		"Waiting Claims: from a Complete to it": "waiting-claims-from-a-complete-to-it",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestParseNeeds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	parse := func(text string) (*page, error) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "p.md"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return parsePage(dir, "p.md")
	}
	p, err := parse("<!-- doctest: needs npm python3 -->\n<!-- doctest: run\nnpm --version\n-->\n\n<!-- doctest: needs npm -->\n<!-- doctest: twice -->\n```console\n$ npm --version\n…\n```\n\n```sh\ntrue\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.blocks) != 3 {
		t.Fatalf("%d blocks, want 3", len(p.blocks))
	}
	for i, want := range [][]string{{"npm", "python3"}, {"npm"}, nil} {
		if !slices.Equal(p.blocks[i].needs, want) {
			t.Errorf("block %d needs %q, want %q", i, p.blocks[i].needs, want)
		}
	}
	if !p.blocks[1].twice {
		t.Error("a needs before a twice: the block lost its twice")
	}
	for _, bad := range []string{
		"<!-- doctest: needs -->\n```sh\ntrue\n```\n",                           // no command
		"<!-- doctest: needs npm -->\ntext\n```sh\ntrue\n```\n",                 // not right before
		"<!-- doctest: needs npm -->\n",                                         // no block
		"<!-- doctest: needs npm -->\n<!-- doctest: needs go -->\n```sh\n```\n", // twice
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("%q is accepted", bad)
		}
	}
}
