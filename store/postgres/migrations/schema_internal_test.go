package migrations

import "testing"

func TestFirstSchema(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"idem":                    "idem",
		"Idem":                    "idem",
		"idem, public":            "idem",
		`"$user", public`:         "public",
		`"$user", "My ""X"" y",a`: `My "X" y`,
		` "a,b" , c`:              "a,b",
		"":                        "",
		`"$user"`:                 "",
	} {
		if got := firstSchema(in); got != want {
			t.Errorf("firstSchema(%q) = %q, want %q", in, got, want)
		}
	}
}
