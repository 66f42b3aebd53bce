package m3

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of every M3 error.
const ErrorDomain = "m3grpc.dev"

// Reason is a google.rpc.ErrorInfo reason of the m3grpc.dev domain: the name
// of an m3.v1.ErrorReason value without its ERROR_REASON_ prefix.
type Reason string

// The reasons of proto/m3/v1/error_reason.proto, each with its status code.
const (
	ReasonModelValidationFailed           Reason = "MODEL_VALIDATION_FAILED"            // INVALID_ARGUMENT
	ReasonManagedInputInvalid             Reason = "MANAGED_INPUT_INVALID"              // INVALID_ARGUMENT
	ReasonManagedInputConflict            Reason = "MANAGED_INPUT_CONFLICT"             // ABORTED
	ReasonManagedInputStateInvalid        Reason = "MANAGED_INPUT_STATE_INVALID"        // FAILED_PRECONDITION
	ReasonRoundNotFound                   Reason = "ROUND_NOT_FOUND"                    // NOT_FOUND
	ReasonManagedInputRecoveryUnavailable Reason = "MANAGED_INPUT_RECOVERY_UNAVAILABLE" // FAILED_PRECONDITION
	ReasonOperationTimeout                Reason = "OPERATION_TIMEOUT"                  // DEADLINE_EXCEEDED
	ReasonExecutionNotFound               Reason = "EXECUTION_NOT_FOUND"                // NOT_FOUND
	ReasonResultWaitTimeout               Reason = "RESULT_WAIT_TIMEOUT"                // DEADLINE_EXCEEDED
	ReasonWorkQueueFull                   Reason = "WORK_QUEUE_FULL"                    // RESOURCE_EXHAUSTED
	ReasonServerBindingNotFound           Reason = "SERVER_BINDING_NOT_FOUND"           // NOT_FOUND
	ReasonElicitationNotAnswered          Reason = "ELICITATION_NOT_ANSWERED"           // FAILED_PRECONDITION
	ReasonRoundLimitExceeded              Reason = "ROUND_LIMIT_EXCEEDED"               // FAILED_PRECONDITION
	ReasonInternal                        Reason = "INTERNAL"                           // INTERNAL
	ReasonServiceShuttingDown             Reason = "SERVICE_SHUTTING_DOWN"              // UNAVAILABLE
	ReasonUnauthenticated                 Reason = "UNAUTHENTICATED"                    // UNAUTHENTICATED
	ReasonStorageUnavailable              Reason = "STORAGE_UNAVAILABLE"                // UNAVAILABLE
	ReasonRateLimited                     Reason = "RATE_LIMITED"                       // RESOURCE_EXHAUSTED
)

// The values of the `conflict_kind` metadata of MANAGED_INPUT_CONFLICT.
const (
	ConflictStaleLease           = "stale_lease"
	ConflictIdempotencyKeyReused = "idempotency_key_reused"
	ConflictConcurrentUpdate     = "concurrent_update"
	ConflictRequestIDReused      = "request_id_reused"
)

// reasonError is the type of the sentinel errors. A sentinel matches (with
// errors.Is) every *Error of its reason, and of the reasons below it.
type reasonError struct {
	reason Reason
	parent *reasonError
}

func (e *reasonError) Error() string { return "m3: " + string(e.reason) }

