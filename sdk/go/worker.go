package ledgerflow

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TaskHandler runs one task and returns the step's output (any value encoding/json can encode;
// json.RawMessage or RawJSON to send exact bytes). An error fails the task: retryable (the step's
// retry policy decides) unless it wraps a *NonRetryableError. ctx ends when the task's lease is lost
// (a heartbeat was refused) or when the worker hands the task back at shutdown.
type TaskHandler func(ctx context.Context, task *Task) (any, error)

// NonRetryableError fails a task without a retry: return NonRetryable(err) from a handler.
type NonRetryableError struct{ Err error }

func (e *NonRetryableError) Error() string { return e.Err.Error() }
func (e *NonRetryableError) Unwrap() error { return e.Err }

// NonRetryable wraps err so that the task fails without a retry.
func NonRetryable(err error) error { return &NonRetryableError{Err: err} }

// WorkerOptions configure a TaskWorker. The zero value of each field is its default.
type WorkerOptions struct {
	// Concurrency: how many tasks run at once, each on its own goroutine (default 1).
	Concurrency int
	// PollWait is how long a claim long-polls when nothing is due, in whole seconds (default 10 s,
	// at most 30 s; NoPollWait for none).
	PollWait time.Duration
	// HeartbeatInterval (default: a third of the lease left when the task was claimed, at least
	// 200 ms; 10 s when the claim gave no lease time).
	HeartbeatInterval time.Duration
	// ShutdownGrace: how long running tasks may still finish after the context ends (default 20 s);
	// those still running then are handed back to their queue.
	ShutdownGrace time.Duration
	// Logger gets one line per task and the worker's warnings (default: stderr with the time).
	Logger *log.Logger
}

// NoPollWait makes claims answer at once instead of long-polling (WorkerOptions.PollWait).
const NoPollWait = time.Duration(-1)

// TaskWorker runs Go functions for task queues: claim → heartbeat while running → complete or fail.
//
//	worker := ledgerflow.NewTaskWorker(client, ledgerflow.WorkerOptions{Concurrency: 8})
//	worker.Register("approvals", func(ctx context.Context, t *ledgerflow.Task) (any, error) {
//		return map[string]any{"approved": true}, nil
//	})
//	err := worker.Run(ctx) // until ctx ends
//
// Run claims as many tasks as it has free slots (at most 16 per claim, long-polling PollWait) and
// runs each handler on its own goroutine, at most Concurrency at once. Every running task is
// heartbeaten; a heartbeat answered 409 or 404 means the lease is lost: the handler's context is
// cancelled and its result is not sent. Results go out as they come, completions together (up to
// 16 per POST /v1/tasks/complete), failures one by one; a slot is free again once its result was
// accepted or refused. A completion request also claims as many tasks as it completes, which start
// at once on the slots it frees (one request per task instead of two). Network errors, 503 and 429 RATE_LIMITED are retried by the client (same
// key), then again every second with the same key until the server answers or the lease is lost.
//
// When ctx ends, Run stops claiming (a claim in its long poll ends within PollWait and the tasks it
// brings are handed back at once), gives running tasks ShutdownGrace to finish and be reported,
// hands back those still running (POST /v1/tasks/{id}/release: due again at once, no attempt
// counted) and cancels their contexts, and returns nil. An unreachable or unavailable server is
// logged and retried; any other error (e.g. a revoked token: 401) stops the worker the same way and
// Run returns it.
type TaskWorker struct {
	client   *Client
	opts     WorkerOptions
	mu       sync.Mutex
	handlers map[string]TaskHandler
	identity WorkerIdentity
}

// NewTaskWorker makes a worker of client with opts.
func NewTaskWorker(client *Client, opts WorkerOptions) *TaskWorker {
	if opts.Concurrency < 1 {
		opts.Concurrency = 1
	}
	switch {
	case opts.PollWait == 0:
		opts.PollWait = 10 * time.Second
	case opts.PollWait < 0:
		opts.PollWait = 0
	case opts.PollWait > MaxWaitSeconds*time.Second:
		opts.PollWait = MaxWaitSeconds * time.Second
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 20 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = log.New(os.Stderr, "", log.LstdFlags)
	}
	return &TaskWorker{client: client, opts: opts, handlers: map[string]TaskHandler{}, identity: Identity()}
}

// Register runs h for every task of queue (before Run).
func (w *TaskWorker) Register(queue string, h TaskHandler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[queue] = h
}

