package ledgerflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

type cardDeclined struct{ code string }

func (e *cardDeclined) Error() string     { return "card declined: " + e.code }
func (e *cardDeclined) ErrorType() string { return "payments.CardDeclined" }

type plainError struct{}

func (plainError) Error() string { return "plain" }

// newCardError is a named function, so that its frame is looked for in the stack WithStack takes.
func newCardError() error { return WithStack(errors.New("gateway timeout")) }

func explode(xs []int, i int) int { return xs[i] }

func TestAFailureSendsItsTypeStackAndTheWorkersIdentity(t *testing.T) {
	fake := newFakeTasks(5)
	w := workerOf(t, fake, WorkerOptions{Concurrency: 2})
	id := func(i int) string { return fmt.Sprintf("%032d", i) }
	w.Register("q", func(ctx context.Context, task *Task) (any, error) {
		switch task.ID {
		case id(0):
			return nil, fmt.Errorf("charging: %w", plainError{})
		case id(1):
			return nil, NonRetryable(fmt.Errorf("charging: %w", &cardDeclined{"51"}))
		case id(2):
			return explode([]int{1}, len(task.ID)), nil // panics: index out of range
		case id(3):
			return nil, newCardError()
		}
		return "ok", nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitUntil(t, "all settled", func() bool { return fake.count("complete")+fake.count("fail") == 5 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	me := Identity()
	host, _ := os.Hostname()
	if me.PID != os.Getpid() || me.SDK != "ledgerflow-go/"+Version || (host != "" && me.Host != host) {
		t.Fatalf("identity %+v", me)
	}
	for _, f := range []string{id(0), id(1), id(2), id(3)} {
		got := fake.fails[f]
		if got.Worker == nil || *got.Worker != me || got.Epoch != 1 {
			t.Fatalf("%s: %+v", f, got)
		}
		if n := utf8.RuneCountInString(got.Error.Stack); n == 0 || n > MaxStackChars {
			t.Fatalf("%s: a stack of %d characters", f, n)
		}
	}
	// a returned error: its dynamic type, its message, the stack where the handler returned
	e0 := fake.fails[id(0)].Error
	if e0.Type != "*fmt.wrapError" || e0.Message != "charging: plain" || !e0.Retryable || !strings.Contains(e0.Stack, "goroutine ") ||
		!strings.Contains(e0.Stack, "(*run).call") {
		t.Fatalf("%+v", e0)
	}
	// a type named by ErrorType() anywhere in the chain, through NonRetryable
	e1 := fake.fails[id(1)].Error
	if e1.Type != "payments.CardDeclined" || e1.Message != "charging: card declined: 51" || e1.Retryable {
		t.Fatalf("%+v", e1)
	}
	// a panic: recovered, retryable, with the stack where it panicked
	e2 := fake.fails[id(2)].Error
	if e2.Type != "panic(runtime.boundsError)" || !strings.HasPrefix(e2.Message, "panic: runtime error: index out of range") ||
		!e2.Retryable || !strings.Contains(e2.Stack, "go.explode(") || !strings.Contains(e2.Stack, "panic") {
		t.Fatalf("%+v", e2)
	}
	// WithStack: the stack where the error was made; the type is the wrapped error's
	e3 := fake.fails[id(3)].Error
	if e3.Type != "*errors.errorString" || e3.Message != "gateway timeout" || !strings.Contains(e3.Stack, "go.newCardError(") {
		t.Fatalf("%+v", e3)
	}
	// every claim names the worker, the claims made with completions too
	if len(fake.workers) == 0 {
		t.Fatal("no claim")
	}
	for _, who := range fake.workers {
		if who == nil || *who != me {
			t.Fatalf("a claim named %+v", who)
		}
	}
}

func TestBoundedStackKeepsItsHeadAndItsEnd(t *testing.T) {
	short := "goroutine 1 [running]:\nmain.main()\n"
	if BoundedStack(short) != short {
		t.Fatal("a short stack is changed")
	}
	long := "goroutine 7 [running]:\n" + strings.Repeat("é", 40_000) + "\nthe end\n"
	got := BoundedStack(long)
	if n := utf8.RuneCountInString(got); n > MaxStackChars || n < MaxStackChars-100 {
		t.Fatalf("%d characters", n)
	}
	if !strings.HasPrefix(got, "goroutine 7 [running]:\n") || !strings.HasSuffix(got, "\nthe end\n") || !strings.Contains(got, "characters left out") {
		t.Fatalf("%q ... %q", got[:40], got[len(got)-40:])
	}
	var left int
	if _, err := fmt.Sscanf(got[strings.Index(got, "\n... (")+1:], "... (%d characters left out)", &left); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("\n... (%d characters left out) ...\n", left)
	if utf8.RuneCountInString(got)-len(marker)+left != utf8.RuneCountInString(long) {
		t.Fatalf("%d characters said left out", left) // what is kept and what is left out make the whole
	}
	if BoundedStack("a\x00b") != "a\uFFFDb" {
		t.Fatal("a NUL character is sent")
	}
}

func TestFailTaskWithSendsTheTraceCutToTheAPIsBounds(t *testing.T) {
	c, rec, _ := serve(t, answer{status: 200, body: `{"request_id":"r","data":{"task":{"id":"t","queue":"q","epoch":3,"workflow_id":"w","step_key":"s","attempt":1,"deadline_at":"2030-01-01T00:00:00Z","state":"FAILED"}}}`})
	who := WorkerIdentity{Host: "box-7", PID: 4242, SDK: "ledgerflow-go/0.1.0"}
	_, err := c.FailTaskWith(context.Background(), "t", "k", FailRequest{Epoch: 3, Worker: &who, Error: TaskError{
		Message: strings.Repeat("m", 5000), Type: strings.Repeat("T", 300), Stack: strings.Repeat("s", 20_000), Retryable: true}})
	if err != nil {
		t.Fatal(err)
	}
	var body FailRequest
	if err := json.Unmarshal([]byte(rec.bodies[0]), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Error.Message) != 4096 || len(body.Error.Type) != MaxErrorTypeChars || len(body.Error.Stack) > MaxStackChars ||
		!body.Error.Retryable || body.Epoch != 3 || *body.Worker != who {
		t.Fatalf("%d %d %d %+v", len(body.Error.Message), len(body.Error.Type), len(body.Error.Stack), body.Worker)
	}
	// FailTask sends what it did before: no type, stack or worker
	_, err = c.FailTask(context.Background(), "t", "k2", 3, "boom", false)
	if want := `{"epoch":3,"error":{"message":"boom","retryable":false}}`; err != nil || rec.bodies[1] != want {
		t.Fatal(err, rec.bodies[1])
	}
	// a claim names its worker as the API's schema has it
	_, err = c.ClaimTasks(context.Background(), "k3", ClaimRequest{Queues: []string{"q"}, Worker: &who})
	if want := `{"queues":["q"],"wait_seconds":0,"max_tasks":1,"worker":{"host":"box-7","pid":4242,"sdk":"ledgerflow-go/0.1.0"}}`; rec.bodies[2] != want {
		t.Fatal(err, rec.bodies[2])
	}
}

func TestErrorTypeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{errors.New("x"), "*errors.errorString"},
		{plainError{}, "ledgerflow.plainError"},
		{NonRetryable(plainError{}), "ledgerflow.plainError"},
		{WithStack(NonRetryable(errors.New("x"))), "*errors.errorString"},
		{fmt.Errorf("a: %w", &cardDeclined{}), "payments.CardDeclined"},
		{&PanicError{Value: "boom"}, "panic(string)"},
	} {
		if got := ErrorTypeOf(c.err); got != c.want {
			t.Errorf("%v: %q, not %q", c.err, got, c.want)
		}
	}
}