// Sentinel errors, one per reason, for errors.Is. They mirror the Python
// client's exception classes, including their two subclass relations:
// ErrRoundNotFound also matches ErrManagedInputStateInvalid, and
// ErrResultWaitTimeout also matches ErrOperationTimeout.
var (
	ErrModelValidationFailed           = &reasonError{reason: ReasonModelValidationFailed}
	ErrManagedInputInvalid             = &reasonError{reason: ReasonManagedInputInvalid}
	ErrManagedInputConflict            = &reasonError{reason: ReasonManagedInputConflict}
	ErrManagedInputStateInvalid        = &reasonError{reason: ReasonManagedInputStateInvalid}
	ErrRoundNotFound                   = &reasonError{reason: ReasonRoundNotFound, parent: ErrManagedInputStateInvalid}
	ErrManagedInputRecoveryUnavailable = &reasonError{reason: ReasonManagedInputRecoveryUnavailable}
	ErrOperationTimeout                = &reasonError{reason: ReasonOperationTimeout}
	ErrExecutionNotFound               = &reasonError{reason: ReasonExecutionNotFound}
	ErrResultWaitTimeout               = &reasonError{reason: ReasonResultWaitTimeout, parent: ErrOperationTimeout}
	ErrWorkQueueFull                   = &reasonError{reason: ReasonWorkQueueFull}
	ErrServerBindingNotFound           = &reasonError{reason: ReasonServerBindingNotFound}
	ErrElicitationNotAnswered          = &reasonError{reason: ReasonElicitationNotAnswered}
	ErrRoundLimitExceeded              = &reasonError{reason: ReasonRoundLimitExceeded}
	ErrInternal                        = &reasonError{reason: ReasonInternal}
	ErrServiceShuttingDown             = &reasonError{reason: ReasonServiceShuttingDown}
	ErrUnauthenticated                 = &reasonError{reason: ReasonUnauthenticated}
	ErrStorageUnavailable              = &reasonError{reason: ReasonStorageUnavailable}
	ErrRateLimited                     = &reasonError{reason: ReasonRateLimited}
)

var sentinels = map[Reason]*reasonError{}

func init() {
	for _, s := range []*reasonError{
		ErrModelValidationFailed, ErrManagedInputInvalid, ErrManagedInputConflict,
		ErrManagedInputStateInvalid, ErrRoundNotFound, ErrManagedInputRecoveryUnavailable,
		ErrOperationTimeout, ErrExecutionNotFound, ErrResultWaitTimeout, ErrWorkQueueFull,
		ErrServerBindingNotFound, ErrElicitationNotAnswered, ErrRoundLimitExceeded,
		ErrInternal, ErrServiceShuttingDown, ErrUnauthenticated, ErrRateLimited,
		ErrStorageUnavailable,
	} {
		sentinels[s.reason] = s
	}
}

// defaultRetryAfter is the RetryAfter of a WORK_QUEUE_FULL, RATE_LIMITED or
// STORAGE_UNAVAILABLE error that
// carries no google.rpc.RetryInfo (as in the Python client).
const defaultRetryAfter = time.Second

// FieldViolation is one google.rpc.BadRequest field violation: a path into
// the request (e.g. `responses['shipping_address'].content.street`) and what
// is wrong with it.
type FieldViolation struct {
	Field       string
	Description string
}

// Error is a failed M3 call: every gRPC status error a Client method returns,
// as in the Python and TypeScript clients. Get it with errors.As; test its
// reason with errors.Is and the Err* sentinels. A status without an M3
// ErrorInfo (a transport failure such as UNAVAILABLE, the call's own
// DEADLINE_EXCEEDED or CANCELLED) gives an *Error with an empty Reason that
// matches no sentinel, except that INTERNAL matches ErrInternal; a reason
// this client does not know also matches none. Handle those by their Code.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the ErrorInfo reason, e.g. ReasonRoundNotFound.
	Reason Reason
	// Message is the status message.
	Message string
	// Metadata is the ErrorInfo metadata (never nil), e.g. `round_id`,
	// `execution_id`, `conflict_kind`.
	Metadata map[string]string
	// FieldViolations are the google.rpc.BadRequest violations
	// (MODEL_VALIDATION_FAILED, MANAGED_INPUT_INVALID).
	FieldViolations []FieldViolation
	// RetryAfter is the google.rpc.RetryInfo delay (WORK_QUEUE_FULL,
	// STORAGE_UNAVAILABLE, RATE_LIMITED: the same call succeeds once it has
	// passed); zero
	// when the error is not worth retrying as is.
	RetryAfter time.Duration
	// Resource is the google.rpc.ResourceInfo (the *_NOT_FOUND reasons), or nil.
	Resource *errdetails.ResourceInfo
	// Preconditions are the google.rpc.PreconditionFailure violations
	// (MANAGED_INPUT_STATE_INVALID, MANAGED_INPUT_RECOVERY_UNAVAILABLE).
	Preconditions []*errdetails.PreconditionFailure_Violation

	status *status.Status
}

