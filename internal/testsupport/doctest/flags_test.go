package doctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A documented flag: a row of a page's flag table, or a flag of --help.
type flagDoc struct {
	env        string
	def        string
	hasDefault bool // --help shows a value that is a default, not a placeholder
	isBool     bool // --help shows no value
	negatable  bool // --[no-]name
}

// TestFlagTables checks each page's flag table against the --help of the
// command it documents: the same flags, the same environment variables, and
// the defaults --help shows.
func TestFlagTables(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		page, section string
		args          []string
		helpFrom      string // the --help heading the flags are under
	}{
		{"docs/configuration.md", "idemd serve", []string{"idemd", "serve", "--help"}, "Flags:"},
		{"docs/configuration.md", "idemd sweep", []string{"idemd", "sweep", "--help"}, "Flags:"},
		{"docs/cli.md", "Global flags", []string{"idem", "--help"}, "Global flags (every command):"},
	} {
		t.Run(c.section, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(filepath.Join(binDir, c.args[0]), c.args[1:]...).Output()
			if err != nil {
				t.Fatalf("%s: %v", strings.Join(c.args, " "), err)
			}
			help := helpFlags(t, string(out), c.helpFrom)
			table := tableFlags(t, c.page, c.section)
			for name, h := range help {
				d, ok := table[name]
				if !ok {
					t.Errorf("%s, %s: --%s (%s) is not in the table", c.page, c.section, name, strings.Join(c.args, " "))
					continue
				}
				if d.env != h.env {
					t.Errorf("%s, %s: --%s has env %q in the table and %q in --help", c.page, c.section, name, d.env, h.env)
				}
				switch {
				case h.negatable:
				case h.isBool:
					if d.def != "false" && d.def != "off" {
						t.Errorf("%s, %s: --%s is a switch, off by default; the table says %q", c.page, c.section, name, d.def)
					}
				case h.hasDefault:
					if !sameDefault(d.def, h.def) {
						t.Errorf("%s, %s: --%s defaults to %q in --help and %q in the table", c.page, c.section, name, h.def, d.def)
					}
				}
			}
			for name := range table {
				if _, ok := help[name]; !ok {
					t.Errorf("%s, %s: the table has --%s, which %s does not", c.page, c.section, name, strings.Join(c.args, " "))
				}
			}
		})
	}
}

var (
	// kong indents a flag by two columns, and its short form's place by four
	// more when it has none; the lines of its description, by many more.
	helpFlagRE = regexp.MustCompile(`^  (?:-\w, |    )--(\[no-\])?([a-z0-9-]+)(?:=(\S+))?`)
	helpEnvRE  = regexp.MustCompile(`\(\$(IDEM_[A-Z0-9_]+)\)`)
	// A value in --help that names what to give (URL, HOST:PORT), not a default.
	placeholderRE = regexp.MustCompile(`^[A-Z][A-Z:_]*$`)
)

// helpFlags reads the flags kong prints under the heading from, up to the
// next heading, leaving out --help and --version.
func helpFlags(t *testing.T, help, from string) map[string]flagDoc {
	t.Helper()
	_, rest, ok := strings.Cut(help, "\n"+from+"\n")
	if !ok {
		t.Fatalf("--help has no %q heading:\n%s", from, help)
	}
	flags := map[string]flagDoc{}
	var name string
	var desc strings.Builder
	flush := func() {
		if name == "" {
			return
		}
		f := flags[name]
		if m := helpEnvRE.FindStringSubmatch(strings.Join(strings.Fields(desc.String()), "")); m != nil {
			f.env = m[1]
		}
		flags[name] = f
		name = ""
		desc.Reset()
	}
	for _, line := range strings.Split(rest, "\n") {
		if line != "" && line[0] != ' ' { // the next heading
			break
		}
		if m := helpFlagRE.FindStringSubmatch(line); m != nil {
			flush()
			name = m[2]
			f := flagDoc{negatable: m[1] != "", isBool: m[3] == ""}
			if v := m[3]; v != "" && !placeholderRE.MatchString(v) {
				f.def, f.hasDefault = strings.Trim(v, `"`), true
			}
			flags[name] = f
			desc.WriteString(line[len(m[0]):])
			continue
		}
		desc.WriteString(" " + line)
	}
	flush()
	delete(flags, "help")
	delete(flags, "version")
	return flags
}

var tableFlagRE = regexp.MustCompile("`(?:-\\w/)?--(?:\\[no-\\])?([a-z0-9-]+)`")

// tableFlags reads the flag table of a page's section: rows of
// | `--flag` | `ENV` | default | meaning |, where one row may name several
// flags and as many variables, in the same order.
func tableFlags(t *testing.T, page, section string) map[string]flagDoc {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, page))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "\n## "+section+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", page, "## "+section)
	}
	rest, _, _ = strings.Cut(rest, "\n## ")
	flags := map[string]flagDoc{}
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "| `-") {
			continue
		}
		cells := strings.Split(strings.ReplaceAll(line, `\|`, ""), "|")[1:]
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) < 4 {
			t.Fatalf("%s: a flag row with fewer than four cells: %s", page, line)
		}
		var names []string
		for _, m := range tableFlagRE.FindAllStringSubmatch(cells[0], -1) {
			names = append(names, m[1])
		}
		var envs []string
		for _, e := range strings.Split(cells[1], ",") {
			if e = strings.Trim(strings.TrimSpace(e), "`"); e != "" {
				envs = append(envs, e)
			}
		}
		if len(envs) != 0 && len(envs) != len(names) {
			t.Fatalf("%s: a row names %d flags and %d variables: %s", page, len(names), len(envs), line)
		}
		for i, n := range names {
			if _, dup := flags[n]; dup {
				t.Errorf("%s, %s: --%s has two rows", page, section, n)
			}
			d := flagDoc{def: strings.Trim(strings.TrimSpace(cells[2]), "`")}
			if len(envs) > 0 {
				d.env = envs[i]
			}
			flags[n] = d
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%s, %s: no flag table", page, section)
	}
	return flags
}

// sameDefault compares a default as the table writes it with --help's:
// durations by their value (1m is 1m0s).
func sameDefault(table, help string) bool {
	if table == help {
		return true
	}
	a, errA := time.ParseDuration(table)
	b, errB := time.ParseDuration(help)
	return errA == nil && errB == nil && a == b
}
