package ledgerflow

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"unicode/utf8"
)

// Version is this SDK's version; a worker names itself "ledgerflow-go/<Version>" (WorkerIdentity.SDK).
const Version = "0.1.0"

// Bounds of a failure's trace and of a worker's identity, the ones the task API enforces (in
// characters): a longer value is cut by the SDK, never refused by the server.
const (
	MaxErrorTypeChars = 256       // TaskError.Type
	MaxStackChars     = 16 * 1024 // TaskError.Stack: a longer one keeps its head and its end
	stackHeadChars    = 2 * 1024  // the head a cut stack keeps (the rest is its end)
	maxHostChars      = 255       // WorkerIdentity.Host
	maxSDKChars       = 64        // WorkerIdentity.SDK
)

// WorkerIdentity is who claims or fails a task: sent with a claim (ClaimRequest.Worker,
// ClaimNext.Worker) and a failure (FailRequest.Worker), the server keeps it on the attempt (the
// step's rounds: worker, failure.worker), so that a failure can be traced to a machine and a process.
type WorkerIdentity struct {
	Host string `json:"host"` // 1-255 characters
	PID  int    `json:"pid"`  // 0-2147483647
	SDK  string `json:"sdk"`  // 1-64 characters, e.g. "ledgerflow-go/0.1.0"
}

// Identity is this process's identity: its host name ("unknown" when the system gives none), its
// process id and "ledgerflow-go/<Version>". A TaskWorker sends it with every claim and failure.
func Identity() WorkerIdentity {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return WorkerIdentity{Host: cut(clean(host), maxHostChars), PID: os.Getpid(), SDK: cut("ledgerflow-go/"+Version, maxSDKChars)}
}

// ErrorTyper names the type a failure reports (TaskError.Type) instead of the Go type of the error,
// e.g. a stable name of your own ("payments.CardDeclined"). The first error of the chain (errors.As)
// that has an ErrorType method naming a type wins.
type ErrorTyper interface {
	ErrorType() string
}

// ErrorStacker gives the stack trace a failure reports (TaskError.Stack) instead of the worker's
// stack where the handler returned; WithStack makes one. The first error of the chain that has one
// wins.
type ErrorStacker interface {
	ErrorStack() string
}

type stackError struct {
	err   error
	stack string
}

func (e *stackError) Error() string      { return e.err.Error() }
func (e *stackError) Unwrap() error      { return e.err }
func (e *stackError) ErrorStack() string { return e.stack }

// WithStack wraps err with the stack of the goroutine that calls it: a TaskWorker reports that
// stack with the failure (where the error was made, rather than where the handler returned). Its
// message and type are err's; nil stays nil.
func WithStack(err error) error {
	if err == nil {
		return nil
	}
	return &stackError{err: err, stack: string(debug.Stack())}
}

// ErrorTypeOf is the type a TaskWorker reports for err: the ErrorType of the first error of the
// chain that names one, or else the dynamic Go type of err ("*errors.errorString",
// "*fmt.wrapError", "*mypkg.MyError"); the SDK's own wrappers (NonRetryable, WithStack) are looked
// through. At most MaxErrorTypeChars characters.
func ErrorTypeOf(err error) string {
	if err == nil {
		return ""
	}
	var typer ErrorTyper
	if errors.As(err, &typer) {
		if name := clean(typer.ErrorType()); name != "" {
			return cut(name, MaxErrorTypeChars)
		}
	}
	for {
		switch e := err.(type) {
		case *NonRetryableError:
			if e.Err != nil {
				err = e.Err
				continue
			}
		case *stackError:
			err = e.err
			continue
		}
		return cut(fmt.Sprintf("%T", err), MaxErrorTypeChars)
	}
}

// BoundedStack bounds a stack trace as the task API does: at most MaxStackChars characters (NUL
// characters replaced); a longer one keeps its first 2 KiB and its end (the innermost frames are the
// head of a Go stack, the outermost its end) with a line saying how many characters were left out.
func BoundedStack(stack string) string {
	stack = clean(stack)
	runes := []rune(stack)
	if len(runes) <= MaxStackChars {
		return stack
	}
	marker := func(n int) string { return fmt.Sprintf("\n... (%d characters left out) ...\n", n) }
	tail := MaxStackChars - stackHeadChars - len(marker(len(runes)))
	return string(runes[:stackHeadChars]) + marker(len(runes)-stackHeadChars-tail) + string(runes[len(runes)-tail:])
}

// clean makes s valid UTF-8 without NUL characters (the API refuses them).
func clean(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// cut keeps the first n characters of s.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// PanicError is how a TaskWorker reports a handler's panic: the task fails (retryable) with the
// message "panic: <value>", the type "panic(<the value's Go type>)" and the stack where it panicked.
type PanicError struct {
	Value any    // what the handler panicked with
	Stack string // the handler's goroutine stack at the panic
}

func (e *PanicError) Error() string      { return fmt.Sprintf("panic: %v", e.Value) }
func (e *PanicError) ErrorType() string  { return fmt.Sprintf("panic(%T)", e.Value) }
func (e *PanicError) ErrorStack() string { return e.Stack }

// failureOf is what a TaskWorker reports of a handler's error: its message, type and stack (the
// error's own, or else where the handler returned, the stack given).
func failureOf(err error, returnedAt []byte) TaskError {
	out := TaskError{Message: err.Error(), Type: ErrorTypeOf(err)}
	var stacker ErrorStacker
	if errors.As(err, &stacker) && stacker.ErrorStack() != "" {
		out.Stack = BoundedStack(stacker.ErrorStack())
	} else {
		out.Stack = BoundedStack(string(returnedAt))
	}
	return out
}
