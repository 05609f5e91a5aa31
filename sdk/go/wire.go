package ledgerflow

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
)

// RawJSON is a JSON value exactly as the API sent it (inputs, outputs, payloads, errors): numbers keep
// every digit (they never pass through float64). A nil RawJSON means the answer left the field out;
// an explicit JSON null is the four bytes "null" (IsNull). A succeeded workflow's output may be an
// explicit null, which is not the same as a workflow that has no output yet.
type RawJSON []byte

// IsAbsent reports whether the answer left the field out.
func (r RawJSON) IsAbsent() bool { return r == nil }

// IsNull reports whether the field is present and an explicit JSON null.
func (r RawJSON) IsNull() bool { return r != nil && string(bytes.TrimSpace(r)) == "null" }

// Decode decodes the value into v; numbers decode into json.Number where v holds interface{} values,
// so that large integers stay exact. Decoding an absent value is an error.
func (r RawJSON) Decode(v any) error {
	if r == nil {
		return errors.New("ledgerflow: the JSON value is absent")
	}
	dec := json.NewDecoder(bytes.NewReader(r))
	dec.UseNumber()
	return dec.Decode(v)
}

// MarshalJSON sends the value as it is (an absent value as null).
func (r RawJSON) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	return r, nil
}

// UnmarshalJSON keeps a copy of the bytes, an explicit null included.
func (r *RawJSON) UnmarshalJSON(b []byte) error {
	*r = append(RawJSON{}, b...)
	return nil
}

func (r RawJSON) String() string {
	if r == nil {
		return "<absent>"
	}
	return string(r)
}

// NewIdempotencyKey makes a new Idempotency-Key: 32 random lowercase hex digits (as the Python SDK).
// Keep it with the command when you need to resend the command after an unknown outcome.
func NewIdempotencyKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("ledgerflow: no randomness for an Idempotency-Key: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// seg is one URL path segment, percent-encoded: an id or key holding "/", "?", "#" or being "." or
// ".." can never address another resource.
func seg(s string) string {
	if s == "." || s == ".." || s == "" {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// marshal encodes a request body without HTML escaping (the bytes the caller's strings hold).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// envelope is every successful answer: {"request_id": ..., "data": ...}.
type envelope[T any] struct {
	RequestID string `json:"request_id"`
	Data      T      `json:"data"`
}

// Page is one page of a list: its items, newest first, and the cursor of the next page ("" on the
// last page). A cursor works only for the list (and filters) that produced it.
type Page[T any] struct {
	Items      []T    `json:"items"`                 // newest first
	NextCursor string `json:"next_cursor,omitempty"` // "" on the last page
}

// PageRequest is a list's page: Limit 1–100 (0: the server's default, 20) and the Cursor of the page
// before ("" for the first page). The seed calls it HistoryPageRequest for the operation audit.
type PageRequest struct {
	Limit  int    // 1–100; 0: the server's default (20)
	Cursor string // the NextCursor of the page before; "" for the first page
}

// HistoryPageRequest is the seed's name for the page of ListWorkflowOperations.
type HistoryPageRequest = PageRequest

func (p PageRequest) query(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	return q
}
