package ledgerflow

import "time"

// Workflow instance states (WorkflowInstance.State).
const (
	StateRunning     = "RUNNING"
	StateWaiting     = "WAITING"
	StateCancelling  = "CANCELLING"
	StateNeedsReview = "NEEDS_REVIEW"
	StateSucceeded   = "SUCCEEDED"
	StateFailed      = "FAILED"
	StateCancelled   = "CANCELLED"
)

// Control operations (WorkflowControlRequest.Operation).
const (
	ControlPause  = "PAUSE"
	ControlResume = "RESUME"
	ControlCancel = "CANCEL"
)

// StartWorkflowRequest is the body of StartWorkflow (POST /v1/workflows).
type StartWorkflowRequest struct {
	// DefinitionID is the id of a definition of the credential's namespace (32 hex digits). Required.
	DefinitionID string `json:"definition_id"`
	// Version is the pinned version to run (1–64 ASCII characters; "latest" is never resolved). Required.
	Version string `json:"version"`
	// Input is the workflow's input (at most 256 KiB of JSON), checked against the version's
	// input_schema. It is always sent: a nil Input is an explicit JSON null. Pass json.RawMessage,
	// RawJSON or json.Number values to send numbers beyond float64 exactly.
	Input any `json:"input"`
	// BusinessKey is your own key of the workflow (at most 191 characters, trailing spaces kept);
	// omitted when empty (the server's default is ""). It is not an idempotency key.
	BusinessKey string `json:"business_key,omitempty"`
}

// WorkflowInstance is a workflow as the API answers it (the start, control and read answers).
type WorkflowInstance struct {
	ID                  string `json:"id"`                    // the workflow's id: 32 lowercase hex digits
	NamespaceID         string `json:"namespace_id"`          // the namespace it belongs to (the credential's)
	DefinitionID        string `json:"definition_id"`         // the definition it runs
	DefinitionVersionID string `json:"definition_version_id"` // the id of the pinned version
	Version             string `json:"version"`               // the pinned version's name, e.g. "v1"
	// State is one of the State* constants; Paused is a separate flag.
	State string `json:"state"`
	// Revision grows with every change of the workflow (a decimal string on the wire).
	Revision uint64 `json:"revision,string"`
	// Paused: a PAUSE is in force (no new work is granted; results in flight are still collected).
	Paused bool `json:"paused"`
	// ControlRevision grows with every control decision; ControlWorkflow takes the one you read.
	ControlRevision uint64 `json:"control_revision,string"`
	// Input is the workflow's input as it was started (always present; may be an explicit null).
	Input RawJSON `json:"input"`
	// BusinessKey is the key given at the start ("" when none was given).
	BusinessKey string `json:"business_key"`
	// DeadlineAt is the workflow's overall deadline, fixed at the start.
	DeadlineAt time.Time `json:"deadline_at"`
	CreatedAt  time.Time `json:"created_at"` // when it was started
	UpdatedAt  time.Time `json:"updated_at"` // when it last changed (its revision with it)
	// Output is the workflow's output: absent (IsAbsent) until it has one; a succeeded workflow's
	// output may be an explicit null (IsNull).
	Output RawJSON `json:"output,omitempty"`
	// CancelRequestedAt is when a CANCEL was requested; nil when none was.
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
	// StopKind is CANCEL or FAILURE once the workflow is being stopped or has stopped; "" otherwise.
	StopKind string `json:"stop_kind,omitempty"`
	// StopRequestedAt is when the stop (StopKind) began; nil when none did.
	StopRequestedAt *time.Time `json:"stop_requested_at,omitempty"`
	// CompletedAt is when the workflow finished (SUCCEEDED, FAILED, CANCELLED); nil before.
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// ScheduleID is the schedule that launched the workflow; "" when it was started otherwise.
	ScheduleID string `json:"schedule_id,omitempty"`
	// ScheduleFireAt is the fire time a schedule launched it for; nil when no schedule did.
	ScheduleFireAt *time.Time `json:"schedule_fire_at,omitempty"`
}

// Finished reports whether the workflow is SUCCEEDED, FAILED or CANCELLED.
func (w *WorkflowInstance) Finished() bool {
	return w.State == StateSucceeded || w.State == StateFailed || w.State == StateCancelled
}

// StartWorkflowResponse is StartWorkflow's answer. A start resent with the same key and body
// answers the snapshot of the first acceptance again (Deduplicated true, HTTP 200 instead of 201):
// it is not the current state, read that with GetWorkflow.
type StartWorkflowResponse struct {
	Instance     WorkflowInstance `json:"instance"`     // the workflow as it was when this key's start was accepted
	Deduplicated bool             `json:"deduplicated"` // true: the stored first answer of this key
}

// WorkflowSteps is GetWorkflowSteps' answer: the steps ordered by key (at most 128, the internal
// root step not included) and the workflow's revision read in the same transaction.
type WorkflowSteps struct {
	InstanceID string         `json:"instance_id"`     // the workflow's id
	Revision   uint64         `json:"revision,string"` // the workflow's revision
	Steps      []WorkflowStep `json:"steps"`           // ordered by key
}

