package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemTypePrefix starts the type URI of every problem the middleware
// answers; the rest is the problem's slug, a heading of docs/http-api.md.
const ProblemTypePrefix = "https://github.com/idemhq/idem/blob/main/docs/http-api.md#"

// problem is one kind of RFC 9457 problem the middleware answers.
type problem struct {
	slug   string
	status int
	title  string
}

// The problems, as clients/scenarios/http.json lists them for every
// language.
var (
	problemKeyMissing         = problem{"key-missing", http.StatusBadRequest, "Idempotency-Key is missing"}
	problemKeyMalformed       = problem{"key-malformed", http.StatusBadRequest, "Idempotency-Key is malformed"}
	problemCallerUnidentified = problem{"caller-unidentified", http.StatusUnauthorized, "The caller is not identified"}
	problemRequestTooLarge    = problem{"request-too-large", http.StatusRequestEntityTooLarge, "The request body is too large to fingerprint"}
	problemKeyInFlight        = problem{"key-in-flight", http.StatusConflict, "A request with this Idempotency-Key is being processed"}
	problemKeyUnresolved      = problem{"key-unresolved", http.StatusConflict, "The request with this Idempotency-Key awaits an operator's resolution"}
	problemKeyReused          = problem{"key-reused", http.StatusUnprocessableEntity, "Idempotency-Key was used for another request"}
	problemRequestFailed      = problem{"request-failed", http.StatusInternalServerError, "The request with this Idempotency-Key failed for good"}
	problemRecordUnreadable   = problem{"record-unreadable", http.StatusInternalServerError, "The stored response cannot be read"}
	problemIdemUnavailable    = problem{"idem-unavailable", http.StatusServiceUnavailable, "Idempotency keys cannot be checked now"}
)

// problems lists them all, for the test that holds them to the file.
var problems = []problem{
	problemKeyMissing, problemKeyMalformed, problemCallerUnidentified, problemRequestTooLarge,
	problemKeyInFlight, problemKeyUnresolved, problemKeyReused, problemRequestFailed,
	problemRecordUnreadable, problemIdemUnavailable,
}

// retryAfterSeconds is the Retry-After of a key in flight and of idem
// unavailable: the holder of a key usually finishes within a request's
// time, and its lease bounds how long it can hold it.
const retryAfterSeconds = 1

// write answers the problem with detail, as application/problem+json.
func (p problem) write(w http.ResponseWriter, detail string) {
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{ProblemTypePrefix + p.slug, p.title, p.status, detail})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if p == problemKeyInFlight || p == problemIdemUnavailable {
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	}
	w.WriteHeader(p.status)
	_, _ = w.Write(body)
}
