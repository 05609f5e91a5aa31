package ledgerflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTasks is a task server of n tasks on queue "q": it records every call by action.
type fakeTasks struct {
	mu        sync.Mutex
	pending   []string
	calls     map[string][]string    // action -> task ids (claim: the max_tasks asked)
	heartbeat int                    // the status heartbeats answer
	completed map[string]string      // task id -> output
	failed    map[string]string      // task id -> message
	noRefill  bool                   // answer a claim with completions 400 (a server of an earlier release)
	refilled  int                    // tasks claimed by completion requests
	failClaim int                    // answer this many claims 503 first
	claimKeys []string               // the Idempotency-Key of every claim
	fails     map[string]FailRequest // task id -> the failure's body
	workers   []*WorkerIdentity      // the worker of every claim (and of every completion's claim)
}

func newFakeTasks(n int) *fakeTasks {
	f := &fakeTasks{calls: map[string][]string{}, heartbeat: 200, completed: map[string]string{}, failed: map[string]string{}, fails: map[string]FailRequest{}}
	for i := 0; i < n; i++ {
		f.pending = append(f.pending, fmt.Sprintf("%032d", i))
	}
	return f
}

func (f *fakeTasks) count(action string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls[action])
}

func (f *fakeTasks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	task := func(id string) map[string]any {
		return map[string]any{"id": id, "queue": "q", "epoch": 1, "workflow_id": "w", "step_key": "s", "attempt": 1,
			"deadline_at": "2030-01-01T00:00:00Z", "input": map[string]any{"id": id}}
	}
	answer := func(status int, data any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"request_id": "r", "data": data})
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/tasks/"), "/")
	switch {
	case r.URL.Path == "/v1/tasks/claim":
		f.claimKeys = append(f.claimKeys, r.Header.Get("Idempotency-Key"))
		if f.failClaim > 0 {
			f.failClaim--
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"code":"UNAVAILABLE","message":"the database is away"}`))
			return
		}
		var req ClaimRequest
		_ = json.Unmarshal(raw, &req)
		f.workers = append(f.workers, req.Worker)
		f.calls["claim"] = append(f.calls["claim"], fmt.Sprint(req.MaxTasks))
		var out []any
		for len(out) < req.MaxTasks && len(f.pending) > 0 {
			out = append(out, task(f.pending[0]))
			f.pending = f.pending[1:]
		}
		if len(out) == 0 {
			f.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // a short "long poll"
			f.mu.Lock()
		}
		answer(200, map[string]any{"tasks": out})
	case r.URL.Path == "/v1/tasks/complete":
		var req struct {
			Tasks []struct {
				ID     string          `json:"id"`
				Output json.RawMessage `json:"output"`
			} `json:"tasks"`
			Claim *ClaimNext `json:"claim"`
		}
		_ = json.Unmarshal(raw, &req)
		if req.Claim != nil && f.noRefill {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"code":"INVALID_ARGUMENT","message":"invalid","errors":[{"field":"claim","message":"unknown field"}]}`))
			return
		}
		var claimed []any
		if req.Claim != nil {
			f.workers = append(f.workers, req.Claim.Worker)
			for len(claimed) < req.Claim.MaxTasks && len(f.pending) > 0 {
				claimed = append(claimed, task(f.pending[0]))
				f.pending = f.pending[1:]
			}
			f.refilled += len(claimed)
		}
		var results []any
		for _, t := range req.Tasks {
			f.calls["complete"] = append(f.calls["complete"], t.ID)
			f.completed[t.ID] = string(t.Output)
			results = append(results, map[string]any{"id": t.ID, "status": 200, "task": task(t.ID)})
		}
		answer(200, map[string]any{"results": results, "claimed": claimed})
	case len(parts) == 2:
		id, action := parts[0], parts[1]
		f.calls[action] = append(f.calls[action], id)
		if action == "heartbeat" && f.heartbeat != 200 {
			w.WriteHeader(f.heartbeat)
			_, _ = w.Write([]byte(`{"code":"STATE_CONFLICT","message":"the lease was lost"}`))
			return
		}
		if action == "fail" {
			var req FailRequest
			_ = json.Unmarshal(raw, &req)
			f.failed[id] = req.Error.Message
			f.fails[id] = req
		}
		answer(200, map[string]any{"task": task(id)})
	default:
		w.WriteHeader(404)
	}
}

