package ledgerflow

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorded serves the answers in order (the last one again once they run out) and records each
// request: its Idempotency-Key, body and path.
type recorded struct {
	mu       sync.Mutex
	answers  []answer
	keys     []string
	bodies   []string
	paths    []string
	queries  []string
	requests int
}

type answer struct {
	status int
	file   string // a testdata file, or
	body   string
	header map[string]string
}

func (r *recorded) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	i := r.requests
	if i >= len(r.answers) {
		i = len(r.answers) - 1
	}
	a := r.answers[i]
	r.requests++
	r.keys = append(r.keys, req.Header.Get("Idempotency-Key"))
	r.bodies = append(r.bodies, string(body))
	r.paths = append(r.paths, req.URL.EscapedPath())
	r.queries = append(r.queries, req.URL.RawQuery)
	r.mu.Unlock()
	if req.Header.Get("Authorization") != "Bearer tok" {
		w.WriteHeader(599)
		return
	}
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	payload := []byte(a.body)
	if a.file != "" {
		var err error
		if payload, err = os.ReadFile("testdata/" + a.file); err != nil {
			panic(err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = w.Write(payload)
}

// serve starts a server of the answers and a client of it that records its waits instead of waiting.
func serve(t *testing.T, answers ...answer) (*Client, *recorded, *[]time.Duration) {
	t.Helper()
	rec := &recorded{answers: answers}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	c := NewClient(srv.URL, "tok")
	waits := &[]time.Duration{}
	c.sleep = func(ctx context.Context, d time.Duration) error { *waits = append(*waits, d); return nil }
	return c, rec, waits
}

func TestRevisionsAbove2To53AreExactUint64(t *testing.T) {
	c, rec, _ := serve(t, answer{status: 201, file: "start_201.json"})
	got, err := c.StartWorkflow(context.Background(), "k-1", StartWorkflowRequest{
		DefinitionID: "11111111111111111111111111111111", Version: "v1",
		Input: json.RawMessage(`{"n": 9007199254740993}`), BusinessKey: "operation-001 ",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Instance.Revision != 18446744073709551615 || got.Instance.ControlRevision != 9007199254740993 {
		t.Fatalf("revisions %d %d", got.Instance.Revision, got.Instance.ControlRevision)
	}
	// the input keeps every digit both ways
	if want := `{"definition_id":"11111111111111111111111111111111","version":"v1","input":{"n":9007199254740993},"business_key":"operation-001 "}`; rec.bodies[0] != want {
		t.Fatalf("body %s", rec.bodies[0])
	}
	var in map[string]any
	if err := got.Instance.Input.Decode(&in); err != nil {
		t.Fatal(err)
	}
	if in["n"].(json.Number).String() != "9007199254740993" || in["price"].(json.Number).String() != "0.1000000000000000055511151231257827" {
		t.Fatalf("input %v", in)
	}
	if got.Deduplicated || got.Instance.BusinessKey != "operation-001 " {
		t.Fatalf("%+v", got)
	}
}

func TestControlRevisionGoesOutAsADecimalString(t *testing.T) {
	b, err := marshal(WorkflowControlRequest{Operation: ControlPause, ExpectedControlRevision: 18446744073709551615, Reason: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"operation":"PAUSE","expected_control_revision":"18446744073709551615","reason":"r"}` {
		t.Fatal(string(b))
	}
}

func TestARevisionThatIsNotADecimalStringIsRefused(t *testing.T) {
	var w WorkflowInstance
	if err := json.Unmarshal([]byte(`{"revision": 9007199254740993}`), &w); err == nil {
		t.Fatal("an unquoted revision was accepted")
	}
	if err := json.Unmarshal([]byte(`{"revision": "18446744073709551616"}`), &w); err == nil {
		t.Fatal("a revision beyond uint64 was accepted")
	}
}

func TestExplicitNullIsNotAbsent(t *testing.T) {
	c, _, _ := serve(t, answer{status: 200, file: "workflow_null_output.json"}, answer{status: 201, file: "start_201.json"})
	done, err := c.GetWorkflow(context.Background(), "22222222222222222222222222222222")
	if err != nil {
		t.Fatal(err)
	}
	if !done.Output.IsNull() || done.Output.IsAbsent() || !done.Input.IsNull() || !done.Finished() {
		t.Fatalf("output %v input %v", done.Output, done.Input)
	}
	if done.Revision != 9007199254740993 {
		t.Fatal(done.Revision)
	}
	running, err := c.StartWorkflow(context.Background(), "", StartWorkflowRequest{Input: nil})
	if err != nil {
		t.Fatal(err)
	}
	if !running.Instance.Output.IsAbsent() || running.Instance.Output.IsNull() || running.Instance.CompletedAt != nil {
		t.Fatalf("output %v", running.Instance.Output)
	}
	// a nil input is sent as an explicit null, never left out
	b, _ := marshal(StartWorkflowRequest{DefinitionID: "d", Version: "v1"})
	if string(b) != `{"definition_id":"d","version":"v1","input":null}` {
		t.Fatal(string(b))
	}
	// RawJSON round trip keeps null and absent apart
	var out struct {
		A RawJSON `json:"a,omitempty"`
		B RawJSON `json:"b,omitempty"`
	}
	if err := json.Unmarshal([]byte(`{"a": null}`), &out); err != nil || !out.A.IsNull() || !out.B.IsAbsent() {
		t.Fatalf("%v %v %v", err, out.A, out.B)
	}
	again, _ := json.Marshal(out)
	if string(again) != `{"a":null}` {
		t.Fatal(string(again))
	}
}

func TestRFC3339TimesWithFractions(t *testing.T) {
	c, _, _ := serve(t, answer{status: 201, file: "start_201.json"}, answer{status: 200, file: "step_detail.json"})
	got, err := c.StartWorkflow(context.Background(), "", StartWorkflowRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 9, 18, 8, 0, 0, 123456000, time.UTC); !got.Instance.CreatedAt.Equal(want) {
		t.Fatal(got.Instance.CreatedAt)
	}
	if got.Instance.UpdatedAt.Nanosecond() != 999999000 {
		t.Fatal(got.Instance.UpdatedAt)
	}
	step, err := c.GetWorkflowStep(context.Background(), "22222222222222222222222222222222", "receipt")
	if err != nil {
		t.Fatal(err)
	}
	if step.ActivatedAt == nil || step.ActivatedAt.Nanosecond() != 1000 || step.CompletedAt != nil {
		t.Fatal(step.ActivatedAt, step.CompletedAt)
	}
	if step.Wait == nil || !step.Wait.DeadlineAt.Equal(time.Date(2026, 9, 18, 8, 0, 35, 0, time.UTC)) || step.Wait.CorrelationKey != "operation-001 " {
		t.Fatalf("%+v", step.Wait)
	}
	if step.Revision != 8 || step.Step.Revision != 2 || *step.Step.ActivationSequence != 1 || !step.Output.IsAbsent() || step.Input.IsAbsent() {
		t.Fatalf("%+v", step)
	}
	// filters go out as RFC 3339 UTC with the fraction
	at := time.Date(2026, 1, 31, 9, 0, 0, 500, time.FixedZone("CET", 3600))
	q := ListWorkflowsRequest{CreatedAfter: &at, State: StateRunning, Limit: 5}.query()
	if q.Get("created_after") != "2026-01-31T08:00:00.0000005Z" || q.Get("state") != "RUNNING" || q.Get("limit") != "5" || q.Has("paused") {
		t.Fatal(q.Encode())
	}
}

func TestStepsAbsentActivation(t *testing.T) {
	c, rec, _ := serve(t, answer{status: 200, file: "steps.json"})
	steps, err := c.GetWorkflowSteps(context.Background(), "a/b")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps.Steps) != 2 || steps.Steps[0].TaskID == "" || steps.Steps[1].ActivationSequence != nil || steps.Steps[1].ActivationID != "" {
		t.Fatalf("%+v", steps)
	}
	if rec.paths[0] != "/v1/workflows/a%2Fb/steps" {
		t.Fatal(rec.paths[0]) // an id can never address another resource
	}
}

func TestFieldErrorsAreOneErrorTypeAndNotRetried(t *testing.T) {
	c, rec, _ := serve(t, answer{status: 400, file: "problem_400.json"})
	_, err := c.StartWorkflow(context.Background(), "", StartWorkflowRequest{})
	var apiErr *Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("%T %v", err, err)
	}
	if apiErr.Status != 400 || apiErr.Code != CodeInvalidArgument || apiErr.RequestID != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("%+v", apiErr)
	}
	if len(apiErr.Errors) != 2 || apiErr.FieldMessage("input.amount") != "must be at least 1" || apiErr.Errors[1].Field != "business_key" {
		t.Fatalf("%+v", apiErr.Errors)
	}
	if !IsCode(err, CodeInvalidArgument) || rec.requests != 1 {
		t.Fatal(rec.requests)
	}
	if !strings.Contains(err.Error(), "input.amount: must be at least 1") {
		t.Fatal(err.Error())
	}
}

func TestOperationBeforeNullAfterObject(t *testing.T) {
	c, _, _ := serve(t, answer{status: 200, file: "operation.json"})
	op, err := c.GetWorkflowOperation(context.Background(), "w", "o")
	if err != nil {
		t.Fatal(err)
	}
	if !op.Before.IsNull() || op.After.IsAbsent() || op.Reason != "" || op.Action != "workflow.started" {
		t.Fatalf("%+v", op)
	}
}

func TestRetriesResendTheSameKeyAndBody(t *testing.T) {
	unavailable := answer{status: 503, body: `{"code":"UNAVAILABLE","message":"the database is away","request_id":"r"}`}
	limited := answer{status: 429, body: `{"code":"RATE_LIMITED","message":"slow down"}`, header: map[string]string{"Retry-After": "9"}}
	c, rec, waits := serve(t, unavailable, limited, answer{status: 201, file: "start_201.json"})
	got, err := c.StartWorkflow(context.Background(), "", StartWorkflowRequest{DefinitionID: "d", Version: "v1", Input: map[string]int{"a": 1}})
	if err != nil || got == nil {
		t.Fatal(err)
	}
	if rec.requests != 3 || rec.keys[0] != rec.keys[1] || rec.keys[1] != rec.keys[2] || rec.bodies[0] != rec.bodies[2] {
		t.Fatalf("%v %v", rec.keys, rec.bodies)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(rec.keys[0]) {
		t.Fatal(rec.keys[0])
	}
	// no Retry-After: 0.2 s backoff; Retry-After 9: at most 5 s
	if len(*waits) != 2 || (*waits)[0] != 200*time.Millisecond || (*waits)[1] != 5*time.Second {
		t.Fatal(*waits)
	}
}

func TestAGivenKeyIsSentAsItIs(t *testing.T) {
	c, rec, _ := serve(t, answer{status: 201, file: "start_201.json"})
	if _, err := c.StartWorkflow(context.Background(), "order-A-1", StartWorkflowRequest{}); err != nil {
		t.Fatal(err)
	}
	if rec.keys[0] != "order-A-1" {
		t.Fatal(rec.keys)
	}
	c2, rec2, _ := serve(t, answer{status: 200, file: "steps.json"})
	if _, err := c2.GetWorkflowSteps(context.Background(), "w"); err != nil || rec2.keys[0] != "" {
		t.Fatal(err, rec2.keys) // reads carry no key
	}
}

func TestUnknownOutcomeCarriesTheKey(t *testing.T) {
	c, rec, waits := serve(t, answer{status: 503, body: `{"code":"UNAVAILABLE","message":"away","request_id":"r1"}`})
	_, err := c.ControlWorkflow(context.Background(), "w", "ctl-1", WorkflowControlRequest{Operation: ControlPause, ExpectedControlRevision: 1, Reason: "r"})
	var unknown *UnknownOutcomeError
	if !errors.As(err, &unknown) {
		t.Fatalf("%T %v", err, err)
	}
	if unknown.IdempotencyKey != "ctl-1" || unknown.Attempts != 5 || rec.requests != 5 {
		t.Fatalf("%+v %d", unknown, rec.requests)
	}
	for _, k := range rec.keys {
		if k != "ctl-1" {
			t.Fatal(rec.keys)
		}
	}
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Status != 503 || apiErr.RequestID != "r1" {
		t.Fatal(err)
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond}
	if len(*waits) != 4 || (*waits)[3] != want[3] || (*waits)[0] != want[0] {
		t.Fatal(*waits)
	}
	// a read that stays unavailable is the plain 503 error
	c2, _, _ := serve(t, answer{status: 503, body: `{"code":"UNAVAILABLE","message":"away"}`})
	_, err = c2.GetWorkflow(context.Background(), "w")
	if errors.As(err, &unknown) || !IsCode(err, CodeUnavailable) {
		t.Fatalf("%T %v", err, err)
	}
}

func TestQuotaIsReturnedAtOnce(t *testing.T) {
	c, rec, _ := serve(t, answer{status: 429, body: `{"code":"QUEUE_FULL","message":"full"}`, header: map[string]string{"Retry-After": "30"}})
	_, err := c.StartWorkflow(context.Background(), "", StartWorkflowRequest{})
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Code != CodeQueueFull || apiErr.RetryAfter != 30*time.Second || rec.requests != 1 {
		t.Fatal(err, rec.requests)
	}
}

func TestANetworkErrorAfterSendingIsAnUnknownOutcome(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // read each request, then close without answering
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = conn.Read(buf)
			conn.Close()
		}
	}()
	c := NewClient("http://"+ln.Addr().String(), "tok", Options{Retries: 1, Backoff: time.Millisecond})
	_, err = c.SendWorkflowSignal(context.Background(), "w", "sig-1", SendWorkflowSignalRequest{Name: "done"})
	var unknown *UnknownOutcomeError
	if !errors.As(err, &unknown) || unknown.IdempotencyKey != "sig-1" {
		t.Fatalf("%T %v", err, err)
	}
}

func TestNothingListeningIsUnreachable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	c := NewClient("http://"+addr, "tok", Options{Retries: 1, Backoff: time.Millisecond})
	_, err := c.StartWorkflow(context.Background(), "", StartWorkflowRequest{})
	var unreachable *UnreachableError
	var unknown *UnknownOutcomeError
	if !errors.As(err, &unreachable) || errors.As(err, &unknown) || !strings.Contains(err.Error(), "LEDGERFLOW_URL") {
		t.Fatalf("%T %v", err, err)
	}
}

func TestConfigurationFromTheEnvironment(t *testing.T) {
	t.Setenv("LEDGERFLOW_URL", "http://example.invalid:1/")
	t.Setenv("LEDGERFLOW_TOKEN", "")
	c := NewClientFromEnv()
	if c.BaseURL() != "http://example.invalid:1" {
		t.Fatal(c.BaseURL())
	}
	_, err := c.GetWorkflow(context.Background(), "w")
	var cfg *ConfigError
	if !errors.As(err, &cfg) || !strings.Contains(err.Error(), "LEDGERFLOW_TOKEN") {
		t.Fatal(err)
	}
	t.Setenv("LEDGERFLOW_URL", "127.0.0.1:5000")
	t.Setenv("LEDGERFLOW_TOKEN", "x")
	if _, err := NewClientFromEnv().GetWorkflow(context.Background(), "w"); !errors.As(err, &cfg) {
		t.Fatal(err)
	}
}

func TestListQueriesAndCursor(t *testing.T) {
	c, rec, _ := serve(t, answer{status: 200, body: `{"request_id":"r","data":{"items":[],"next_cursor":"abc"}}`})
	paused := false
	page, err := c.ListWorkflows(context.Background(), ListWorkflowsRequest{Paused: &paused, BusinessKeyPrefix: "A-", Cursor: "c1"})
	if err != nil || page.NextCursor != "abc" {
		t.Fatal(err, page)
	}
	if rec.queries[0] != "business_key_prefix=A-&cursor=c1&paused=false" {
		t.Fatal(rec.queries[0])
	}
	ops, err := c.ListWorkflowOperations(context.Background(), "w", HistoryPageRequest{Limit: 100})
	if err != nil || ops.NextCursor != "abc" || rec.queries[1] != "limit=100" {
		t.Fatal(err, rec.queries)
	}
}

func TestARedirectIsNotFollowed(t *testing.T) {
	c, rec, _ := serve(t, answer{status: 307, body: "moved", header: map[string]string{"Location": "/elsewhere"}})
	_, err := c.StartWorkflow(context.Background(), "", StartWorkflowRequest{})
	var apiErr *Error
	if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "not JSON") || rec.requests != 1 {
		t.Fatal(err, rec.paths)
	}
}

func TestWaitForWorkflowReadsUntilFinished(t *testing.T) {
	running := answer{status: 200, body: `{"request_id":"r","data":{"id":"w","state":"RUNNING","revision":"2","control_revision":"1","paused":false,"input":{},"business_key":"","deadline_at":"2026-01-01T00:00:00Z","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}}`}
	c, rec, _ := serve(t, running, running, answer{status: 200, file: "recorded/workflow_big_revision.json"})
	w, err := c.WaitForWorkflow(context.Background(), "w", time.Millisecond)
	if err != nil || w.State != StateSucceeded || rec.requests != 3 {
		t.Fatal(err, rec.requests)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	c2, _, _ := serve(t, running)
	if _, err := c2.WaitForWorkflow(ctx, "w", time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}