// Error returns "m3 <REASON> (<code>): <message>" ("m3 (<code>): <message>"
// without a reason), then the field violations.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Reason == "" {
		fmt.Fprintf(&b, "m3 (%s): %s", CodeName(e.Code), e.Message)
	} else {
		fmt.Fprintf(&b, "m3 %s (%s): %s", e.Reason, CodeName(e.Code), e.Message)
	}
	for i, v := range e.FieldViolations {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", v.Field, v.Description)
	}
	return b.String()
}

// Is reports whether target is the sentinel of e's reason or of one of its
// parents (see the Err* variables).
func (e *Error) Is(target error) bool {
	t, ok := target.(*reasonError)
	if !ok {
		return false
	}
	if e.Reason == "" && e.Code == codes.Internal {
		return t == ErrInternal
	}
	for s := sentinels[e.Reason]; s != nil; s = s.parent {
		if s == t {
			return true
		}
	}
	return false
}

// GRPCStatus returns the status the error was built from, so that
// status.FromError and status.Code work on it.
func (e *Error) GRPCStatus() *status.Status { return e.status }

// Timeout reports whether the error is a time-out (DEADLINE_EXCEEDED:
// RESULT_WAIT_TIMEOUT, OPERATION_TIMEOUT).
func (e *Error) Timeout() bool { return e.Code == codes.DeadlineExceeded }

// ConflictKind is the `conflict_kind` metadata of a MANAGED_INPUT_CONFLICT
// (one of the Conflict* constants); empty for other reasons.
func (e *Error) ConflictKind() string { return e.Metadata["conflict_kind"] }

// ErrorFromStatus decodes an M3 error from a status: nil when the status is
// OK or carries no ErrorInfo of the m3grpc.dev domain.
func ErrorFromStatus(st *status.Status) *Error {
	if st == nil || st.Code() == codes.OK {
		return nil
	}
	var (
		info     *errdetails.ErrorInfo
		bad      *errdetails.BadRequest
		retry    *errdetails.RetryInfo
		resource *errdetails.ResourceInfo
		failure  *errdetails.PreconditionFailure
	)
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if info == nil && d.GetDomain() == ErrorDomain {
				info = d
			}
		case *errdetails.BadRequest:
			bad = d
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.ResourceInfo:
			resource = d
		case *errdetails.PreconditionFailure:
			failure = d
		}
	}
	if info == nil {
		return nil
	}
	e := &Error{
		Code:     st.Code(),
		Reason:   Reason(info.GetReason()),
		Message:  st.Message(),
		Metadata: make(map[string]string, len(info.GetMetadata())),
		Resource: resource,
		status:   st,
	}
	for k, v := range info.GetMetadata() {
		e.Metadata[k] = v
	}
	for _, v := range bad.GetFieldViolations() {
		e.FieldViolations = append(e.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
	}
	e.Preconditions = failure.GetViolations()
	switch {
	case retry.GetRetryDelay() != nil:
		e.RetryAfter = retry.GetRetryDelay().AsDuration()
	case e.Reason == ReasonWorkQueueFull || e.Reason == ReasonStorageUnavailable || e.Reason == ReasonRateLimited:
		e.RetryAfter = defaultRetryAfter
	}
	return e
}

// wrapError turns the error of a gRPC call into an *Error: decoded from its
// M3 ErrorInfo when it has one, else carrying only the status code and
// message (transport failures, a call's own deadline, cancellation). An error
// that is not a gRPC status is returned unchanged. status.Code still reads
// the result (Error.GRPCStatus).
func wrapError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return err
	}
	if e := ErrorFromStatus(st); e != nil {
		return e
	}
	return &Error{Code: st.Code(), Message: st.Message(), Metadata: map[string]string{}, status: st}
}

// CodeName is the canonical name of a gRPC status code as google.rpc.Code
// spells it (e.g. "INVALID_ARGUMENT", "CANCELLED").
func CodeName(c codes.Code) string {
	if name, ok := codeNames[c]; ok {
		return name
	}
	return fmt.Sprintf("CODE(%d)", uint32(c))
}

var codeNames = map[codes.Code]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}