// flight is one claimed task, from its claim until its result was settled or it was given up.
type flight struct {
	task     Task
	label    string
	interval time.Duration
	handler  TaskHandler
	ctx      context.Context
	cancel   context.CancelFunc
	began    time.Time
	beating  sync.Mutex // held during a heartbeat and a release: a release never precedes a heartbeat in progress
	lost     atomic.Bool
	released atomic.Bool
	// slot is what became of the slot the task holds: slotHeld, then slotFreed (runFlight gives it
	// back) or slotHandedOn (the completion request claimed a task that took it over)
	slot    atomic.Int32
	ended   chan struct{} // closed when the handler returned
	settled chan struct{} // closed when its result was answered (or given up)
	once    sync.Once
}

const (
	slotHeld int32 = iota
	slotFreed
	slotHandedOn
)

func (f *flight) settle() { f.once.Do(func() { close(f.settled) }) }

func (f *flight) took() string {
	return fmt.Sprintf("%d ms", time.Since(f.began).Milliseconds())
}

type outcome struct {
	f         *flight
	output    RawJSON
	failure   string // set: the task failed
	retryable bool
	excType   string // the failure's type and stack trace ("": none)
	stack     string
}

// run is the state of one Run.
type run struct {
	w        *TaskWorker
	ctx      context.Context
	queues   []string
	handlers map[string]TaskHandler
	refillOK atomic.Bool   // false: the server takes no claim with completions (an earlier release)
	slots    chan struct{} // a token per task held (claimed and not yet settled)
	outcomes chan *outcome
	stop     chan struct{} // closed when the helpers (reporter, heartbeats) stop
	stopping atomic.Bool
	mu       sync.Mutex
	flights  map[*flight]struct{}
	running  sync.WaitGroup // handlers running
	helpers  sync.WaitGroup // the reporter
	fatalMu  sync.Mutex
	fatal    error
	fatalCh  chan struct{}
	fatalSet sync.Once
}

func (r *run) setFatal(err error) {
	r.fatalSet.Do(func() {
		r.fatalMu.Lock()
		r.fatal = err
		r.fatalMu.Unlock()
		close(r.fatalCh)
	})
}

func (r *run) logf(format string, args ...any) { r.w.opts.Logger.Printf(format, args...) }

// Run claims and runs tasks until ctx ends (then it returns nil) or a non-transient error stops it
// (then it returns that error), after the tasks in flight were finished or handed back.
func (w *TaskWorker) Run(ctx context.Context) error {
	w.mu.Lock()
	handlers := make(map[string]TaskHandler, len(w.handlers))
	for q, h := range w.handlers {
		handlers[q] = h
	}
	w.mu.Unlock()
	if len(handlers) == 0 {
		return errors.New("ledgerflow: no task handlers: register one with worker.Register(queue, handler)")
	}
	r := &run{w: w, ctx: ctx, handlers: handlers, slots: make(chan struct{}, w.opts.Concurrency), stop: make(chan struct{}),
		outcomes: make(chan *outcome, w.opts.Concurrency), flights: map[*flight]struct{}{}, fatalCh: make(chan struct{})}
	r.refillOK.Store(true)
	for q := range handlers {
		r.queues = append(r.queues, q)
	}
	sort.Strings(r.queues)
	r.logf("task worker ready: queues %v at %s (%d at a time)", r.queues, w.client.BaseURL(), w.opts.Concurrency)
	r.helpers.Add(1)
	go r.reporter()
	r.claimLoop(ctx)
	r.shutdown()
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	return r.fatal
}

// passing reports whether an error clears by itself (the worker logs it and tries again).
func passing(err error) bool {
	var unreachable *UnreachableError
	var unknown *UnknownOutcomeError
	var apiErr *Error
	return errors.As(err, &unreachable) || errors.As(err, &unknown) || (errors.As(err, &apiErr) && transient(apiErr))
}

