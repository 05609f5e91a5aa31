package ledgerflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultURL is the server address when LEDGERFLOW_URL is not set (as the Python SDK).
const DefaultURL = "http://127.0.0.1:5000"

// maxAnswerBytes bounds what the client reads of one answer (the API's largest answers are pages of
// up to 100 workflows, each with an input of at most 256 KiB).
const maxAnswerBytes = 64 << 20

// Options configure a Client. The zero value of each field is its default.
type Options struct {
	// Retries after the first attempt for network errors, 503 and 429 RATE_LIMITED (default 4;
	// a negative value: no retries).
	Retries int
	// Backoff is the first wait between attempts when the answer gives no Retry-After; it doubles
	// per attempt (default 200 ms).
	Backoff time.Duration
	// Timeout of one attempt, the answer included (default 40 s; a claim long-polls up to 30 s).
	Timeout time.Duration
	// HTTPClient sends the requests (default: a client of its own over a clone of
	// http.DefaultTransport, which honours HTTP_PROXY / HTTPS_PROXY / NO_PROXY, keeping up to 16
	// idle connections). Its own Timeout, if any, bounds every attempt too.
	HTTPClient *http.Client
	// UserAgent is sent with every request (default "ledgerflow-go").
	UserAgent string
}

// Client calls the Ledgerflow API. It is safe for concurrent use by many goroutines.
type Client struct {
	baseURL string
	token   string
	http    *http.Client
	retries int
	backoff time.Duration
	timeout time.Duration
	agent   string
	problem string // a configuration problem the first call returns as a *ConfigError
	sleep   func(ctx context.Context, d time.Duration) error
}

// NewClientFromEnv makes a client of LEDGERFLOW_URL (default http://127.0.0.1:5000) and
// LEDGERFLOW_TOKEN, as the Python SDK reads them.
func NewClientFromEnv(opts ...Options) *Client {
	return NewClient("", "", opts...)
}

// NewClient makes a client of baseURL and token; an empty baseURL or token is read from
// LEDGERFLOW_URL / LEDGERFLOW_TOKEN. A missing token or a URL that is not http(s) is reported by
// the first call as a *ConfigError (so that it surfaces inside the caller's error handling).
func NewClient(baseURL, token string, opts ...Options) *Client {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if baseURL == "" {
		baseURL = os.Getenv("LEDGERFLOW_URL")
	}
	if baseURL == "" {
		baseURL = DefaultURL
	}
	baseURL = strings.TrimRight(baseURL, "/")
	if token == "" {
		token = strings.TrimSpace(os.Getenv("LEDGERFLOW_TOKEN"))
	}
	c := &Client{baseURL: baseURL, token: token, retries: 4, backoff: 200 * time.Millisecond,
		timeout: 40 * time.Second, agent: "ledgerflow-go", sleep: sleepCtx}
	if o.Retries > 0 {
		c.retries = o.Retries
	} else if o.Retries < 0 {
		c.retries = 0
	}
	if o.Backoff > 0 {
		c.backoff = o.Backoff
	}
	if o.Timeout > 0 {
		c.timeout = o.Timeout
	}
	if o.UserAgent != "" {
		c.agent = o.UserAgent
	}
	c.http = o.HTTPClient
	if c.http == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		// kept-alive connections for a worker's concurrent heartbeats, claims and results (as the
		// Python SDK keeps 16 idle; Go's default keeps 2 per host)
		transport.MaxIdleConnsPerHost = 16
		// a redirect is answered as it is (as httpx does): following one would turn a POST into a GET
		c.http = &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	switch {
	case !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://"):
		c.problem = fmt.Sprintf("LEDGERFLOW_URL must be an http:// or https:// address like %s, not %q", DefaultURL, baseURL)
	case token == "":
		c.problem = "LEDGERFLOW_TOKEN is not set: issue a credential with `ledgerflow credentials create " +
			"--namespace NS --name NAME <switches> --token-only` and export LEDGERFLOW_TOKEN=<token>"
	}
	return c
}

// BaseURL is the server address the client talks to.
func (c *Client) BaseURL() string { return c.baseURL }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call is one API call: method, path, query, a body (nil: none) and, for a mutation, its key.
type call struct {
	method string
	path   string
	query  url.Values
	body   any
	key    string
	// timeout of one attempt when longer than the client's (a claim's long poll)
	timeout time.Duration
}

