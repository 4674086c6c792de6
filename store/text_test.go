package store_test

import (
	"errors"
	"testing"

	"github.com/idemhq/idem/store"
)

func TestCheckText(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "a", "tab\tnewline\n", "\x01\x7f\u0085", "caf\u00e9 \U0001F600 \uFFFD"} {
		if err := store.CheckText("key", ok); err != nil {
			t.Errorf("CheckText(%q): %v; want nil", ok, err)
		}
	}
	for _, tc := range []struct {
		value   string
		problem store.TextProblem
		offset  int
	}{
		{"\x00", store.TextNUL, 0},
		{"ab\x00", store.TextNUL, 2},
		{"\u00e9\x00\xff", store.TextNUL, 2},
		{"\u00e9\xff\x00", store.TextInvalidUTF8, 2},
		{"caf\xc3", store.TextInvalidUTF8, 3},
		{"\xed\xa0\x80", store.TextInvalidUTF8, 0}, // a UTF-16 surrogate
		{"\xc0\x80", store.TextInvalidUTF8, 0},     // an overlong NUL
	} {
		err := store.CheckText("claimant", tc.value)
		var textErr *store.TextError
		if !errors.Is(err, store.ErrInvalidText) || !errors.As(err, &textErr) {
			t.Errorf("CheckText(%q): %v; want a *TextError that is ErrInvalidText", tc.value, err)
			continue
		}
		if *textErr != (store.TextError{Field: "claimant", Problem: tc.problem, Offset: tc.offset}) {
			t.Errorf("CheckText(%q): %+v; want %s at byte %d", tc.value, *textErr, tc.problem, tc.offset)
		}
	}
}