func (r *run) claimLoop(ctx context.Context) {
	for {
		select { // one free slot at least
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return
		case <-r.fatalCh:
			return
		}
		n := 1
	more:
		for n < MaxClaim {
			select {
			case r.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		tasks, err := r.claim(ctx, n)
		for i := len(tasks); i < n; i++ {
			<-r.slots // the slots no task came for
		}
		if err != nil {
			if !passing(err) {
				r.logf("task worker stopping: %v", err)
				r.setFatal(err)
				return
			}
			r.logf("%v; retrying in 1 s", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
			continue
		}
		for i := range tasks {
			r.dispatch(&tasks[i])
		}
	}
}

// claim claims up to n tasks. After an unknown outcome it resends the same claim with the same key
// (the server answers the tasks that claim took), every second, until it gets an answer.
func (r *run) claim(ctx context.Context, n int) ([]Task, error) {
	key := NewIdempotencyKey()
	req := ClaimRequest{Queues: r.queues, WaitSeconds: int(r.w.opts.PollWait / time.Second), MaxTasks: n, Worker: &r.w.identity}
	for {
		// not bound to ctx: tasks claimed by a long poll that ends after ctx are handed back, not lost
		cctx, cancel := context.WithTimeout(context.Background(), r.w.client.timeout+time.Duration(req.WaitSeconds)*time.Second)
		tasks, err := r.w.client.ClaimTasks(cctx, key, req)
		cancel()
		var unknown *UnknownOutcomeError
		if err == nil || !errors.As(err, &unknown) {
			return tasks, err
		}
		if ctx.Err() != nil {
			return nil, err // stopping: a task that claim took comes back when its lease ends
		}
		r.logf("%v; resending the claim in 1 s", err)
		select {
		case <-time.After(resultRetryPeriod):
		case <-ctx.Done():
		}
	}
}

// dispatch starts a claimed task on the slot it was claimed for (the caller holds its token).
func (r *run) dispatch(t *Task) {
	label := fmt.Sprintf("%s: task %s (step %s, workflow %s", t.Queue, short(t.ID), t.StepKey, short(t.WorkflowID))
	if t.Attempt > 1 {
		label += fmt.Sprintf(", attempt %d", t.Attempt)
	}
	if t.PollRound != nil {
		label += fmt.Sprintf(", round %d", *t.PollRound)
	}
	label += ")"
	interval := r.w.opts.HeartbeatInterval
	if interval <= 0 {
		interval = 10 * time.Second
		if t.LeaseExpiresAt != nil {
			interval = time.Until(*t.LeaseExpiresAt) / 3
			if interval < 200*time.Millisecond {
				interval = 200 * time.Millisecond
			}
		}
	}
	hctx, cancel := context.WithCancel(context.Background())
	f := &flight{task: *t, label: label, interval: interval, handler: r.handlers[t.Queue], ctx: hctx, cancel: cancel,
		began: time.Now(), ended: make(chan struct{}), settled: make(chan struct{})}
	r.mu.Lock() // shutdown sets stopping under it: no handler starts once it waits for them
	start := r.ctx.Err() == nil && !r.stopping.Load() && f.handler != nil
	if start {
		r.flights[f] = struct{}{}
		r.running.Add(1)
	}
	r.mu.Unlock()
	if !start {
		// claimed by a long poll that ended after the stop (or of a queue without a handler): back now
		r.release(f, "the worker is stopping")
		close(f.ended)
		f.settle()
		<-r.slots
		return
	}
	go r.heartbeat(f)
	go r.runFlight(f)
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func (r *run) runFlight(f *flight) {
	defer func() {
		r.mu.Lock()
		delete(r.flights, f)
		r.mu.Unlock()
		f.cancel()
		if f.slot.CompareAndSwap(slotHeld, slotFreed) {
			<-r.slots
		}
	}()
	output, returnedAt, err := r.call(f)
	close(f.ended)
	r.running.Done()
	if f.lost.Load() || f.released.Load() {
		why := "its lease was lost"
		if f.released.Load() {
			why = "it was handed back"
		}
		r.logf("%s ended in %s after %s; its result is not sent", f.label, f.took(), why)
		f.settle()
		return
	}
	o := &outcome{f: f}
	if err != nil {
		var nr *NonRetryableError
		trace := failureOf(err, returnedAt)
		o.failure, o.retryable, o.excType, o.stack = trace.Message, !errors.As(err, &nr), trace.Type, trace.Stack
	} else if raw, merr := marshal(output); merr != nil {
		o.failure = "the output is not JSON: " + merr.Error()
	} else if len(raw) > MaxOutputBytes {
		o.failure = fmt.Sprintf("the output is %d bytes of JSON; at most %d", len(raw), MaxOutputBytes)
	} else {
		o.output = raw
	}
	select {
	case r.outcomes <- o:
	case <-r.stop:
		r.logf("%s: result not sent (the worker stopped)", f.label)
		f.settle()
		return
	}
	select {
	case <-f.settled:
	case <-r.stop:
	}
}

// call runs the handler and, when it returns an error, takes the stack where it returned; a panic
// fails the task (retryable, a *PanicError with the stack where it panicked) instead of the worker.
func (r *run) call(f *flight) (out any, returnedAt []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &PanicError{Value: p, Stack: string(debug.Stack())}
		}
	}()
	out, err = f.handler(f.ctx, &f.task)
	if err != nil {
		returnedAt = debug.Stack()
	}
	return out, returnedAt, err
}

func (r *run) heartbeat(f *flight) {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-f.settled:
			return
		case <-r.stop:
			return
		case <-t.C:
		}
		f.beating.Lock()
		if f.released.Load() {
			f.beating.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.w.client.timeout)
		_, err := r.w.client.HeartbeatTask(ctx, f.task.ID, "", f.task.Epoch)
		cancel()
		f.beating.Unlock()
		switch {
		case IsCode(err, CodeStateConflict) || IsCode(err, CodeNotFound):
			f.lost.Store(true)
			r.logf("%s: lease lost (epoch %d)", f.label, f.task.Epoch)
			f.cancel()
			f.settle() // a result waiting to be sent is not sent
			return
		case err != nil:
			r.logf("%s: heartbeat failed: %v", f.label, err) // the lease has two more intervals
		}
	}
}

