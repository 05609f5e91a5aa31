package ledgerflow

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ListWorkflowsRequest filters GET /v1/workflows. Every zero field is left out of the query.
type ListWorkflowsRequest struct {
	State             string     // one of the State* constants
	Paused            *bool      // only paused (true) or only unpaused (false) workflows
	DefinitionID      string     // workflows of this definition
	Version           string     // of this pinned version (with DefinitionID)
	BusinessKey       string     // exactly this business key
	BusinessKeyPrefix string     // business keys starting with this
	ScheduleID        string     // launched by this schedule
	CreatedAfter      *time.Time // created after this time (sent as RFC 3339 UTC)
	CreatedBefore     *time.Time // created before this time
	UpdatedAfter      *time.Time // last changed after this time
	UpdatedBefore     *time.Time // last changed before this time
	DeadlineBefore    *time.Time // whose deadline is before this time
	Limit             int        // 1–100 (0: the server's default, 20)
	Cursor            string     // NextCursor of the page before (bound to the namespace and these filters)
}

func (r ListWorkflowsRequest) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	setTime := func(k string, t *time.Time) {
		if t != nil {
			q.Set(k, t.UTC().Format(time.RFC3339Nano))
		}
	}
	set("state", r.State)
	if r.Paused != nil {
		q.Set("paused", strconv.FormatBool(*r.Paused))
	}
	set("definition_id", r.DefinitionID)
	set("version", r.Version)
	set("business_key", r.BusinessKey)
	set("business_key_prefix", r.BusinessKeyPrefix)
	set("schedule_id", r.ScheduleID)
	setTime("created_after", r.CreatedAfter)
	setTime("created_before", r.CreatedBefore)
	setTime("updated_after", r.UpdatedAfter)
	setTime("updated_before", r.UpdatedBefore)
	setTime("deadline_before", r.DeadlineBefore)
	return PageRequest{Limit: r.Limit, Cursor: r.Cursor}.query(q)
}

