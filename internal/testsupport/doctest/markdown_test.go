package doctest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// A block is one fenced code block of a page, or the hidden commands of a
// `<!-- doctest: run … -->` comment.
type block struct {
	file string // relative to the repository's root, such as docs/cli.md
	line int    // of the opening fence (or comment), 1-based
	lang string // the first word of the info string
	text string // the content, without the fence's indentation

	skip       string   // the reason after `doctest: skip`, if any
	background bool     // `doctest: background`: a server the page talks to
	twice      bool     // `doctest: twice`: run two times, as a reader may
	hidden     bool     // a `doctest: run` comment, not shown on the page
	needs      []string // `doctest: needs CMD…`: the commands it runs that `make test` may lack (npm, python3)
}

// firstLine is the block's first non-empty line, which names it in the
// list of blocks that are not run.
func (b block) firstLine() string {
	for _, l := range strings.Split(b.text, "\n") {
		if strings.TrimSpace(l) != "" {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// A page is one Markdown file: its blocks, in order, and its directives.
type page struct {
	file     string
	blocks   []block
	postgres bool // `<!-- doctest: postgres -->`: the page runs on PostgreSQL
	headings map[string]bool
}

// shellLangs are the info strings of blocks that hold commands: each such
// block must be run or say why not.
var shellLangs = map[string]bool{"console": true, "sh": true, "bash": true, "shell": true, "zsh": true}

var (
	fenceRE     = regexp.MustCompile("^( *)(```+|~~~+)\\s*([^`\\s]*)")
	directiveRE = regexp.MustCompile(`^\s*<!--\s*doctest:\s*(\w+)\s*(.*?)\s*(-->)?\s*$`)
	headingRE   = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// parsePage reads a Markdown file into its blocks and directives. A
// directive (an HTML comment `<!-- doctest: … -->`, invisible on GitHub)
// applies to the fenced block right after it, blank lines aside.
func parsePage(root, file string) (*page, error) {
	raw, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(raw), "\n")
	p := &page{file: file, headings: map[string]bool{}}
	slugs := map[string]int{}
	var pending *block // the directive waiting for its block
	var needs []string // the commands the next block needs, from a needs directive
	needsLine := 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := directiveRE.FindStringSubmatch(line); m != nil {
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: a doctest directive with no fenced block after it", file, pending.line)
			}
			kind, arg := m[1], m[2]
			if kind == "needs" {
				// It applies to the block after it, fenced or a doctest: run.
				if needs != nil {
					return nil, fmt.Errorf("%s:%d: two doctest: needs for one block", file, i+1)
				}
				if needs = strings.Fields(arg); len(needs) == 0 || m[3] == "" {
					return nil, fmt.Errorf("%s:%d: doctest: needs names the commands on its own line: <!-- doctest: needs npm python3 -->", file, i+1)
				}
				needsLine = i + 1
				continue
			}
			switch kind {
			case "postgres":
				p.postgres = true
			case "skip":
				if arg == "" {
					return nil, fmt.Errorf("%s:%d: doctest: skip needs a reason", file, i+1)
				}
				pending = &block{file: file, line: i + 1, skip: arg}
			case "background":
				pending = &block{file: file, line: i + 1, background: true}
			case "twice":
				pending = &block{file: file, line: i + 1, twice: true}
			case "run":
				// The commands are the comment's own lines, up to -->.
				if m[3] != "" {
					return nil, fmt.Errorf("%s:%d: doctest: run takes its commands on the lines after it, up to -->", file, i+1)
				}
				start := i + 1
				var body []string
				for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "-->"; i++ {
					body = append(body, lines[i])
				}
				if i == len(lines) {
					return nil, fmt.Errorf("%s:%d: doctest: run is never closed by a --> line", file, start)
				}
				p.blocks = append(p.blocks, block{file: file, line: start, lang: "sh", text: strings.Join(body, "\n"), hidden: true, needs: needs})
				needs = nil
			default:
				return nil, fmt.Errorf("%s:%d: unknown doctest directive %q (skip, background, twice, run, needs or postgres)", file, i+1, kind)
			}
			if kind == "postgres" && needs != nil {
				return nil, fmt.Errorf("%s:%d: a doctest: needs must be right before its block", file, needsLine)
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			indent, fence, lang := len(m[1]), m[2], m[3]
			b := block{file: file, line: i + 1, lang: lang, needs: needs}
			needs = nil
			if pending != nil {
				b.skip, b.background, b.twice = pending.skip, pending.background, pending.twice
				pending = nil
			}
			var body []string
			closed := false
			for i++; i < len(lines); i++ {
				l := lines[i]
				t := strings.TrimLeft(l, " ")
				if strings.HasPrefix(t, fence) && strings.Trim(t, string(fence[0])+" \t") == "" {
					closed = true
					break
				}
				// Strip the fence's indentation (a block inside a list item).
				n := 0
				for n < indent && n < len(l) && l[n] == ' ' {
					n++
				}
				body = append(body, l[n:])
			}
			if !closed {
				return nil, fmt.Errorf("%s:%d: a fenced block that is never closed", file, b.line)
			}
			b.text = strings.Join(body, "\n")
			p.blocks = append(p.blocks, b)
			continue
		}
		if strings.TrimSpace(line) != "" && pending != nil {
			return nil, fmt.Errorf("%s:%d: a doctest directive must be right before its fenced block", file, pending.line)
		}
		if strings.TrimSpace(line) != "" && needs != nil {
			return nil, fmt.Errorf("%s:%d: a doctest: needs must be right before its block", file, needsLine)
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			if n := slugs[s]; n > 0 {
				p.headings[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				p.headings[s] = true
			}
			slugs[s]++
		}
	}
	if pending != nil {
		return nil, fmt.Errorf("%s:%d: a doctest directive with no fenced block after it", file, pending.line)
	}
	if needs != nil {
		return nil, fmt.Errorf("%s:%d: a doctest: needs with no block after it", file, needsLine)
	}
	return p, nil
}

// slug is GitHub's anchor for a heading: lower case, markup and punctuation
// dropped, spaces made hyphens.
func slug(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case unicode.IsLetter(r), unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// pages are README.md and every docs/*.md, relative to root.
func pages(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		files = append(files, filepath.ToSlash(rel))
	}
	sort.Strings(files[1:])
	return files, nil
}

// A step is one command of a console block and the output the page shows
// for it.
type step struct {
	line int // in the page
	cmd  string
	want []string
}

// parseConsole splits a console block into its commands: a line that
// starts with "$ " is a command, continued by the lines after it while it
// ends in a backslash or they start with "> " (bash's continuation prompt,
// as in a here-document); the lines up to the next command are its output.
func parseConsole(b block) ([]step, error) {
	var steps []step
	lines := strings.Split(b.text, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if l != "$" && !strings.HasPrefix(l, "$ ") {
			if len(steps) == 0 {
				if strings.TrimSpace(l) == "" {
					continue
				}
				return nil, fmt.Errorf("%s: line %d of the block is output before any command (a console block starts with \"$ \")", b, i+1)
			}
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l)
			continue
		}
		s := step{line: b.line + 1 + i, cmd: strings.TrimPrefix(strings.TrimPrefix(l, "$"), " ")}
		for i+1 < len(lines) {
			next := lines[i+1]
			switch {
			case strings.HasSuffix(s.cmd, "\\"):
				s.cmd += "\n" + next
			case next == ">" || strings.HasPrefix(next, "> "):
				s.cmd += "\n" + strings.TrimPrefix(strings.TrimPrefix(next, ">"), " ")
			default:
				goto done
			}
			i++
		}
	done:
		steps = append(steps, s)
	}
	for i := range steps {
		steps[i].want = trimBlankTail(steps[i].want)
	}
	return steps, nil
}

func trimBlankTail(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// ellipsis in a page's expected output stands for text that varies (a
// time, a generated key) or that the page leaves out: within a line it
// matches any text, and a line of its own matches any number of lines.
const ellipsis = "…"

// canon makes a line of output comparable: trailing spaces dropped, and the
// spaces after a comma or a colon, which protobuf's JSON encoder varies
// from build to build, left out.
var afterPunct = regexp.MustCompile(`([,:]) +`)

func canon(s string) string {
	return afterPunct.ReplaceAllString(strings.TrimRight(s, " \t\r"), "$1")
}

// lineMatcher turns one expected line into a matcher.
func lineMatcher(want string) *regexp.Regexp {
	parts := strings.Split(canon(want), ellipsis)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// matchLines says whether got matches want, where a want line that is only
// an ellipsis matches any number of got lines.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == ellipsis {
		for k := 0; k <= len(got); k++ {
			if matchLines(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	if len(got) == 0 || !lineMatcher(want[0]).MatchString(canon(got[0])) {
		return false
	}
	return matchLines(want[1:], got[1:])
}