func quietLogger(t *testing.T) *log.Logger {
	return log.New(testWriter{t}, "", 0)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func workerOf(t *testing.T, fake *fakeTasks, opts WorkerOptions) *TaskWorker {
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	opts.Logger = quietLogger(t)
	opts.PollWait = NoPollWait
	return NewTaskWorker(NewClient(srv.URL, "tok"), opts)
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in time", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWorkerRunsAtMostConcurrencyAtOnceAndCompletesAll(t *testing.T) {
	for _, noRefill := range []bool{false, true} {
		t.Run(fmt.Sprintf("noRefill=%v", noRefill), func(t *testing.T) { concurrencyAndAll(t, noRefill) })
	}
}

func concurrencyAndAll(t *testing.T, noRefill bool) {
	fake := newFakeTasks(12)
	fake.noRefill = noRefill
	w := workerOf(t, fake, WorkerOptions{Concurrency: 3})
	var mu sync.Mutex
	running, most := 0, 0
	w.Register("q", func(ctx context.Context, task *Task) (any, error) {
		mu.Lock()
		running++
		if running > most {
			most = running
		}
		mu.Unlock()
		if task.ID <= fmt.Sprintf("%032d", 1) { // the first claim's tasks 0 and 1 wait for each other
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				mu.Lock()
				both := most >= 2
				mu.Unlock()
				if both {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		time.Sleep(time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		if task.ID == fmt.Sprintf("%032d", 5) {
			return nil, NonRetryable(fmt.Errorf("bad input"))
		}
		return json.RawMessage(`{"n": 18446744073709551617}`), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitUntil(t, "all settled", func() bool { return fake.count("complete")+fake.count("fail") == 12 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if most > 3 || most < 2 {
		t.Fatalf("at most %d at once", most)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.failed[fmt.Sprintf("%032d", 5)] != "bad input" || fake.completed[fmt.Sprintf("%032d", 0)] != `{"n":18446744073709551617}` {
		t.Fatalf("%v %v", fake.failed, fake.completed)
	}
	if noRefill == (fake.refilled > 0) {
		t.Fatalf("refilled %d", fake.refilled) // completions claim the next tasks unless the server refuses it
	}
	for _, asked := range fake.calls["claim"] {
		if n, _ := strconv.Atoi(asked); n > 3 || n < 1 {
			t.Fatalf("a claim asked for %s tasks with 3 slots", asked)
		}
	}
}

func TestCancelHandsBackWhatOutlivesTheGrace(t *testing.T) {
	fake := newFakeTasks(1)
	w := workerOf(t, fake, WorkerOptions{ShutdownGrace: 50 * time.Millisecond})
	started := make(chan struct{})
	handlerCtxDone := make(chan struct{})
	w.Register("q", func(ctx context.Context, task *Task) (any, error) {
		close(started)
		<-ctx.Done() // runs until the worker gives up on it
		close(handlerCtxDone)
		return map[string]bool{"late": true}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-handlerCtxDone
	time.Sleep(20 * time.Millisecond)
	if fake.count("release") != 1 || fake.count("complete") != 0 {
		t.Fatalf("release %d complete %d", fake.count("release"), fake.count("complete"))
	}
}

func TestALostLeaseCancelsTheHandlerAndSendsNoResult(t *testing.T) {
	fake := newFakeTasks(1)
	fake.heartbeat = 409
	w := workerOf(t, fake, WorkerOptions{HeartbeatInterval: 10 * time.Millisecond})
	cancelled := make(chan struct{})
	w.Register("q", func(ctx context.Context, task *Task) (any, error) {
		<-ctx.Done()
		close(cancelled)
		return "too late", nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-cancelled
	waitUntil(t, "the slot is free again", func() bool { return fake.count("claim") >= 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if fake.count("complete") != 0 || fake.count("fail") != 0 || fake.count("release") != 0 {
		t.Fatal(fake.calls)
	}
}

func TestARevokedTokenStopsTheWorkerWithTheError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"code":"UNAUTHENTICATED","message":"the token was revoked"}`))
	}))
	defer srv.Close()
	w := NewTaskWorker(NewClient(srv.URL, "tok"), WorkerOptions{Logger: quietLogger(t)})
	w.Register("q", func(ctx context.Context, task *Task) (any, error) { return nil, nil })
	err := w.Run(context.Background())
	if !IsCode(err, CodeUnauthenticated) {
		t.Fatal(err)
	}
}

func TestAClaimOfUnknownOutcomeIsResentWithItsKey(t *testing.T) {
	fake := newFakeTasks(1)
	fake.failClaim = 3 // the client's two attempts, then the worker's resend's first attempt
	srv := httptest.NewServer(fake)
	defer srv.Close()
	client := NewClient(srv.URL, "tok", Options{Retries: 1, Backoff: time.Millisecond})
	w := NewTaskWorker(client, WorkerOptions{Logger: quietLogger(t), PollWait: NoPollWait})
	w.Register("q", func(ctx context.Context, task *Task) (any, error) { return "ok", nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitUntil(t, "the task completed", func() bool { return fake.count("complete") == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.claimKeys) < 4 || fake.claimKeys[0] != fake.claimKeys[3] {
		t.Fatalf("claim keys %v", fake.claimKeys) // the fourth attempt (the answered one) resends the first key
	}
}
