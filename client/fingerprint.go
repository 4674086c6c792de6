package client

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Fingerprint returns the SHA-256 of payload (32 bytes), for
// Job.Fingerprint and ClaimRequest.Fingerprint.
func Fingerprint(payload []byte) []byte {
	sum := sha256.Sum256(payload)
	return sum[:]
}

// FingerprintJSON returns the SHA-256 of the canonical JSON form of v, so
// that workers in different languages fingerprint the same payload alike.
// v is marshalled with encoding/json first (struct tags and MarshalJSON
// apply); pass a json.RawMessage to fingerprint JSON text.
//
// The canonical form is that of RFC 8785 (JSON Canonicalization Scheme), the
// text JavaScript's JSON.stringify writes for the parsed value once every
// object's keys are sorted:
//   - No whitespace between tokens.
//   - Object members sorted by key, keys compared as sequences of UTF-16 code
//     units (JavaScript's default sort; it differs from byte order only
//     between characters above U+FFFF and those in U+E000–U+FFFF). Of
//     duplicate keys the last wins, as in encoding/json and JSON.parse.
//   - Numbers read as IEEE 754 doubles and written as ECMAScript's
//     Number.prototype.toString writes them, which is also how encoding/json
//     writes a float64: the shortest digits that read back the same, no
//     trailing ".0", plain notation for magnitudes in [1e-6, 1e21) and
//     exponent notation outside ("1e+21", "1e-7"), and -0 as "0". Integers
//     beyond ±2^53 lose precision as they do in JavaScript, so send large ids
//     as strings. A number beyond the range of a double is an error.
//   - Strings in UTF-8 with only these escapes: \" and \\, \b \t \n \f \r,
//     and \u00xx (lowercase hex) for the other characters below U+0020.
//     Everything else, including < > & U+2028 and U+2029, is written as is.
//     Invalid UTF-8 becomes U+FFFD; a lone UTF-16 surrogate escape in the
//     input (\ud800) has no portable form and should not be used.
//   - true, false and null as such.
//
// client/testdata/fingerprint_vectors.json holds vectors (JSON text, its
// canonical form, its fingerprint in hex) for other implementations.
func FingerprintJSON(v any) ([]byte, error) {
	canon, err := canonicalJSON(v)
	if err != nil {
		return nil, err
	}
	return Fingerprint(canon), nil
}

func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("idem: fingerprint: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep number text, so that it is read as a double once
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("idem: fingerprint: %w", err)
	}
	var b bytes.Buffer
	if err := writeCanonical(&b, tree); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeCanonical(b *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case string:
		writeCanonicalString(b, v)
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil && math.IsInf(f, 0) {
			return fmt.Errorf("idem: fingerprint: the number %s is beyond the range of a double", v)
		}
		b.WriteString(formatNumber(f))
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		type member struct {
			key   string
			units []uint16
		}
		members := make([]member, 0, len(v))
		for k := range v {
			members = append(members, member{k, utf16.Encode([]rune(k))})
		}
		sort.Slice(members, func(i, j int) bool { return slices.Compare(members[i].units, members[j].units) < 0 })
		b.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonicalString(b, m.key)
			b.WriteByte(':')
			if err := writeCanonical(b, v[m.key]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("idem: fingerprint: unexpected %T from the JSON decoder", v)
	}
	return nil
}

// formatNumber writes f as ECMAScript's Number.prototype.toString does.
func formatNumber(f float64) string {
	if f == 0 {
		return "0" // also -0
	}
	if abs := math.Abs(f); abs >= 1e-6 && abs < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	// Go writes the exponent with at least two digits and ECMAScript with as
	// few as needed: 1e-07 becomes 1e-7, 1e+21 stays.
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mantissa, exp, _ := strings.Cut(s, "e")
	return mantissa + "e" + exp[:1] + strings.TrimLeft(exp[1:], "0")
}

func writeCanonicalString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