// WorkflowStep is one step with its current activation.
type WorkflowStep struct {
	ID   string `json:"id"`   // the step's id
	Key  string `json:"key"`  // the step's key in the definition
	Kind string `json:"kind"` // TASK, SIGNAL, TIMER, POLL, SUBWORKFLOW or TRIGGER
	// State: BLOCKED, ACTIVE, WAITING, SUCCEEDED, FAILED, CANCELLED, NEEDS_REVIEW or SKIPPED.
	State    string `json:"state"`
	Revision uint64 `json:"revision,string"` // the step's own revision
	// ActivationID is the current activation's id; "" while the step was never activated.
	ActivationID string `json:"activation_id,omitempty"`
	// ActivationSequence is the current activation's sequence (1, 2, ... after a recovery), which
	// a signal targets; nil while the step was never activated.
	ActivationSequence *uint32 `json:"activation_sequence,omitempty"`
	// TaskID is a TASK step's current task; "" for other kinds and before activation.
	TaskID string `json:"task_id,omitempty"`
}

// WorkflowStepDetail is GetWorkflowStep's answer: one step and its current activation.
type WorkflowStepDetail struct {
	InstanceID string       `json:"instance_id"`     // the workflow's id
	Revision   uint64       `json:"revision,string"` // the workflow's revision, read with the step
	Step       WorkflowStep `json:"step"`            // the step and its current activation
	// Input of the current activation; absent before activation. An explicit null is kept.
	Input RawJSON `json:"input,omitempty"`
	// Output of the current activation; absent while there is none. An explicit null is kept.
	Output RawJSON `json:"output,omitempty"`
	// Error of the current activation ({code, message, ...}); absent while there is none.
	Error RawJSON `json:"error,omitempty"`
	// ActivatedAt is when the current activation began; nil before the first activation.
	ActivatedAt *time.Time `json:"activated_at,omitempty"`
	// CompletedAt is when the current activation ended; nil while it runs or waits.
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// Poll is a POLL step's progress; nil for other kinds.
	Poll *PollProgress `json:"poll,omitempty"`
	// Wait is the current wait of a SIGNAL or TIMER step (and a POLL with a final signal); nil otherwise.
	Wait *StepWait `json:"wait,omitempty"`
	// ChildWorkflowID is a SUBWORKFLOW step's child; "" otherwise.
	ChildWorkflowID string `json:"child_workflow_id,omitempty"`
	// NextAttemptAt is when a TASK step waiting out its retry backoff tries again; nil otherwise.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

// PollProgress is a POLL step's rounds.
type PollProgress struct {
	UsedRounds             int        `json:"used_rounds"`               // rounds run so far
	FirstRound             int        `json:"first_round"`               // the current activation's first round
	FirstRoundAttemptsUsed int        `json:"first_round_attempts_used"` // attempts its first round used
	MaxRounds              int        `json:"max_rounds"`                // the definition's round limit
	MaxAttemptsPerRound    int        `json:"max_attempts_per_round"`    // the definition's attempts per round
	IntervalMS             int64      `json:"interval_ms"`               // the wait between rounds
	DeadlineAt             *time.Time `json:"deadline_at,omitempty"`     // nil when the poll has no deadline
	LastTaskID             string     `json:"last_task_id,omitempty"`    // the current activation's last round's task
	CurrentTaskID          string     `json:"current_task_id,omitempty"` // the round running now; "" between rounds
	NextPollAt             *time.Time `json:"next_poll_at,omitempty"`    // when the next round starts; nil when none is due
	ResolvedAt             *time.Time `json:"resolved_at,omitempty"`     // when the poll ended; nil before
}

// StepWait is the current wait of a step (a signal or a timer).
type StepWait struct {
	ID    string `json:"id"`    // the wait's id (a consumed signal names it: ConsumedWaitID)
	Kind  string `json:"kind"`  // SIGNAL, TIMER, ...
	State string `json:"state"` // WAITING, RESOLVED, ...
	// Name and PayloadVersion of the awaited signal; "" for a TIMER.
	Name           string     `json:"name,omitempty"`
	PayloadVersion string     `json:"payload_version,omitempty"`  // "" for a TIMER
	CorrelationKey string     `json:"correlation_key,omitempty"`  // matched exactly (trailing spaces too)
	DeadlineAt     *time.Time `json:"deadline_at,omitempty"`      // the wait's original deadline; nil when none
	WinnerSignalID string     `json:"winner_signal_id,omitempty"` // the signal that resolved it; "" before
	ResolvedAt     *time.Time `json:"resolved_at,omitempty"`      // when it was resolved; nil before
}

// WorkflowControlRequest is the body of ControlWorkflow.
type WorkflowControlRequest struct {
	// Operation: ControlPause, ControlResume or ControlCancel. Required.
	Operation string `json:"operation"`
	// ExpectedControlRevision is the non-zero ControlRevision you read (a decimal string on the
	// wire); a stale one is 409 STATE_CONFLICT.
	ExpectedControlRevision uint64 `json:"expected_control_revision,string"`
	// Reason: why (audited), 1–1024 characters, not all whitespace.
	Reason string `json:"reason"`
}

// WorkflowControlResponse is ControlWorkflow's answer: the workflow after the decision. Resent with
// the same key it answers the first decision again (Deduplicated).
type WorkflowControlResponse struct {
	Instance     WorkflowInstance `json:"instance"`     // the workflow after the decision (ControlRevision grown)
	Deduplicated bool             `json:"deduplicated"` // true: the stored first answer of this key
}

// SendWorkflowSignalRequest is the body of SendWorkflowSignal.
type SendWorkflowSignalRequest struct {
	Name                     string `json:"name"`                       // the signal's name (≤128 name characters). Required.
	PayloadVersion           string `json:"payload_version"`            // its payload contract's version (≤32). Required.
	TargetStepKey            string `json:"target_step_key"`            // the SIGNAL step it is for (≤64). Required.
	TargetActivationSequence uint32 `json:"target_activation_sequence"` // the step's ActivationSequence (1 before the first activation). Required.
	CorrelationKey           string `json:"correlation_key"`            // 1–512 bytes, matched exactly (trailing spaces too). Required.
	// Payload is always sent (a nil Payload is an explicit null, valid where the contract allows it).
	Payload any `json:"payload"`
	// Reason: why (audited), 1–1024 characters. Required.
	Reason string `json:"reason"`
	// EvidenceRef is a reference to your evidence (≤512 characters, no whitespace); omitted when "".
	EvidenceRef string `json:"evidence_ref,omitempty"`
}

// WorkflowSignal is an accepted signal.
type WorkflowSignal struct {
	ID                       string  `json:"id"`                         // the signal's id (GetWorkflowSignal takes it)
	NamespaceID              string  `json:"namespace_id"`               // the workflow's namespace
	WorkflowID               string  `json:"workflow_id"`                // the workflow it was sent to
	Revision                 uint64  `json:"revision,string"`            // the signal's revision (grows as its state changes)
	Name                     string  `json:"name"`                       // as sent
	PayloadVersion           string  `json:"payload_version"`            // as sent
	TargetStepKey            string  `json:"target_step_key"`            // as sent
	TargetActivationSequence uint32  `json:"target_activation_sequence"` // as sent
	CorrelationKey           string  `json:"correlation_key"`            // as sent (trailing spaces kept)
	Payload                  RawJSON `json:"payload"`                    // as sent (may be an explicit null)
	ActorID                  string  `json:"actor_id"`                   // the credential that sent it
	// State: PENDING, then CONSUMED, REJECTED or EXPIRED.
	State      string    `json:"state"`
	AcceptedAt time.Time `json:"accepted_at"` // when it was accepted
	ExpiresAt  time.Time `json:"expires_at"`  // a PENDING signal expires then (EXPIRED)
	// EvidenceRef as sent; "" when none was.
	EvidenceRef string `json:"evidence_ref,omitempty"`
	// Disposition says why a signal was REJECTED (e.g. CORRELATION_MISMATCH, WAIT_CLOSED,
	// STALE_ACTIVATION); "" otherwise.
	Disposition string `json:"disposition,omitempty"`
	// ConsumedWaitID is the wait that consumed it; "" unless CONSUMED.
	ConsumedWaitID string `json:"consumed_wait_id,omitempty"`
}

// SendWorkflowSignalResponse is SendWorkflowSignal's answer. Resent with the same key it answers
// the first acceptance's snapshot again (Deduplicated).
type SendWorkflowSignalResponse struct {
	Signal       WorkflowSignal `json:"signal"`       // the signal as it was accepted
	Deduplicated bool           `json:"deduplicated"` // true: the stored first answer of this key
}

// WorkflowOperation is one entry of a workflow's operation audit. The list leaves out Reason,
// EvidenceRef, Before and After; GetWorkflowOperation reads them.
type WorkflowOperation struct {
	ID          string    `json:"id"`           // the audit entry's id (GetWorkflowOperation takes it)
	WorkflowID  string    `json:"workflow_id"`  // the workflow
	OperationID string    `json:"operation_id"` // the operation (one request may write several entries)
	ActorID     string    `json:"actor_id"`     // who did it (a credential id, or the engine)
	Action      string    `json:"action"`       // e.g. workflow.started, workflow.control.pause
	CreatedAt   time.Time `json:"created_at"`   // when it happened
	// SignalID is set on signal-resource audit entries only.
	SignalID string `json:"signal_id,omitempty"`
	// Reason given with the operation; "" when none (and always in list items).
	Reason string `json:"reason,omitempty"`
	// EvidenceRef given with the operation; "" when none (and always in list items).
	EvidenceRef string `json:"evidence_ref,omitempty"`
	// Before is a JSON summary of the state before the operation: absent in list items, an
	// explicit null in GetWorkflowOperation when there was none (a start).
	Before RawJSON `json:"before,omitempty"`
	// After is a JSON summary of the state after the operation: absent in list items, possibly an
	// explicit null in GetWorkflowOperation.
	After RawJSON `json:"after,omitempty"`
}