// ListWorkflows reads one page of the namespace's workflows, newest first (GET /v1/workflows;
// workflows:read). Follow NextCursor with the same filters for the next page.
func (c *Client) ListWorkflows(ctx context.Context, req ListWorkflowsRequest) (*Page[WorkflowInstance], error) {
	var out Page[WorkflowInstance]
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/workflows", query: req.query()}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Definition is a workflow definition with its published versions (newest first).
type Definition struct {
	ID          string       `json:"id"`                    // the definition's id (StartWorkflowRequest.DefinitionID)
	NamespaceID string       `json:"namespace_id"`          // the credential's namespace
	Name        string       `json:"name"`                  // unique in the namespace
	Description string       `json:"description,omitempty"` // "" when it has none
	Versions    []VersionRef `json:"versions"`              // its published versions, newest first
	CreatedAt   time.Time    `json:"created_at"`            // when it was created
	UpdatedAt   time.Time    `json:"updated_at"`            // when it last changed
}

// VersionRef is a published version as a definition lists it.
type VersionRef struct {
	ID        string    `json:"id"`         // the version's id (WorkflowInstance.DefinitionVersionID)
	Version   string    `json:"version"`    // its name, e.g. "v1"
	Queues    []string  `json:"queues"`     // the task queues its steps use
	CreatedAt time.Time `json:"created_at"` // when it was published
}

// DefinitionVersion is a published (immutable) version.
type DefinitionVersion struct {
	ID           string    `json:"id"`                    // the version's id (WorkflowInstance.DefinitionVersionID)
	DefinitionID string    `json:"definition_id"`         // its definition
	Version      string    `json:"version"`               // its name, e.g. "v1"
	Queues       []string  `json:"queues"`                // the task queues its steps use
	Description  string    `json:"description,omitempty"` // the document's description; "" when none
	CreatedAt    time.Time `json:"created_at"`            // when it was published
	// Document is the published document; absent in ListDefinitionVersions' items.
	Document RawJSON `json:"document,omitempty"`
}

// CreateDefinitionRequest is the body of CreateDefinition.
type CreateDefinitionRequest struct {
	Name        string `json:"name"`                  // 1–128 name characters, unique in the namespace. Required.
	Description string `json:"description,omitempty"` // omitted when ""
}

// DefinitionResponse is CreateDefinition's answer.
type DefinitionResponse struct {
	Definition   Definition `json:"definition"`   // the new definition (no versions yet)
	Deduplicated bool       `json:"deduplicated"` // true: the stored first answer of this key
}

// PublishVersionResponse is PublishVersion's answer.
type PublishVersionResponse struct {
	Version      DefinitionVersion `json:"version"`      // the published version with its document
	Deduplicated bool              `json:"deduplicated"` // true: the stored first answer of this key
}

// CreateDefinition creates a definition (POST /v1/workflow-definitions; definitions:publish).
// A name that exists is 409 STATE_CONFLICT.
func (c *Client) CreateDefinition(ctx context.Context, key string, req CreateDefinitionRequest) (*DefinitionResponse, error) {
	var out DefinitionResponse
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/workflow-definitions", body: req, key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PublishVersion publishes a version document (POST /v1/workflow-definitions/{id}/versions;
// definitions:publish). document is the definition document (docs/reference.md, "The definition
// document"): a map, a struct or json.RawMessage. A version that exists is 409 STATE_CONFLICT.
func (c *Client) PublishVersion(ctx context.Context, definitionID, key string, document any) (*PublishVersionResponse, error) {
	var out PublishVersionResponse
	path := "/v1/workflow-definitions/" + seg(definitionID) + "/versions"
	if _, err := c.do(ctx, call{method: http.MethodPost, path: path, body: document, key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetDefinition reads a definition with its versions (GET /v1/workflow-definitions/{id}).
func (c *Client) GetDefinition(ctx context.Context, definitionID string) (*Definition, error) {
	var out Definition
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/workflow-definitions/" + seg(definitionID)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListDefinitions reads one page of the namespace's definitions, newest first; name ("" for all)
// filters by exact name (GET /v1/workflow-definitions).
func (c *Client) ListDefinitions(ctx context.Context, name string, page PageRequest) (*Page[Definition], error) {
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	var out Page[Definition]
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/workflow-definitions", query: page.query(q)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListDefinitionVersions reads one page of a definition's published versions, newest first, without
// their documents (GET /v1/workflow-definitions/{id}/versions).
func (c *Client) ListDefinitionVersions(ctx context.Context, definitionID string, page PageRequest) (*Page[DefinitionVersion], error) {
	var out Page[DefinitionVersion]
	path := "/v1/workflow-definitions/" + seg(definitionID) + "/versions"
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path, query: page.query(nil)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetDefinitionVersion reads a published version with its document
// (GET /v1/workflow-definitions/{id}/versions/{version}).
func (c *Client) GetDefinitionVersion(ctx context.Context, definitionID, version string) (*DefinitionVersion, error) {
	var out DefinitionVersion
	path := "/v1/workflow-definitions/" + seg(definitionID) + "/versions/" + seg(version)
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WaitForWorkflow reads the workflow every interval (0: 250 ms, as the Python SDK's
// wait_for_workflow) until it is SUCCEEDED, FAILED or CANCELLED, and returns it; it does not fail
// for a FAILED or CANCELLED workflow (check State). It ends with ctx (give it a deadline).
func (c *Client) WaitForWorkflow(ctx context.Context, id string, interval time.Duration) (*WorkflowInstance, error) {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	for {
		w, err := c.GetWorkflow(ctx, id)
		if err != nil {
			return nil, err
		}
		if w.Finished() {
			return w, nil
		}
		if err := sleepCtx(ctx, interval); err != nil {
			return nil, fmt.Errorf("ledgerflow: workflow %s is still %s: %w", id, w.State, err)
		}
	}
}
