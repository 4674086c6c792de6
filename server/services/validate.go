package services

import (
	"errors"
	"fmt"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/store"
)

// invalid is a request field that failed validation. Its message names the
// field and the bound; its reason goes into the ErrorInfo.
func invalid(field string, reason idemv1.ErrorReason, format string, args ...any) error {
	return NewError(codes.InvalidArgument, reason, fmt.Sprintf(format, args...), map[string]string{"field": field})
}

// textReasons are the ErrorInfo reasons of the request's text fields.
var textReasons = map[string]idemv1.ErrorReason{
	"namespace":  idemv1.ErrorReason_ERROR_REASON_INVALID_NAMESPACE,
	"key":        idemv1.ErrorReason_ERROR_REASON_INVALID_KEY,
	"key_prefix": idemv1.ErrorReason_ERROR_REASON_INVALID_KEY,
	"claimant":   idemv1.ErrorReason_ERROR_REASON_INVALID_CLAIMANT,
	"error":      idemv1.ErrorReason_ERROR_REASON_INVALID_ERROR,
	"tenant":     idemv1.ErrorReason_ERROR_REASON_INVALID_TENANT,
	"step":       idemv1.ErrorReason_ERROR_REASON_INVALID_STEP_NAME,
	"reason":     idemv1.ErrorReason_ERROR_REASON_INVALID_REASON,
	"resolver":   idemv1.ErrorReason_ERROR_REASON_INVALID_RESOLVER,
}

// validateText applies the rule every text field of a request meets before
// the rules of its own: UTF-8 without U+0000. store.CheckText defines it, and
// the stores apply it too, so the server refuses exactly what no store keeps.
func validateText(field, value string) error {
	if err := store.CheckText(field, value); err != nil {
		var textErr *store.TextError
		if errors.As(err, &textErr) {
			return InvalidText(textReasons[field], textErr)
		}
		return err
	}
	return nil
}

// InvalidText is the INVALID_ARGUMENT status of a text field that breaks the
// text rule: the field's reason, and the field and the problem in the
// ErrorInfo's metadata.
func InvalidText(reason idemv1.ErrorReason, e *store.TextError) error {
	return NewError(codes.InvalidArgument, reason, e.Error(), map[string]string{"field": e.Field, "problem": string(e.Problem)})
}

func validateNamespace(ns string) error {
	if err := validateText("namespace", ns); err != nil {
		return err
	}
	if !limits.ValidNamespace(ns) {
		if ns == "" {
			return invalid("namespace", idemv1.ErrorReason_ERROR_REASON_INVALID_NAMESPACE, "namespace is empty; it must match %s", limits.NamespacePattern)
		}
		return invalid("namespace", idemv1.ErrorReason_ERROR_REASON_INVALID_NAMESPACE,
			"namespace %q must match %s: %s",
			limits.Ellipsis(ns, 80), limits.NamespacePattern, limits.NamespaceRule)
	}
	return nil
}

func validateKey(key string) error {
	switch {
	case key == "":
		return invalid("key", idemv1.ErrorReason_ERROR_REASON_INVALID_KEY, "key is empty; it must be 1 to %d bytes", limits.MaxKeyBytes)
	case len(key) > limits.MaxKeyBytes:
		return invalid("key", idemv1.ErrorReason_ERROR_REASON_INVALID_KEY, "key is %d bytes; the limit is %d", len(key), limits.MaxKeyBytes)
	}
	if err := validateText("key", key); err != nil {
		return err
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return invalid("key", idemv1.ErrorReason_ERROR_REASON_INVALID_KEY, "key has a control character (%U) at byte %d; keys are printable UTF-8", r, i)
		}
	}
	return nil
}

// validateKeyPrefix applies the key's rules to a listing's key_prefix, which
// may be empty (no filter).
func validateKeyPrefix(prefix string) error {
	if len(prefix) > limits.MaxKeyBytes {
		return invalid("key_prefix", idemv1.ErrorReason_ERROR_REASON_INVALID_KEY, "key_prefix is %d bytes; the limit is %d, as for a key", len(prefix), limits.MaxKeyBytes)
	}
	if err := validateText("key_prefix", prefix); err != nil {
		return err
	}
	for i, r := range prefix {
		if unicode.IsControl(r) {
			return invalid("key_prefix", idemv1.ErrorReason_ERROR_REASON_INVALID_KEY, "key_prefix has a control character (%U) at byte %d; keys are printable UTF-8", r, i)
		}
	}
	return nil
}

func validateID(namespace, key string) error {
	if err := validateNamespace(namespace); err != nil {
		return err
	}
	return validateKey(key)
}

func validateToken(token int64) error {
	if token <= 0 {
		return invalid("token", idemv1.ErrorReason_ERROR_REASON_INVALID_TOKEN, "token is %d; pass the token of the ACQUIRED Claim (always > 0)", token)
	}
	return nil
}

func validateMaxBytes(field string, reason idemv1.ErrorReason, n, limit int) error {
	if n > limit {
		return invalid(field, reason, "%s is %d bytes; the limit is %d", field, n, limit)
	}
	return nil
}

func validateClaimant(claimant string) error {
	if err := validateMaxBytes("claimant", idemv1.ErrorReason_ERROR_REASON_INVALID_CLAIMANT, len(claimant), limits.MaxClaimantBytes); err != nil {
		return err
	}
	return validateText("claimant", claimant)
}

// validateErrorText checks Fail's error.
func validateErrorText(text string) error {
	if err := validateMaxBytes("error", idemv1.ErrorReason_ERROR_REASON_INVALID_ERROR, len(text), limits.MaxErrorBytes); err != nil {
		return err
	}
	return validateText("error", text)
}

// duration returns d, or def when d is unset, checked against [min, max].
func duration(field string, reason idemv1.ErrorReason, d *durationpb.Duration, def, min, max time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid(field, reason, "%s is not a valid duration: %v", field, err)
	}
	v := d.AsDuration()
	if v < min || v > max {
		return 0, invalid(field, reason, "%s is %s; it must be between %s and %s", field, v, min, max)
	}
	return v, nil
}

// validateClaim checks every field of a Claim and returns its lease and
// retention, cfg's defaults filled in; the wait (0 when unset) is the
// request's own. Every error is INVALID_ARGUMENT naming
// the field.
func validateClaim(req *idemv1.ClaimRequest, cfg Config) (leaseTTL, retention time.Duration, err error) {
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return 0, 0, err
	}
	if err := validateMaxBytes("fingerprint", idemv1.ErrorReason_ERROR_REASON_INVALID_FINGERPRINT, len(req.GetFingerprint()), limits.MaxFingerprintBytes); err != nil {
		return 0, 0, err
	}
	if err := validateClaimant(req.GetClaimant()); err != nil {
		return 0, 0, err
	}
	leaseTTL, err = duration("lease_ttl", idemv1.ErrorReason_ERROR_REASON_INVALID_LEASE_TTL, req.GetLeaseTtl(), cfg.DefaultLeaseTTL, limits.MinLeaseTTL, limits.MaxLeaseTTL)
	if err != nil {
		return 0, 0, err
	}
	retention, err = duration("retention", idemv1.ErrorReason_ERROR_REASON_INVALID_RETENTION, req.GetRetention(), cfg.DefaultRetention, limits.MinRetention, limits.MaxRetention)
	if err != nil {
		return 0, 0, err
	}
	if _, err := duration("wait", idemv1.ErrorReason_ERROR_REASON_INVALID_WAIT, req.GetWait(), 0, 0, limits.MaxWait); err != nil {
		return 0, 0, err
	}
	return leaseTTL, retention, nil
}
