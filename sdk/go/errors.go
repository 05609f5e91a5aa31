package ledgerflow

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The API's error codes (the "code" of an error answer; docs/reference.md, "Error codes").
const (
	CodeInvalidArgument       = "INVALID_ARGUMENT"        // 400: fix the fields named in Errors
	CodeUnauthenticated       = "UNAUTHENTICATED"         // 401: the token is missing, unknown or revoked
	CodePermissionDenied      = "PERMISSION_DENIED"       // 403: the credential lacks a scope (the message names it)
	CodeNotFound              = "NOT_FOUND"               // 404: nothing with that id in the namespace (or queue scope)
	CodeMethodNotAllowed      = "METHOD_NOT_ALLOWED"      // 405
	CodeStateConflict         = "STATE_CONFLICT"          // 409: stale revision or epoch, existing name, finished workflow
	CodeIdempotencyConflict   = "IDEMPOTENCY_CONFLICT"    // 409: the key was used for another request (or is still running)
	CodeWorkflowInstanceLimit = "WORKFLOW_INSTANCE_LIMIT" // 409: the namespace's unfinished workflows are at the limit
	CodeWorkflowSignalLimit   = "WORKFLOW_SIGNAL_LIMIT"   // 409: the workflow takes no more signals
	CodeBodyTooLarge          = "BODY_TOO_LARGE"          // 413: the body is over 512 KiB
	CodeUnsupportedMediaType  = "UNSUPPORTED_MEDIA_TYPE"  // 415
	CodeQueueFull             = "QUEUE_FULL"              // 429: a task queue's pending limit (not retried by the SDK)
	CodeApplicationFull       = "APPLICATION_FULL"        // 429: the namespace's work limit (not retried by the SDK)
	CodeRateLimited           = "RATE_LIMITED"            // 429: the credential's rate or long-poll limit (retried)
	CodeUnavailable           = "UNAVAILABLE"             // 503: the outcome may be unknown (retried with the same key)
	CodeInternal              = "INTERNAL"                // 500: a bug; report the request id
)

// FieldError is one entry of an error answer's "errors": a field (e.g. "input.amount", "cursor")
// and what is wrong with it.
type FieldError struct {
	Field   string `json:"field"`   // the field's path in the request, e.g. "input.amount" or "cursor"
	Message string `json:"message"` // what is wrong with it
}

// Error is an error answer of the API (application/problem+json). Use errors.As to get it from any
// error the SDK returns:
//
//	var apiErr *ledgerflow.Error
//	if errors.As(err, &apiErr) && apiErr.Code == ledgerflow.CodeStateConflict { ... }
type Error struct {
	Status     int           // the HTTP status
	Code       string        // the API's stable code (the Code* constants); INTERNAL when the body had none
	Message    string        // one line saying what is wrong
	RequestID  string        // the request id the server logged the request under ("" when absent)
	Errors     []FieldError  // the fields at fault (400 INVALID_ARGUMENT), in the server's order
	RetryAfter time.Duration // the answer's Retry-After header (0 when absent)
	Method     string        // the request's method
	Path       string        // the request's path (without the query)
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s: %s", e.Status, e.Code, e.Message)
	for _, f := range e.Errors {
		fmt.Fprintf(&b, "; %s: %s", f.Field, f.Message)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request %s)", e.RequestID)
	}
	return b.String()
}

// FieldMessage is the message of the field error for field, or "" when the answer named no such field.
func (e *Error) FieldMessage(field string) string {
	for _, f := range e.Errors {
		if f.Field == field {
			return f.Message
		}
	}
	return ""
}

// IsCode reports whether err is (or wraps) an *Error with that code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// UnknownOutcomeError: a mutation may or may not have taken effect. An attempt was answered 503
// UNAVAILABLE, or its connection failed after the request was sent, and the retries ran out (or the
// context ended). Resend the same command with IdempotencyKey: if the first one was applied the
// server answers its stored first answer (for a start: the first snapshot, deduplicated), otherwise it
// applies it now. Err is the last failure (an *Error 503 or a network error); Unwrap returns it.
type UnknownOutcomeError struct {
	Method         string // the request's method
	Path           string // the request's path
	IdempotencyKey string // the key every attempt of the call carried
	Attempts       int    // how many times the request was sent
	Err            error  // the last failure: an *Error 503, a network error or the context's error
}

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("%s %s: the outcome is unknown after %d attempts (Idempotency-Key %s; resend the same request with that key): %v",
		e.Method, e.Path, e.Attempts, e.IdempotencyKey, e.Err)
}

func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// UnreachableError: no answer from the server at URL after the retries, and no request reached it
// (for a mutation: nothing happened). For a GET, any network failure after the retries.
type UnreachableError struct {
	URL string // the base URL (LEDGERFLOW_URL)
	Err error  // the last network error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the Ledgerflow server at %s (%v); is it running? The SDK reads the address from LEDGERFLOW_URL (default %s)",
		e.URL, e.Err, DefaultURL)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ConfigError: a setting the client needs is missing or invalid (LEDGERFLOW_URL, LEDGERFLOW_TOKEN).
type ConfigError struct{ Message string }

func (e *ConfigError) Error() string { return e.Message }

// transient reports whether an answer clears by itself and is retried: 503, and a 429 RATE_LIMITED
// (the request did nothing). A quota's 429 (QUEUE_FULL, APPLICATION_FULL) is not.
func transient(e *Error) bool {
	return e.Status == 503 || (e.Status == 429 && e.Code == CodeRateLimited)
}
