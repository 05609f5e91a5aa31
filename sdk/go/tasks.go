package ledgerflow

import (
	"context"
	"net/http"
	"time"
)

// Protocol bounds of the task API (X-TASK).
const (
	MaxClaim          = 16         // tasks per claim (max_tasks)
	MaxBatch          = 16         // completions per CompleteTasks request
	MaxOutputBytes    = 256 * 1024 // a task's output as JSON
	MaxWaitSeconds    = 30         // a claim's long poll
	maxErrorMessage   = 4096       // a failure's message
	batchBodyBudget   = 448 * 1024 // a completion request stays under the API's 512 KiB body limit
	handBackTimeout   = 10 * time.Second
	resultRetryPeriod = time.Second
)

// Task is a task as the task API answers it. A claimed task carries what its handler needs (ID,
// Queue, Epoch, WorkflowID, StepKey, Input, Attempt, DeadlineAt, LeaseExpiresAt); a task read or
// settled also carries its State and times.
type Task struct {
	ID         string `json:"id"`          // the task's id (32 hex digits)
	Queue      string `json:"queue"`       // the queue it was claimed from
	WorkflowID string `json:"workflow_id"` // the workflow it belongs to
	StepKey    string `json:"step_key"`    // the step it runs
	// Epoch grows with every claim; every heartbeat, completion, failure and release names it (an
	// old epoch is 409 STATE_CONFLICT: the lease was lost).
	Epoch int64 `json:"epoch"`
	// Attempt is the step's attempt this task is (1 first, more after retries).
	Attempt int `json:"attempt"`
	// Input is the step's input; absent in answers that leave it out (e.g. settling a task).
	Input RawJSON `json:"input,omitempty"`
	// DeadlineAt is when the task times out.
	DeadlineAt time.Time `json:"deadline_at"`
	// LeaseExpiresAt is when the claim's lease ends unless heartbeaten; nil when the task holds no lease.
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	// PollRound is a POLL step's round; nil for other steps.
	PollRound *int `json:"poll_round,omitempty"`
	// State (PENDING, CLAIMED, COMPLETED, FAILED, ...): "" in claim answers.
	State string `json:"state,omitempty"`
	// Output of a completed task; absent otherwise (an explicit null is kept).
	Output RawJSON `json:"output,omitempty"`
	// Error of a failed task ({message, retryable}); absent otherwise.
	Error       RawJSON    `json:"error,omitempty"`
	CreatedAt   *time.Time `json:"created_at,omitempty"`   // nil in claim answers
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`   // nil in claim answers
	CompletedAt *time.Time `json:"completed_at,omitempty"` // when it was settled; nil before
}

// ClaimRequest is the body of ClaimTasks.
type ClaimRequest struct {
	Queues      []string `json:"queues"`       // the queues to take tasks of. Required.
	WaitSeconds int      `json:"wait_seconds"` // long-poll up to this long (0–30) when nothing is due
	MaxTasks    int      `json:"max_tasks"`    // 1–16 (0 is sent as 1)
	// Worker names the claiming worker; the server keeps it on the attempts claimed (nil: none).
	Worker *WorkerIdentity `json:"worker,omitempty"`
}

// CompletionItem is one completion of CompleteTasks.
type CompletionItem struct {
	ID     string `json:"id"`     // the task (each task once per request)
	Epoch  int64  `json:"epoch"`  // the epoch it was claimed at
	Output any    `json:"output"` // the step's output (a nil Output is an explicit null)
}

// ClaimNext is CompleteTasksRequest's optional claim.
type ClaimNext struct {
	Queues   []string `json:"queues"`    // the queues to take tasks of
	MaxTasks int      `json:"max_tasks"` // 1–16
	// Worker names the claiming worker (nil: none), as ClaimRequest.Worker.
	Worker *WorkerIdentity `json:"worker,omitempty"`
}

// CompleteTasksRequest is the body of CompleteTasks: 1–16 completions (each task once) and,
// optionally, a claim made after them in the same request (no waiting).
type CompleteTasksRequest struct {
	Tasks []CompletionItem `json:"tasks"`           // 1–16 completions, applied in this order
	Claim *ClaimNext       `json:"claim,omitempty"` // nil: claim nothing
}

// CompletionResult answers one item of CompleteTasks: Status 200 with the completed Task
// (Replayed: this completion had been applied before), or the status and error this item alone
// would get (404 NOT_FOUND, 409 STATE_CONFLICT).
type CompletionResult struct {
	ID       string `json:"id"`                 // the item's task
	Status   int    `json:"status"`             // 200, or the status this item alone would get
	Task     *Task  `json:"task,omitempty"`     // the completed task (status 200); nil otherwise
	Replayed bool   `json:"replayed,omitempty"` // true: this completion had been applied before
	// Error is why the item was refused (status 404 or 409); nil with status 200.
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// CompleteTasksResponse: one result per item, in the request's order, and the claimed tasks.
type CompleteTasksResponse struct {
	Results []CompletionResult `json:"results"`           // one per item, in the request's order
	Claimed []Task             `json:"claimed,omitempty"` // the tasks the claim took (none without Claim)
}

type taskAnswer struct {
	Task Task `json:"task"`
}

// ClaimTasks claims tasks of queues (POST /v1/tasks/claim; tasks:work). Resent with the same key it
// claims nothing new and answers the same tasks at the same epochs, so after an *UnknownOutcomeError
// resend it with the error's key to get the tasks it may have claimed.
func (c *Client) ClaimTasks(ctx context.Context, key string, req ClaimRequest) ([]Task, error) {
	if req.MaxTasks == 0 {
		req.MaxTasks = 1
	}
	var out struct {
		Tasks []Task `json:"tasks"`
	}
	// an attempt waits for the long poll and then some
	longPoll := time.Duration(req.WaitSeconds)*time.Second + 10*time.Second
	cl := call{method: http.MethodPost, path: "/v1/tasks/claim", body: req, key: key, timeout: longPoll}
	if _, err := c.do(ctx, cl, &out); err != nil {
		return nil, err
	}
	return out.Tasks, nil
}

func (c *Client) taskCall(ctx context.Context, id, action, key string, body any) (*Task, error) {
	var out taskAnswer
	path := "/v1/tasks/" + seg(id) + "/" + action
	if _, err := c.do(ctx, call{method: http.MethodPost, path: path, body: body, key: key}, &out); err != nil {
		return nil, err
	}
	return &out.Task, nil
}

type epochBody struct {
	Epoch int64 `json:"epoch"`
}

// HeartbeatTask extends the lease of a claimed task (POST /v1/tasks/{id}/heartbeat). 409
// STATE_CONFLICT or 404 NOT_FOUND: the lease is lost (stop working on the task).
func (c *Client) HeartbeatTask(ctx context.Context, id, key string, epoch int64) (*Task, error) {
	return c.taskCall(ctx, id, "heartbeat", key, epochBody{epoch})
}

// CompleteTask completes a claimed task with its output (POST /v1/tasks/{id}/complete). Resending a
// completion that was applied (same epoch, same output) answers 200 again, whatever the key.
func (c *Client) CompleteTask(ctx context.Context, id, key string, epoch int64, output any) (*Task, error) {
	return c.taskCall(ctx, id, "complete", key, struct {
		Epoch  int64 `json:"epoch"`
		Output any   `json:"output"`
	}{epoch, output})
}

// TaskError is why a task failed (FailRequest.Error).
type TaskError struct {
	// Message: at most 4096 characters (FailTaskWith cuts a longer one).
	Message string `json:"message"`
	// Retryable lets the step's retry policy try again.
	Retryable bool `json:"retryable"`
	// Type is the error's type, at most MaxErrorTypeChars characters ("": not sent). A TaskWorker
	// sends ErrorTypeOf(err).
	Type string `json:"type,omitempty"`
	// Stack is a stack trace, at most MaxStackChars characters (FailTaskWith bounds a longer one
	// with BoundedStack; "": not sent).
	Stack string `json:"stack,omitempty"`
}

// FailRequest is the body of FailTaskWith. The server keeps Error.Type, Error.Stack and Worker
// with the attempt that failed (the step's rounds: failure {type, message, stack, worker}).
type FailRequest struct {
	Epoch  int64           `json:"epoch"`            // the epoch the task was claimed at
	Error  TaskError       `json:"error"`            // why it failed
	Worker *WorkerIdentity `json:"worker,omitempty"` // the failing worker (nil: none)
}

// FailTask fails a claimed task (POST /v1/tasks/{id}/fail): retryable lets the step's retry policy
// try again; message is at most 4096 characters (longer ones are cut). FailTaskWith also sends the
// error's type, a stack trace and the worker's identity.
func (c *Client) FailTask(ctx context.Context, id, key string, epoch int64, message string, retryable bool) (*Task, error) {
	return c.FailTaskWith(ctx, id, key, FailRequest{Epoch: epoch, Error: TaskError{Message: message, Retryable: retryable}})
}

// FailTaskWith fails a claimed task with req (POST /v1/tasks/{id}/fail). What is over the API's
// bounds is cut to them rather than refused: the message to 4096 characters, the type to
// MaxErrorTypeChars, the stack with BoundedStack (NUL characters are replaced).
func (c *Client) FailTaskWith(ctx context.Context, id, key string, req FailRequest) (*Task, error) {
	req.Error.Message = cut(clean(req.Error.Message), maxErrorMessage)
	req.Error.Type = cut(clean(req.Error.Type), MaxErrorTypeChars)
	req.Error.Stack = BoundedStack(req.Error.Stack)
	return c.taskCall(ctx, id, "fail", key, req)
}

// ReleaseTask hands a claimed task back to its queue now (POST /v1/tasks/{id}/release): its lease
// ends, it is due again at once, no attempt is counted.
func (c *Client) ReleaseTask(ctx context.Context, id, key string, epoch int64) (*Task, error) {
	return c.taskCall(ctx, id, "release", key, epochBody{epoch})
}

// CompleteTasks completes up to 16 claimed tasks in one request and, with req.Claim, then claims
// up to Claim.MaxTasks tasks in the same request (POST /v1/tasks/complete). Each item is answered
// on its own: a stale epoch is a 409 item, not an error of the call. The whole request may be resent
// after an unknown outcome (completions are idempotent per task; the claim per key).
func (c *Client) CompleteTasks(ctx context.Context, key string, req CompleteTasksRequest) (*CompleteTasksResponse, error) {
	var out CompleteTasksResponse
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/tasks/complete", body: req, key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTask reads a task (GET /v1/tasks/{id}; tasks:work).
func (c *Client) GetTask(ctx context.Context, id string) (*Task, error) {
	var out Task
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/tasks/" + seg(id)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
