// Package ledgerflow is the Go SDK of Ledgerflow's public HTTP API: workflows (start, read, steps,
// control, signals, operation audit), definitions, the task protocol and a TaskWorker that runs Go
// functions for task queues, and a verifier of signed webhook deliveries (Standard Webhooks).
//
// It uses the Go standard library only and builds with Go 1.19 and newer.
//
//	client, err := ledgerflow.NewClientFromEnv() // LEDGERFLOW_URL and LEDGERFLOW_TOKEN
//	started, err := client.StartWorkflow(ctx, "", ledgerflow.StartWorkflowRequest{
//		DefinitionID: defID, Version: "v1", Input: map[string]any{"order_id": "A-1"},
//	})
//
// # The wire
//
// Revisions (revision, control_revision) are decimal strings on the wire and uint64 here. JSON values
// the API passes through (inputs, outputs, payloads) are kept as the exact bytes the server sent
// ([RawJSON]): numbers never pass through float64, and an explicit JSON null ([RawJSON.IsNull]) stays
// distinct from a field the answer left out ([RawJSON.IsAbsent]). Times are time.Time (RFC 3339, UTC,
// with fractions of a second); a time the API leaves out when it has no value is a nil *time.Time.
//
// # Idempotency keys and retries
//
// Every mutation carries an Idempotency-Key. Each mutating method takes the key as its argument after
// the context (and the resource id): give your own to be able to resend the same command later, or ""
// and the SDK makes one (32 random hex digits) for this call. Within one call every retry resends the
// same key and the same body; the SDK never changes a key by itself. The retry policy is the Python
// SDK's (ledgerflow/client.py): up to [Options.Retries] (default 4) more attempts after a network
// error, a 503 UNAVAILABLE or a 429 RATE_LIMITED, waiting the answer's Retry-After (at most 5 s) or
// else Backoff·2^attempt (0.2 s, 0.4 s, 0.8 s, 1.6 s). A quota's 429 (QUEUE_FULL, APPLICATION_FULL) and
// every other error are returned at once. GET requests are retried the same way.
//
// When a mutation's retries run out (or its context ends) and it may have taken effect (an attempt
// was answered 503, or its connection failed after the request was sent), the error is an
// [*UnknownOutcomeError] carrying the key used: resend the same command with that key, and the server answers the stored first answer if it
// was applied. A request that never left (connection refused) is an [*UnreachableError]. An answer of
// the API is an [*Error] (status, code, message, request id, field errors); all three work with
// errors.As, and an UnknownOutcomeError unwraps to the *Error 503 or network error behind it.
package ledgerflow
