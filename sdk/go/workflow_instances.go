package ledgerflow

import (
	"context"
	"net/http"
)

// The nine methods of the workflow-instance API, one per route, with the seed's names. Mutations
// take the Idempotency-Key after the context and the workflow id: "" lets the SDK make one for this
// call (see the package documentation, "Idempotency keys and retries").

// StartWorkflow starts a workflow of a pinned definition version (POST /v1/workflows; scope
// workflows:start, plus tasks:submit when the definition uses task queues). The same key and body
// again answer the first acceptance's snapshot (Deduplicated); another body with that key is
// 409 IDEMPOTENCY_CONFLICT.
func (c *Client) StartWorkflow(ctx context.Context, key string, req StartWorkflowRequest) (*StartWorkflowResponse, error) {
	var out StartWorkflowResponse
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/workflows", body: req, key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetWorkflow reads a workflow (GET /v1/workflows/{id}; workflows:read).
func (c *Client) GetWorkflow(ctx context.Context, id string) (*WorkflowInstance, error) {
	var out WorkflowInstance
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/workflows/" + seg(id)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetWorkflowSteps reads a workflow's steps with their current activations
// (GET /v1/workflows/{id}/steps; workflows:read).
func (c *Client) GetWorkflowSteps(ctx context.Context, id string) (*WorkflowSteps, error) {
	var out WorkflowSteps
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/workflows/" + seg(id) + "/steps"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetWorkflowStep reads one step: its current activation's input, output, error, wait, poll and
// child (GET /v1/workflows/{id}/steps/{key}; workflows:read).
func (c *Client) GetWorkflowStep(ctx context.Context, id, stepKey string) (*WorkflowStepDetail, error) {
	var out WorkflowStepDetail
	path := "/v1/workflows/" + seg(id) + "/steps/" + seg(stepKey)
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ControlWorkflow pauses, resumes or cancels a workflow on the control revision you read
// (POST /v1/workflows/{id}/control; workflows:control). A stale revision is 409 STATE_CONFLICT;
// the same key again answers the first decision (Deduplicated).
func (c *Client) ControlWorkflow(ctx context.Context, id, key string, req WorkflowControlRequest) (*WorkflowControlResponse, error) {
	var out WorkflowControlResponse
	path := "/v1/workflows/" + seg(id) + "/control"
	if _, err := c.do(ctx, call{method: http.MethodPost, path: path, body: req, key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SendWorkflowSignal sends a signal to a SIGNAL step's activation
// (POST /v1/workflows/{id}/signals; workflows:signal). Acceptance and consumption are separate:
// the answer's signal is PENDING, CONSUMED or REJECTED; read it again with GetWorkflowSignal.
func (c *Client) SendWorkflowSignal(ctx context.Context, id, key string, req SendWorkflowSignalRequest) (*SendWorkflowSignalResponse, error) {
	var out SendWorkflowSignalResponse
	path := "/v1/workflows/" + seg(id) + "/signals"
	if _, err := c.do(ctx, call{method: http.MethodPost, path: path, body: req, key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetWorkflowSignal reads a signal as it stands now
// (GET /v1/workflows/{id}/signals/{signal}; workflows:read).
func (c *Client) GetWorkflowSignal(ctx context.Context, id, signalID string) (*WorkflowSignal, error) {
	var out WorkflowSignal
	path := "/v1/workflows/" + seg(id) + "/signals/" + seg(signalID)
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListWorkflowOperations reads one page of a workflow's operation audit, newest first
// (GET /v1/workflows/{id}/operations; workflows:audit:read). Items leave out reason, evidence and
// the before / after summaries: read one entry with GetWorkflowOperation.
func (c *Client) ListWorkflowOperations(ctx context.Context, id string, page HistoryPageRequest) (*Page[WorkflowOperation], error) {
	var out Page[WorkflowOperation]
	path := "/v1/workflows/" + seg(id) + "/operations"
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path, query: page.query(nil)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetWorkflowOperation reads one audit entry with its reason, evidence and before / after
// summaries (GET /v1/workflows/{id}/operations/{operation}; workflows:audit:read). operationID is
// the entry's ID (WorkflowOperation.ID).
func (c *Client) GetWorkflowOperation(ctx context.Context, id, operationID string) (*WorkflowOperation, error) {
	var out WorkflowOperation
	path := "/v1/workflows/" + seg(id) + "/operations/" + seg(operationID)
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
