package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/idemtest"
)

func TestStorableText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"declined", 4096, "declined"},
		{"", 4096, ""},
		{"line\n\ttab \u00e9 \U0001F600 \uFFFD \x01", 4096, "line\n\ttab \u00e9 \U0001F600 \uFFFD \x01"},
		{"declined: \x00", 4096, "declined: \uFFFD"},
		{"a\x00\x00b", 4096, "a\uFFFD\uFFFDb"},
		{"declined: \xff\xfe", 4096, "declined: \uFFFD\uFFFD"},
		{"caf\xc3", 4096, "caf\uFFFD"},
		{"\xed\xa0\x80", 4096, "\uFFFD\uFFFD\uFFFD"}, // a UTF-16 surrogate: three bytes that are not UTF-8
		{"abcdef", 4, "abcd"},
		{"\u00e9\u00e9\u00e9", 5, "\u00e9\u00e9"},                              // cut on a rune boundary, not in the third é
		{"ab\x00", 4, "ab"},                                                    // U+FFFD (3 bytes) does not fit in the 2 left
		{strings.Repeat("\u20ac", 1366), 4096, strings.Repeat("\u20ac", 1365)}, // 4098 bytes of €: 1365 fit
	} {
		if got := client.StorableText(tc.in, tc.n); got != tc.want {
			t.Errorf("StorableText(%q, %d) = %q; want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// FuzzStorableText: the text is UTF-8 without NUL and within the bound, and
// text that already was is unchanged, or cut on a rune boundary.
func FuzzStorableText(f *testing.F) {
	f.Add("declined: \x00", 4096)
	f.Add("caf\xc3\xff", 5)
	f.Add(strings.Repeat("\u20ac", 1366), 4096)
	f.Fuzz(func(t *testing.T, in string, n int) {
		n = max(0, n%5000)
		out := client.StorableText(in, n)
		if !utf8.ValidString(out) || strings.ContainsRune(out, 0) || len(out) > n {
			t.Fatalf("StorableText(%q, %d) = %q: not storable text of at most %d bytes", in, n, out, n)
		}
		if utf8.ValidString(in) && !strings.ContainsRune(in, 0) {
			if !strings.HasPrefix(in, out) || len(in) <= n && out != in || len(in) > n && len(out) < n-utf8.UTFMax+1 {
				t.Fatalf("StorableText(%q, %d) = %q; want the text itself, cut on a rune boundary near %d bytes", in, n, out, n)
			}
		}
	})
}

// TestDoRecordsAnyErrorText: whatever the text of fn's error holds (a NUL,
// bytes that are not UTF-8, more than the 4 KiB the server keeps), Do
// records the failure, on both stores, with the text made storable, and a
// later Do replays it.
func TestDoRecordsAnyErrorText(t *testing.T) {
	t.Parallel()
	servers := []struct {
		name string
		c    func(t *testing.T) *client.Client
	}{
		{"postgres", func(t *testing.T) *client.Client { return setup(t) }},
		{"sqlite", func(t *testing.T) *client.Client {
			return idemtest.NewServer(t, idemtest.WithClientOptions(client.WithRetry(fastRetry))).Client
		}},
	}
	cases := []struct {
		name, text, recorded string
		retryable            bool
	}{
		{"NUL", "declined: \x00", "declined: \uFFFD", false},
		{"NUL retryable", "timeout\x00", "timeout\uFFFD", true},
		{"invalid UTF-8", "declined: \xff\xfe card", "declined: \uFFFD\uFFFD card", false},
		{"over 4 KiB", strings.Repeat("\u20ac", 1366), strings.Repeat("\u20ac", 1365), false},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			c := srv.c(t)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					job := client.Job{Namespace: "text", Key: tc.name}
					cause := errors.New(tc.text)
					_, err := c.Do(t.Context(), job, func(context.Context, client.Attempt) ([]byte, error) {
						if tc.retryable {
							return nil, cause
						}
						return nil, client.Permanent(cause)
					})
					if !errors.Is(err, cause) || errors.Is(err, client.ErrFailureNotRecorded) {
						t.Fatalf("Do = %.300q; want fn's error alone, the failure recorded", err)
					}
					rec := mustLookup(t, c, job)
					wantState := client.StateFailed
					if tc.retryable {
						wantState = client.StateReleased
					}
					if rec.State != wantState || rec.Error != tc.recorded {
						t.Fatalf("record %s with error %q; want %s with %q", rec.State, rec.Error, wantState, tc.recorded)
					}
					if tc.retryable {
						return
					}
					_, err = c.Do(t.Context(), job, func(context.Context, client.Attempt) ([]byte, error) {
						t.Error("fn ran after a permanent failure")
						return nil, nil
					})
					var failed *client.JobFailedError
					if !errors.As(err, &failed) || failed.Message != tc.recorded {
						t.Fatalf("Do after the failure = %v; want *JobFailedError with %q", err, tc.recorded)
					}
				})
			}
		})
	}
}
