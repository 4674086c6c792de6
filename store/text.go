package store

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// TextProblem is what is wrong with a text field.
type TextProblem string

// The problems CheckText finds. The server sends them in the ErrorInfo
// metadata "problem".
const (
	// TextInvalidUTF8: the text has a byte sequence that is not UTF-8.
	TextInvalidUTF8 TextProblem = "INVALID_UTF8"
	// TextNUL: the text has the character U+0000.
	TextNUL TextProblem = "NUL_CHARACTER"
)

// TextError is ErrInvalidText for one field.
type TextError struct {
	// Field is the field's name as the API spells it: tenant, namespace,
	// key, claimant or error.
	Field string
	// Problem is what is wrong.
	Problem TextProblem
	// Offset is the byte offset of the first offending byte.
	Offset int
}

func (e *TextError) Error() string {
	if e.Problem == TextNUL {
		return fmt.Sprintf("%s has a NUL character (U+0000) at byte %d; text fields are UTF-8 without NUL", e.Field, e.Offset)
	}
	return fmt.Sprintf("%s is not valid UTF-8 (byte %d); text fields are UTF-8 without NUL", e.Field, e.Offset)
}

// Is makes errors.Is(err, ErrInvalidText) true for every *TextError.
func (e *TextError) Is(target error) bool { return target == ErrInvalidText }

// CheckText returns a *TextError when value, the text of field, is not valid
// UTF-8 or contains U+0000, and nil when a store can keep it. It is the one
// definition of storable text: the stores and the server's validation use
// it alike.
func CheckText(field, value string) error {
	nul := strings.IndexByte(value, 0)
	if utf8.ValidString(value) {
		if nul < 0 {
			return nil
		}
		return &TextError{Field: field, Problem: TextNUL, Offset: nul}
	}
	for i := 0; i < len(value); {
		if value[i] == 0 {
			return &TextError{Field: field, Problem: TextNUL, Offset: i}
		}
		r, size := utf8.DecodeRuneInString(value[i:])
		if r == utf8.RuneError && size == 1 {
			return &TextError{Field: field, Problem: TextInvalidUTF8, Offset: i}
		}
		i += size
	}
	return nil // not reached: value is not valid UTF-8
}

// CheckText checks the text of id: its tenant, namespace and key.
func (id RecordID) CheckText() error {
	return checkTexts("tenant", id.Tenant, "namespace", id.Namespace, "key", id.Key)
}

// CheckText checks the text of p: its RecordID and its claimant.
func (p *ClaimParams) CheckText() error {
	return checkTexts("tenant", p.Tenant, "namespace", p.Namespace, "key", p.Key, "claimant", p.Claimant)
}

// CheckText checks the text of p: its RecordID and its error.
func (p *FailParams) CheckText() error {
	return checkTexts("tenant", p.Tenant, "namespace", p.Namespace, "key", p.Key, "error", p.Error)
}

// CheckText checks the text of p: its tenant, the namespace and key prefix it
// filters on and the namespace and key it starts after.
func (p *ListParams) CheckText() error {
	return checkTexts("tenant", p.Tenant, "namespace", p.Namespace, "key_prefix", p.KeyPrefix,
		"namespace", p.After.Namespace, "key", p.After.Key)
}

// CheckText checks the text of p: its tenant and the namespace it counts.
func (p *StatsParams) CheckText() error {
	return checkTexts("tenant", p.Tenant, "namespace", p.Namespace)
}

// checkTexts runs CheckText on pairs of field name and value, in order.
func checkTexts(fieldsAndValues ...string) error {
	for i := 0; i+1 < len(fieldsAndValues); i += 2 {
		if err := CheckText(fieldsAndValues[i], fieldsAndValues[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// CheckText checks the text of p: its RecordID, its error, its actor and
// its reason.
func (p *ResolveParams) CheckText() error {
	return checkTexts("tenant", p.Tenant, "namespace", p.Namespace, "key", p.Key, "error", p.Error,
		"actor.tenant", p.Actor.Tenant, "actor.operator", p.Actor.Operator, "resolver", p.Actor.Resolver, "reason", p.Reason)
}

// CheckText checks the text of p: its RecordID, its actor and its reason.
func (p *DeleteParams) CheckText() error {
	return checkTexts("tenant", p.Tenant, "namespace", p.Namespace, "key", p.Key,
		"actor.tenant", p.Actor.Tenant, "actor.operator", p.Actor.Operator, "resolver", p.Actor.Resolver, "reason", p.Reason)
}

// CheckText checks the text of p: its tenant and the namespace and key it
// starts after.
func (p *ListHeldParams) CheckText() error {
	return checkTexts("tenant", p.Tenant, "namespace", p.After.Namespace, "key", p.After.Key)
}