// release hands a claimed task back to its queue (a worker shutting down).
func (r *run) release(f *flight, why string) {
	f.released.Store(true)
	f.beating.Lock()
	defer f.beating.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), handBackTimeout)
	defer cancel()
	_, err := r.w.client.ReleaseTask(ctx, f.task.ID, "", f.task.Epoch)
	switch {
	case err == nil:
		r.logf("%s handed back to its queue (%s)", f.label, why)
	case IsCode(err, CodeStateConflict) || IsCode(err, CodeNotFound):
		// its lease had ended anyway
	default:
		r.logf("%s: not handed back (%v); its lease will expire", f.label, err)
	}
}

func (r *run) reporter() {
	defer r.helpers.Done()
	for {
		var first *outcome
		select {
		case first = <-r.outcomes:
		case <-r.stop:
			return
		}
		batch, size := []*outcome{first}, len(first.output)
	drain:
		for len(batch) < MaxBatch {
			select {
			case o := <-r.outcomes:
				batch = append(batch, o)
				size += len(o.output) + 200
				if size > batchBodyBudget {
					break drain
				}
			default:
				break drain
			}
		}
		var done []*outcome
		for _, o := range batch {
			if o.failure != "" {
				r.sendFailure(o)
			} else {
				done = append(done, o)
			}
		}
		if len(done) > 0 {
			r.sendCompletions(done)
		}
	}
}

// resend runs send until it returns an answer or an error that does not clear by itself, again
// every second with the same key, while some of flights still hold their lease and the worker runs.
func (r *run) resend(flights []*flight, send func(ctx context.Context) error) error {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), r.w.client.timeout)
		err := send(ctx)
		cancel()
		if err == nil || !passing(err) {
			return err
		}
		alive := false
		for _, f := range flights {
			alive = alive || !f.lost.Load()
		}
		if !alive {
			return err
		}
		r.logf("%v; sending %d results again in 1 s", err, len(flights))
		select {
		case <-time.After(resultRetryPeriod):
		case <-r.stop:
			return err
		}
	}
}

// sendCompletions completes done in one request that also claims as many tasks (when the worker
// runs on): a slot its completion frees runs the next task as soon as the answer arrives, one request
// per task instead of two, and the task a completion just created can be among them.
func (r *run) sendCompletions(done []*outcome) {
	req := CompleteTasksRequest{}
	flights := make([]*flight, len(done))
	for i, o := range done {
		req.Tasks = append(req.Tasks, CompletionItem{ID: o.f.task.ID, Epoch: o.f.task.Epoch, Output: o.output})
		flights[i] = o.f
	}
	if r.refillOK.Load() && !r.stopping.Load() && r.ctx.Err() == nil {
		req.Claim = &ClaimNext{Queues: r.queues, MaxTasks: len(done), Worker: &r.w.identity}
	}
	key := NewIdempotencyKey() // the same key for every resend of this request
	var resp *CompleteTasksResponse
	err := r.resend(flights, func(ctx context.Context) (err error) {
		resp, err = r.w.client.CompleteTasks(ctx, key, req)
		return err
	})
	if err != nil {
		if req.Claim != nil && claimRefused(err) {
			r.logf("the server takes no claim with completions: this worker claims separately")
			r.refillOK.Store(false)
			r.sendCompletions(done)
			return
		}
		if IsCode(err, CodeInvalidArgument) && len(done) > 1 {
			for _, o := range done { // one item the server refuses must not hold back the others
				r.sendCompletions([]*outcome{o})
			}
			return
		}
		for _, o := range done {
			r.logf("%s: result not sent: %v", o.f.label, err)
			o.f.settle()
		}
		if !passing(err) {
			r.setFatal(err)
		}
		return
	}
	r.refill(resp.Claimed, flights)
	for i, o := range done {
		if i < len(resp.Results) && resp.Results[i].Status == 200 {
			r.logf("%s completed in %s", o.f.label, o.f.took())
		} else if i < len(resp.Results) {
			res := resp.Results[i]
			msg := ""
			if res.Error != nil {
				msg = res.Error.Code + " " + res.Error.Message
			}
			r.logf("%s finished in %s, but the result was refused (epoch %d: %d %s)", o.f.label, o.f.took(), o.f.task.Epoch, res.Status, msg)
		}
		o.f.settle()
	}
}

