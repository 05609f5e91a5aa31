package ledgerflow

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

// The answers in testdata/recorded are the real server's, byte for byte.

func TestRecordedStartAndItsReplay(t *testing.T) {
	c, _, _ := serve(t, answer{status: 201, file: "recorded/start_201.json"}, answer{status: 200, file: "recorded/start_replayed_200.json"})
	first, err := c.StartWorkflow(context.Background(), "rec-1", StartWorkflowRequest{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.StartWorkflow(context.Background(), "rec-1", StartWorkflowRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first.Deduplicated || !again.Deduplicated || first.Instance.Revision != 2 || first.Instance.ControlRevision != 1 {
		t.Fatalf("%+v %+v", first, again)
	}
	if !reflect.DeepEqual(first.Instance, again.Instance) {
		t.Fatal("the replay is not the first snapshot")
	}
	if first.Instance.CreatedAt.Nanosecond() != 893808000 || first.Instance.CreatedAt.Location() != time.UTC {
		t.Fatal(first.Instance.CreatedAt)
	}
	if !first.Instance.Output.IsAbsent() || first.Instance.BusinessKey != "A-1 " {
		t.Fatalf("%+v", first.Instance)
	}
	var in struct {
		N json.Number `json:"n"`
		Z *int        `json:"z"`
	}
	if err := first.Instance.Input.Decode(&in); err != nil || in.N != "9007199254740993" || in.Z != nil {
		t.Fatal(err, in)
	}
}

func TestRecordedBigRevisions(t *testing.T) {
	c, _, _ := serve(t, answer{status: 200, file: "recorded/workflow_big_revision.json"})
	w, err := c.GetWorkflow(context.Background(), "w")
	if err != nil {
		t.Fatal(err)
	}
	if w.Revision != 9223372036854775807 || w.ControlRevision != 9007199254740993 || w.State != StateSucceeded {
		t.Fatalf("%d %d %s", w.Revision, w.ControlRevision, w.State)
	}
	if w.Output.IsAbsent() || w.Output.IsNull() || string(w.Output) != `{"r":null}` || w.CompletedAt == nil {
		t.Fatalf("%s %v", w.Output, w.CompletedAt)
	}
}

func TestRecordedStepsAndNullOutput(t *testing.T) {
	c, _, _ := serve(t, answer{status: 200, file: "recorded/steps.json"}, answer{status: 200, file: "recorded/step_active.json"},
		answer{status: 200, file: "recorded/step_null_output.json"})
	steps, err := c.GetWorkflowSteps(context.Background(), "w")
	if err != nil || len(steps.Steps) != 1 || steps.Steps[0].TaskID == "" || *steps.Steps[0].ActivationSequence != 1 {
		t.Fatal(err, steps)
	}
	active, err := c.GetWorkflowStep(context.Background(), "w", "t")
	if err != nil || !active.Output.IsAbsent() || active.CompletedAt != nil || active.ActivatedAt == nil {
		t.Fatal(err, active)
	}
	done, err := c.GetWorkflowStep(context.Background(), "w", "t")
	if err != nil || !done.Output.IsNull() || done.CompletedAt == nil || done.Revision != 3 || done.Step.State != "SUCCEEDED" {
		t.Fatal(err, done)
	}
}

func TestRecordedOperations(t *testing.T) {
	c, _, _ := serve(t, answer{status: 200, file: "recorded/operations.json"}, answer{status: 200, file: "recorded/operation.json"})
	page, err := c.ListWorkflowOperations(context.Background(), "w", HistoryPageRequest{})
	if err != nil || len(page.Items) < 3 || page.NextCursor != "" {
		t.Fatal(err, page)
	}
	for _, o := range page.Items {
		if !o.Before.IsAbsent() || !o.After.IsAbsent() || o.CreatedAt.IsZero() || o.Action == "" {
			t.Fatalf("%+v", o) // list items carry no bodies
		}
	}
	op, err := c.GetWorkflowOperation(context.Background(), "w", page.Items[len(page.Items)-1].ID)
	if err != nil || op.Action != "workflow.start" || !op.Before.IsNull() || op.After.IsAbsent() {
		t.Fatal(err, op)
	}
}

func TestRecordedFieldError(t *testing.T) {
	c, _, _ := serve(t, answer{status: 400, file: "recorded/start_400.json"})
	_, err := c.StartWorkflow(context.Background(), "", StartWorkflowRequest{})
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Code != CodeInvalidArgument || apiErr.FieldMessage("extra") != "unknown field" || apiErr.RequestID == "" {
		t.Fatal(err)
	}
}
