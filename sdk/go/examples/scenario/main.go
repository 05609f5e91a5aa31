// Command scenario runs Ledgerflow's SDK scenario with the Go SDK against the server at
// LEDGERFLOW_URL with LEDGERFLOW_TOKEN (a credential with every workflow permission): publish a
// definition, start a workflow, serve its tasks with a TaskWorker, pause and resume it, send it a
// signal, read its steps, operations and one operation, and check that a replayed start answers the
// first snapshot. Two workflows of a second definition fail in the worker (an error that names its
// type, and a panic): the test reads their attempts back with the type, stack and worker identity. It prints one JSON object of what it saw (tests/sdk/test_go_sdk.py checks it) and
// exits 1 with one line on stderr when anything fails.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	ledgerflow "github.com/ledgerflow/ledgerflow/sdk/go"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := ledgerflow.NewClientFromEnv()
	name := "go-scenario-" + ledgerflow.NewIdempotencyKey()[:8]
	queue := "go-" + ledgerflow.NewIdempotencyKey()[:8]

	// publish a definition: a task, a signal wait, a second task
	def, err := client.CreateDefinition(ctx, "", ledgerflow.CreateDefinitionRequest{Name: name})
	if err != nil {
		return fmt.Errorf("create definition: %w", err)
	}
	document := map[string]any{
		"version": "v1", "input_schema": map[string]any{}, "deadline_seconds": 600,
		"signals": []any{map[string]any{"name": "done", "payload_version": "v1",
			"schema": map[string]any{"type": "object", "required": []any{"ok"}}}},
		"steps": []any{
			map[string]any{"key": "prep", "kind": "TASK", "queue": queue, "input": "$.input"},
			map[string]any{"key": "receipt", "kind": "SIGNAL", "after": []any{"prep"}, "signal": "done",
				"payload_version": "v1", "correlation": "$.input.order", "timeout_seconds": 300},
			map[string]any{"key": "ship", "kind": "TASK", "queue": queue, "after": []any{"receipt"},
				"input": "$.steps.receipt.output"},
		},
		"output": map[string]any{"prep": "$.steps.prep.output", "ship": "$.steps.ship.output"},
	}
	if _, err := client.PublishVersion(ctx, def.Definition.ID, "", document); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	versions, err := client.ListDefinitionVersions(ctx, def.Definition.ID, ledgerflow.PageRequest{})
	if err != nil {
		return fmt.Errorf("list versions: %w", err)
	}

	// a definition whose one task fails in the worker (no retry)
	failQueue := queue + "-fail"
	failDef, err := client.CreateDefinition(ctx, "", ledgerflow.CreateDefinitionRequest{Name: name + "-fail"})
	if err != nil {
		return fmt.Errorf("create definition: %w", err)
	}
	if _, err := client.PublishVersion(ctx, failDef.Definition.ID, "", map[string]any{
		"version": "v1", "input_schema": map[string]any{}, "deadline_seconds": 600,
		"steps": []any{map[string]any{"key": "charge", "kind": "TASK", "queue": failQueue, "input": "$.input"}},
	}); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	failing := map[string]string{} // mode -> workflow id
	for _, mode := range []string{"error", "panic"} {
		s, err := client.StartWorkflow(ctx, "", ledgerflow.StartWorkflowRequest{
			DefinitionID: failDef.Definition.ID, Version: "v1", Input: map[string]any{"mode": mode}})
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		failing[mode] = s.Instance.ID
	}

	// start it with our own key (so that it can be resent)
	startKey := "start-" + ledgerflow.NewIdempotencyKey()
	startReq := ledgerflow.StartWorkflowRequest{
		DefinitionID: def.Definition.ID, Version: "v1", BusinessKey: "A-1 ",
		Input: json.RawMessage(`{"order": "A-1 ", "n": 9007199254740993}`),
	}
	started, err := client.StartWorkflow(ctx, startKey, startReq)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	id := started.Instance.ID

	// serve its tasks with the Go TaskWorker
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	worker := ledgerflow.NewTaskWorker(client, ledgerflow.WorkerOptions{Concurrency: 4, PollWait: 2 * time.Second})
	handled := make(chan string, 8)
	worker.Register(queue, func(ctx context.Context, t *ledgerflow.Task) (any, error) {
		handled <- t.StepKey
		if t.StepKey == "prep" {
			var in struct {
				N json.Number `json:"n"`
			}
			if err := t.Input.Decode(&in); err != nil {
				return nil, ledgerflow.NonRetryable(err)
			}
			return map[string]any{"prepared": true, "n": in.N}, nil
		}
		return map[string]any{"shipped": true, "receipt": t.Input}, nil
	})
	worker.Register(failQueue, func(ctx context.Context, t *ledgerflow.Task) (any, error) {
		var in struct {
			Mode string `json:"mode"`
		}
		if err := t.Input.Decode(&in); err != nil {
			return nil, err
		}
		if in.Mode == "panic" {
			return chargeCard(nil), nil // index out of range: the worker recovers and reports it
		}
		return nil, ledgerflow.NonRetryable(fmt.Errorf("charging: %w", &cardDeclined{code: "51"}))
	})
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(workerCtx) }()

	receipt, err := waitFor(ctx, func() (*ledgerflow.WorkflowStepDetail, bool, error) {
		s, err := client.GetWorkflowStep(ctx, id, "receipt")
		return s, err == nil && s.Step.State == "WAITING", err
	})
	if err != nil {
		return fmt.Errorf("waiting for the receipt step: %w", err)
	}

	// pause and resume on the control revision read
	current, err := client.GetWorkflow(ctx, id)
	if err != nil {
		return err
	}
	paused, err := client.ControlWorkflow(ctx, id, "", ledgerflow.WorkflowControlRequest{
		Operation: ledgerflow.ControlPause, ExpectedControlRevision: current.ControlRevision, Reason: "maintenance window"})
	if err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	_, staleErr := client.ControlWorkflow(ctx, id, "", ledgerflow.WorkflowControlRequest{
		Operation: ledgerflow.ControlResume, ExpectedControlRevision: current.ControlRevision, Reason: "stale read"})
	resumed, err := client.ControlWorkflow(ctx, id, "", ledgerflow.WorkflowControlRequest{
		Operation: ledgerflow.ControlResume, ExpectedControlRevision: paused.Instance.ControlRevision, Reason: "window over"})
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}

	// the signal the receipt step waits for
	signalKey := "sig-" + ledgerflow.NewIdempotencyKey()
	signalReq := ledgerflow.SendWorkflowSignalRequest{
		Name: "done", PayloadVersion: "v1", TargetStepKey: "receipt",
		TargetActivationSequence: *receipt.Step.ActivationSequence, CorrelationKey: "A-1 ",
		Payload: json.RawMessage(`{"ok": true, "big": 18446744073709551617}`), Reason: "verified the receipt",
		EvidenceRef: "evidence:receipt-001",
	}
	sent, err := client.SendWorkflowSignal(ctx, id, signalKey, signalReq)
	if err != nil {
		return fmt.Errorf("signal: %w", err)
	}
	done, err := client.WaitForWorkflow(ctx, id, 100*time.Millisecond)
	if err != nil {
		return fmt.Errorf("waiting for the end: %w", err)
	}
	signal, err := client.GetWorkflowSignal(ctx, id, sent.Signal.ID)
	if err != nil {
		return err
	}
	resent, err := client.SendWorkflowSignal(ctx, id, signalKey, signalReq)
	if err != nil {
		return fmt.Errorf("signal again: %w", err)
	}

	failedStates := map[string]string{}
	for mode, wid := range failing {
		ended, err := client.WaitForWorkflow(ctx, wid, 100*time.Millisecond)
		if err != nil {
			return fmt.Errorf("waiting for the failing workflow: %w", err)
		}
		failedStates[mode] = ended.State
	}

	stopWorker()
	if err := <-workerDone; err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	close(handled)
	var handledSteps []string
	for s := range handled {
		handledSteps = append(handledSteps, s)
	}

	steps, err := client.GetWorkflowSteps(ctx, id)
	if err != nil {
		return err
	}
	ops, err := client.ListWorkflowOperations(ctx, id, ledgerflow.HistoryPageRequest{Limit: 100})
	if err != nil {
		return err
	}
	var pauseOp *ledgerflow.WorkflowOperation
	for _, o := range ops.Items {
		if o.Action == "workflow.control.pause" {
			if pauseOp, err = client.GetWorkflowOperation(ctx, id, o.ID); err != nil {
				return err
			}
		}
	}
	replayed, err := client.StartWorkflow(ctx, startKey, startReq)
	if err != nil {
		return fmt.Errorf("replayed start: %w", err)
	}
	startReq.BusinessKey = "B-2"
	_, conflict := client.StartWorkflow(ctx, startKey, startReq)
	listed, err := client.ListWorkflows(ctx, ledgerflow.ListWorkflowsRequest{DefinitionID: def.Definition.ID, BusinessKey: "A-1 ", Limit: 10})
	if err != nil {
		return err
	}

	var apiErr *ledgerflow.Error
	staleCode, conflictCode := "", ""
	if errors.As(staleErr, &apiErr) {
		staleCode = apiErr.Code
	}
	if errors.As(conflict, &apiErr) {
		conflictCode = apiErr.Code
	}
	stepStates := map[string]string{}
	for _, s := range steps.Steps {
		stepStates[s.Key] = s.State
	}
	var actions []string
	for _, o := range ops.Items {
		actions = append(actions, o.Action)
	}
	summary := map[string]any{
		"workflow_id":              id,
		"versions":                 len(versions.Items),
		"first_state":              started.Instance.State,
		"first_revision":           fmt.Sprint(started.Instance.Revision),
		"first_deduplicated":       started.Deduplicated,
		"paused":                   paused.Instance.Paused,
		"paused_control_revision":  fmt.Sprint(paused.Instance.ControlRevision),
		"resumed_paused":           resumed.Instance.Paused,
		"resumed_control_revision": fmt.Sprint(resumed.Instance.ControlRevision),
		"stale_control_code":       staleCode,
		"signal_state":             signal.State,
		"signal_first_state":       sent.Signal.State,
		"signal_replay_dedup":      resent.Deduplicated,
		"signal_replay_id":         resent.Signal.ID == sent.Signal.ID,
		"final_state":              done.State,
		"final_revision":           fmt.Sprint(done.Revision),
		"output":                   done.Output,
		"output_absent_at_start":   started.Instance.Output.IsAbsent(),
		"completed":                done.CompletedAt != nil,
		"steps":                    stepStates,
		"steps_revision":           fmt.Sprint(steps.Revision),
		"handled":                  handledSteps,
		"actions":                  actions,
		"pause_reason":             pauseOp.Reason,
		"pause_actor":              pauseOp.ActorID,
		"pause_has_after":          !pauseOp.After.IsAbsent(),
		"replay_deduplicated":      replayed.Deduplicated,
		"replay_state":             replayed.Instance.State,
		"replay_revision":          fmt.Sprint(replayed.Instance.Revision),
		"replay_updated_at":        replayed.Instance.UpdatedAt.Equal(started.Instance.UpdatedAt),
		"conflict_code":            conflictCode,
		"listed":                   len(listed.Items),
		"failing":                  failing,
		"failed_states":            failedStates,
		"identity":                 ledgerflow.Identity(),
	}
	return json.NewEncoder(os.Stdout).Encode(summary)
}

// waitFor polls get every 100 ms until it says done (or ctx ends).
func waitFor[T any](ctx context.Context, get func() (T, bool, error)) (T, error) {
	for {
		v, ok, err := get()
		if err != nil || ok {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cardDeclined names its type for the failure the worker reports (ledgerflow.ErrorTyper).
type cardDeclined struct{ code string }

func (e *cardDeclined) Error() string     { return "card declined (" + e.code + ")" }
func (e *cardDeclined) ErrorType() string { return "payments.CardDeclined" }

// chargeCard panics with an index out of range when it has no cards.
func chargeCard(cards []string) string { return cards[0] }