// claimRefused: a 400 naming the claim field (a server of an earlier release takes no claim with
// completions).
func claimRefused(err error) bool {
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Code != CodeInvalidArgument {
		return false
	}
	for _, f := range apiErr.Errors {
		if strings.HasPrefix(f.Field, "claim") {
			return true
		}
	}
	return false
}

// refill starts the tasks a completion request claimed, each on the slot of one of the completed
// flights (before they settle and give their slots back); a task no slot is left for goes back.
func (r *run) refill(claimed []Task, flights []*flight) {
	next := 0
	for i := range claimed {
		took := false
		for ; next < len(flights) && !took; next++ {
			took = flights[next].slot.CompareAndSwap(slotHeld, slotHandedOn)
		}
		if !took {
			select {
			case r.slots <- struct{}{}:
			default:
				f := &flight{task: claimed[i], label: claimed[i].Queue + ": task " + short(claimed[i].ID), cancel: func() {}}
				r.release(f, "no free slot")
				continue
			}
		}
		r.dispatch(&claimed[i])
	}
}

func (r *run) sendFailure(o *outcome) {
	key := NewIdempotencyKey()
	err := r.resend([]*flight{o.f}, func(ctx context.Context) error {
		_, err := r.w.client.FailTaskWith(ctx, o.f.task.ID, key, FailRequest{Epoch: o.f.task.Epoch, Worker: &r.w.identity,
			Error: TaskError{Message: o.failure, Retryable: o.retryable, Type: o.excType, Stack: o.stack}})
		return err
	})
	kind := "retryable"
	if !o.retryable {
		kind = "not retryable"
	}
	switch {
	case err == nil:
		r.logf("%s failed in %s (%s): %s", o.f.label, o.f.took(), kind, o.failure)
	case IsCode(err, CodeStateConflict) || IsCode(err, CodeNotFound):
		r.logf("%s failed in %s, but the failure was refused (epoch %d is stale)", o.f.label, o.f.took(), o.f.task.Epoch)
	default:
		r.logf("%s: failure not sent: %v", o.f.label, err)
		if !passing(err) {
			r.setFatal(err)
		}
	}
	o.f.settle()
}

// shutdown: running tasks get the grace, those still running are handed back, results flush.
func (r *run) shutdown() {
	r.mu.Lock()
	r.stopping.Store(true)
	r.mu.Unlock()
	finished := make(chan struct{})
	go func() { r.running.Wait(); close(finished) }()
	r.mu.Lock()
	running := len(r.flights)
	r.mu.Unlock()
	if running > 0 {
		r.logf("stopping: waiting up to %s for %d running tasks", r.w.opts.ShutdownGrace, running)
	}
	grace := time.NewTimer(r.w.opts.ShutdownGrace)
	select {
	case <-finished:
	case <-grace.C:
	}
	grace.Stop()
	r.mu.Lock()
	var still []*flight
	for f := range r.flights {
		select {
		case <-f.ended:
		default:
			still = append(still, f)
		}
	}
	r.mu.Unlock()
	for _, f := range still {
		r.release(f, "the worker is stopping")
		f.cancel()
	}
	// the results of finished tasks still go out (bounded: the server may be away)
	flush := time.Now().Add(5 * time.Second)
	for time.Now().Before(flush) {
		r.mu.Lock()
		waiting := 0
		for f := range r.flights {
			if !f.released.Load() {
				waiting++
			}
		}
		r.mu.Unlock()
		if waiting == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(r.stop)
	r.helpers.Wait()
}
