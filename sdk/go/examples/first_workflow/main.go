// Command first_workflow is examples/first_workflow.py in Go: define a workflow of two TASK steps,
// run a task worker for them, start a workflow and wait for it to finish.
//
//	cd sdk/go && go run ./examples/first_workflow
//
// Needs a running server (`make run`) and LEDGERFLOW_TOKEN; the address is LEDGERFLOW_URL (default
// http://127.0.0.1:5000). Safe to run again.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	ledgerflow "github.com/ledgerflow/ledgerflow/sdk/go"
)

// definition is the document of examples/first_workflow.py: "greet", then "note".
const definition = `{
  "version": "v1",
  "description": "Greet someone, then write them a note.",
  "input_schema": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
  "deadline_seconds": 600,
  "steps": [
    {"key": "greet", "kind": "TASK", "queue": "hello.greet", "input": {"name": "$.input.name"}},
    {"key": "note", "kind": "TASK", "queue": "hello.note", "after": ["greet"],
     "input": {"greeting": "$.steps.greet.output.text"}}
  ],
  "output": {"greeting": "$.steps.greet.output.text", "note": "$.steps.note.output.text"}
}`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := ledgerflow.NewClientFromEnv() // LEDGERFLOW_URL and LEDGERFLOW_TOKEN

	worker := ledgerflow.NewTaskWorker(client, ledgerflow.WorkerOptions{PollWait: time.Second})
	worker.Register("hello.greet", func(ctx context.Context, t *ledgerflow.Task) (any, error) {
		var in struct{ Name string }
		if err := t.Input.Decode(&in); err != nil {
			return nil, ledgerflow.NonRetryable(err)
		}
		return map[string]string{"text": "Hello, " + in.Name + "!"}, nil // the step's output
	})
	worker.Register("hello.note", func(ctx context.Context, t *ledgerflow.Task) (any, error) {
		var in struct{ Greeting string }
		if err := t.Input.Decode(&in); err != nil {
			return nil, ledgerflow.NonRetryable(err)
		}
		return map[string]string{"text": in.Greeting + " Your first workflow ran."}, nil
	})

	definitionID, err := ensureDefinition(ctx, client, "hello")
	if err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(workerCtx) }()

	started, err := client.StartWorkflow(ctx, "", ledgerflow.StartWorkflowRequest{
		DefinitionID: definitionID, Version: "v1", Input: map[string]string{"name": "Ada"},
	})
	if err != nil {
		return err
	}
	fmt.Println("started workflow", started.Instance.ID)
	wf, err := client.WaitForWorkflow(ctx, started.Instance.ID, 0)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s\n", wf.State, wf.Output)
	stopWorker()
	return <-workerDone
}

// ensureDefinition creates the definition unless it exists and publishes v1 unless it is published.
func ensureDefinition(ctx context.Context, client *ledgerflow.Client, name string) (string, error) {
	found, err := client.ListDefinitions(ctx, name, ledgerflow.PageRequest{Limit: 1})
	if err != nil {
		return "", err
	}
	var def ledgerflow.Definition
	if len(found.Items) > 0 {
		def = found.Items[0]
	} else {
		created, err := client.CreateDefinition(ctx, "", ledgerflow.CreateDefinitionRequest{Name: name})
		if err != nil {
			return "", err
		}
		def = created.Definition
	}
	for _, v := range def.Versions {
		if v.Version == "v1" {
			return def.ID, nil
		}
	}
	if _, err := client.PublishVersion(ctx, def.ID, "", json.RawMessage(definition)); err != nil {
		return "", err
	}
	fmt.Printf("definition %s (%s)\n", def.Name, def.ID)
	return def.ID, nil
}