// do sends a call with the retry policy (see the package documentation) and decodes the answer's
// data into out (nil: ignore it). It returns the HTTP status of the answer.
func (c *Client) do(ctx context.Context, cl call, out any) (int, error) {
	if c.problem != "" {
		return 0, &ConfigError{Message: c.problem}
	}
	var payload []byte
	if cl.body != nil {
		var err error
		if payload, err = marshal(cl.body); err != nil {
			return 0, fmt.Errorf("ledgerflow: %s %s: the request body is not JSON: %w", cl.method, cl.path, err)
		}
	}
	mutation := cl.method != http.MethodGet
	if mutation && cl.key == "" {
		cl.key = NewIdempotencyKey() // one per logical call; every retry below resends it
	}
	target := c.baseURL + cl.path
	if len(cl.query) > 0 {
		target += "?" + cl.query.Encode()
	}
	var (
		last       error
		maybeTaken bool // an attempt may have reached the server without a definite answer
		sent       int
	)
	for attempt := 0; ; attempt++ {
		status, wrote, apiErr, err := c.attempt(ctx, cl, target, payload, out)
		if wrote {
			sent++
		}
		if err == nil && apiErr == nil {
			return status, nil
		}
		var wait time.Duration
		switch {
		case apiErr != nil && !transient(apiErr):
			return status, apiErr
		case apiErr != nil: // 503 or 429 RATE_LIMITED
			last = apiErr
			if apiErr.Status == 503 {
				maybeTaken = true
			}
			wait = apiErr.RetryAfter
			if wait > 5*time.Second {
				wait = 5 * time.Second
			}
		default: // no answer
			last = err
			if wrote {
				maybeTaken = true
			}
		}
		if ctx.Err() != nil || attempt >= c.retries {
			break
		}
		if wait == 0 {
			wait = c.backoff * time.Duration(math.Pow(2, float64(attempt)))
		}
		if err := c.sleep(ctx, wait); err != nil {
			last = err
			break
		}
	}
	if mutation && maybeTaken {
		return 0, &UnknownOutcomeError{Method: cl.method, Path: cl.path, IdempotencyKey: cl.key, Attempts: sent, Err: last}
	}
	var apiErr *Error
	if errors.As(last, &apiErr) {
		return apiErr.Status, apiErr
	}
	if ctx.Err() != nil {
		return 0, fmt.Errorf("ledgerflow: %s %s: %w", cl.method, cl.path, ctx.Err())
	}
	return 0, &UnreachableError{URL: c.baseURL, Err: last}
}

// attempt sends the request once. wrote: the request was written to a connection (it may have
// reached the server). apiErr: the server answered an error; err: no (usable) answer.
func (c *Client) attempt(ctx context.Context, cl call, target string, payload []byte, out any) (status int, wrote bool, apiErr *Error, err error) {
	timeout := c.timeout
	if cl.timeout > timeout {
		timeout = cl.timeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wroteFlag atomic.Bool
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		WroteHeaders: func() { wroteFlag.Store(true) },
	})
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(actx, cl.method, target, body)
	if err != nil {
		return 0, false, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.agent)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.key != "" {
		req.Header.Set("Idempotency-Key", cl.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, wroteFlag.Load(), nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return 0, true, nil, fmt.Errorf("reading the answer: %w", err)
	}
	if len(raw) > maxAnswerBytes {
		return resp.StatusCode, true, &Error{Status: resp.StatusCode, Code: CodeInternal, Method: cl.method, Path: cl.path,
			Message: fmt.Sprintf("the answer is larger than %d bytes", maxAnswerBytes)}, nil
	}
	if resp.StatusCode >= 400 {
		return resp.StatusCode, true, c.problemOf(resp, raw, cl), nil
	}
	if out == nil {
		return resp.StatusCode, true, nil, nil
	}
	env := envelope[any]{Data: out}
	if err := json.Unmarshal(raw, &env); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return resp.StatusCode, true, &Error{Status: resp.StatusCode, Code: CodeInternal, Method: cl.method, Path: cl.path,
				Message: fmt.Sprintf("the server at %s (LEDGERFLOW_URL) answered with something that is not JSON: is that address a Ledgerflow server?", c.baseURL)}, nil
		}
		return resp.StatusCode, true, &Error{Status: resp.StatusCode, Code: CodeInternal, Method: cl.method, Path: cl.path,
			RequestID: env.RequestID, Message: "the answer does not have the documented shape: " + err.Error()}, nil
	}
	return resp.StatusCode, true, nil, nil
}

// problemOf reads an error answer (application/problem+json) into an *Error.
func (c *Client) problemOf(resp *http.Response, raw []byte, cl call) *Error {
	var p struct {
		Code      string       `json:"code"`
		Message   string       `json:"message"`
		RequestID string       `json:"request_id"`
		Errors    []FieldError `json:"errors"`
	}
	parsed := json.Unmarshal(raw, &p) == nil && p.Code != ""
	e := &Error{Status: resp.StatusCode, Code: p.Code, Message: p.Message, RequestID: p.RequestID, Errors: p.Errors,
		Method: cl.method, Path: cl.path}
	if !parsed {
		e.Code = CodeInternal
		if resp.StatusCode == 503 {
			e.Code = CodeUnavailable
		}
		e.Message = http.StatusText(resp.StatusCode)
		if resp.StatusCode == 404 {
			e.Message = fmt.Sprintf("%s is not a Ledgerflow API at %s (LEDGERFLOW_URL)", cl.path, c.baseURL)
		}
	}
	if e.Code == CodeUnauthenticated {
		e.Message += " (check LEDGERFLOW_TOKEN or the token given to NewClient)"
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if secs, err := strconv.ParseFloat(ra, 64); err == nil && secs > 0 {
			e.RetryAfter = time.Duration(secs * float64(time.Second))
		}
	}
	return e
}
