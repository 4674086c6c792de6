package limits_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemhq/idem/limits"
)

func TestClip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		s    string
		n    int
		want string
	}{
		{"", 5, ""},
		{"abc", 3, "abc"},
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc"},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"héllo", 2, "h"},  // é is 2 bytes: cutting at 2 would halve it
		{"héllo", 3, "hé"}, // the cut falls after é
		{"日本語", 4, "日"},    // 3-byte characters
		{"日本語", 5, "日"},
		{"日本語", 6, "日本"},
		{"a😀b", 4, "a"}, // a 4-byte character, cut after 3 of its bytes
		{"a😀b", 5, "a😀"},
		{"ab\xff\xffcd", 3, "ab\xff"},              // not UTF-8: cut at the byte
		{"a\x80\x80\x80\x80b", 4, "a\x80\x80\x80"}, // continuation bytes with no start: cut at the byte
	}
	for _, tc := range cases {
		if got := limits.Clip(tc.s, tc.n); got != tc.want {
			t.Errorf("Clip(%q, %d) = %q; want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestEllipsis(t *testing.T) {
	t.Parallel()
	if got := limits.Ellipsis("short", 80); got != "short" {
		t.Errorf("Ellipsis(short) = %q", got)
	}
	if got := limits.Ellipsis("Zürich", 2); got != "Z…" {
		t.Errorf("Ellipsis(Zürich, 2) = %q; want Z…", got)
	}
	long := strings.Repeat("ü", 50) // 100 bytes
	got := limits.Ellipsis(long, 81)
	if !utf8.ValidString(got) || got != strings.Repeat("ü", 40)+"…" {
		t.Errorf("Ellipsis(100 bytes of ü, 81) = %q", got)
	}
}

// FuzzClip: the prefix is a prefix of at most n bytes, as long as it can
// be, and valid UTF-8 whenever the text is.
func FuzzClip(f *testing.F) {
	f.Add("héllo wörld", 4)
	f.Add("a😀b", 3)
	f.Add("\xff\xfe", 1)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := limits.Clip(s, n)
		if !strings.HasPrefix(s, got) {
			t.Fatalf("Clip(%q, %d) = %q is not a prefix", s, n, got)
		}
		if len(got) > max(n, 0) {
			t.Fatalf("Clip(%q, %d) = %q is longer than %d bytes", s, n, got, n)
		}
		if len(got) < min(len(s), n)-(utf8.UTFMax-1) {
			t.Fatalf("Clip(%q, %d) = %q cut more than a character", s, n, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Clip(%q, %d) = %q cut a character in half", s, n, got)
		}
		if utf8.ValidString(s) && n < len(s) && n >= 0 && utf8.ValidString(s[:n]) && got != s[:n] {
			t.Fatalf("Clip(%q, %d) = %q; want %q", s, n, got, s[:n])
		}
	})
}
