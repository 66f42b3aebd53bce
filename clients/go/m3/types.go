package m3

import (
	"time"

	m3v1 "github.com/m3grpc/m3grpc/clients/go/gen/m3/v1"
)

// The wire types the client returns, under shorter names (they are the
// generated m3.v1 messages; read them with their Get* methods).
type (
	// ExecutionState is a snapshot of an execution (lifecycle, outcome, ...).
	ExecutionState = m3v1.ExecutionState
	// ExecutionResult is the terminal result of an execution.
	ExecutionResult = m3v1.ExecutionResult
	// OperationResult is what one MCP operation of an execution returned.
	OperationResult = m3v1.OperationResult
	// PendingRound is a durable round of elicitation requests waiting for a
	// response; answer it with Client.Respond.
	PendingRound = m3v1.PendingElicitationRound
	// ElicitationRequest is one request of a round (form or URL mode).
	ElicitationRequest = m3v1.ElicitationRequest
	// RoundLeftPending tells that a round left the pending status.
	RoundLeftPending = m3v1.RoundLeftPending
	// RespondResult is the outcome of Client.Respond: the round's status
	// and whether the call was an idempotent replay.
	RespondResult = m3v1.RespondResponse

	// HumanInput is what happens at an elicitation no plan answers.
	HumanInput = m3v1.HumanInput
	// ExecutionStatus is where an execution is in its lifecycle.
	ExecutionStatus = m3v1.ExecutionStatus
	// ExecutionOutcome is how a finished execution ended.
	ExecutionOutcome = m3v1.ExecutionOutcome
	// ManagedInputStatus is the status of an elicitation round.
	ManagedInputStatus = m3v1.ManagedInputStatus
	// OperationKind is the category of an MCP operation.
	OperationKind = m3v1.OperationKind
	// Action is an MCP elicitation action (accept, decline, cancel).
	Action = m3v1.ElicitationAction

	// ServerInfo is one server binding configured on the service (name,
	// transport, protocol generation, and with tools: its tools or
	// GetToolsError).
	ServerInfo = m3v1.ServerInfo
	// ToolInfo is one tool a bound server lists.
	ToolInfo = m3v1.ToolInfo
)

// Enum values, without their proto prefixes.
const (
	HumanInputFail    = m3v1.HumanInput_HUMAN_INPUT_FAIL
	HumanInputManaged = m3v1.HumanInput_HUMAN_INPUT_MANAGED

	ExecutionStatusQueued          = m3v1.ExecutionStatus_EXECUTION_STATUS_QUEUED
	ExecutionStatusRunning         = m3v1.ExecutionStatus_EXECUTION_STATUS_RUNNING
	ExecutionStatusWaitingForInput = m3v1.ExecutionStatus_EXECUTION_STATUS_WAITING_FOR_INPUT
	ExecutionStatusFinished        = m3v1.ExecutionStatus_EXECUTION_STATUS_FINISHED

	// Outcomes. Every outcome but OutcomeSucceeded has a FailureCode saying why:
	// `cancelled` for OutcomeCancelled (a caller's Cancel, and only that); the
	// failure for OutcomeFailed (e.g. `operation_timeout`, `recovery_unavailable`,
	// `worker_shutdown` when the service shut down before the execution finished).
	OutcomeSucceeded = m3v1.ExecutionOutcome_EXECUTION_OUTCOME_SUCCEEDED
	OutcomeFailed    = m3v1.ExecutionOutcome_EXECUTION_OUTCOME_FAILED
	OutcomeCancelled = m3v1.ExecutionOutcome_EXECUTION_OUTCOME_CANCELLED

	ManagedInputStatusPending           = m3v1.ManagedInputStatus_MANAGED_INPUT_STATUS_PENDING
	ManagedInputStatusResponseValidated = m3v1.ManagedInputStatus_MANAGED_INPUT_STATUS_RESPONSE_VALIDATED
	ManagedInputStatusDeliveryStarted   = m3v1.ManagedInputStatus_MANAGED_INPUT_STATUS_DELIVERY_STARTED
	ManagedInputStatusDelivered         = m3v1.ManagedInputStatus_MANAGED_INPUT_STATUS_DELIVERED
	ManagedInputStatusResolved          = m3v1.ManagedInputStatus_MANAGED_INPUT_STATUS_RESOLVED
	ManagedInputStatusFailed            = m3v1.ManagedInputStatus_MANAGED_INPUT_STATUS_FAILED

	OperationKindTool     = m3v1.OperationKind_OPERATION_KIND_TOOL
	OperationKindPrompt   = m3v1.OperationKind_OPERATION_KIND_PROMPT
	OperationKindResource = m3v1.OperationKind_OPERATION_KIND_RESOURCE

	ActionAccept  = m3v1.ElicitationAction_ELICITATION_ACTION_ACCEPT
	ActionDecline = m3v1.ElicitationAction_ELICITATION_ACTION_DECLINE
	ActionCancel  = m3v1.ElicitationAction_ELICITATION_ACTION_CANCEL
)

// The harnesses a service has built in (AgentSpec.Harness).
const (
	// HarnessScripted runs AgentSpec.Script with a real MCP client; no model.
	HarnessScripted = "scripted"
	// HarnessCodex runs OpenAI's Codex CLI as the agent.
	HarnessCodex = "codex"
	// HarnessClaudeCode runs Anthropic's Claude Code CLI as the agent.
	HarnessClaudeCode = "claude-code"
)

// AgentSpec is an agent run: a harness drives a model against one server
// binding configured on the service (m3.v1.AgentSpec).
type AgentSpec struct {
	// Harness runs the agent: HarnessScripted (built in), HarnessCodex or
	// HarnessClaudeCode, or another the service registers. Required.
	Harness string
	// Models the harness may use, in order of preference (empty: its default).
	Models []string
	// Prompt is the task given to the agent.
	Prompt string
	// Server names a server binding configured on the service. Required.
	Server string
	// Tools limits the agent to these tools, each "<server>:<tool>".
	Tools []string
	// Script is what the scripted harness performs, in order.
	Script []*m3v1.OperationStep
	// ElicitationPlan holds predefined answers; must be nil with HumanInputManaged.
	ElicitationPlan *m3v1.ElicitationPlan
	// PermissionPolicy says how the harness answers its native permission prompts.
	PermissionPolicy m3v1.PermissionPolicy
	// RoundLimit is the most input rounds one operation may ask (0: the server's default, 8).
	RoundLimit int32
	// RoundTimeout is, with HumanInputManaged, how long each pending round
	// waits for a response (0: indefinitely). When it runs out, the round
	// fails and the execution finishes failed (`operation_timeout`).
	RoundTimeout time.Duration
}

// SubmitOption sets an optional field of a submission.
type SubmitOption func(*m3v1.SubmitRequest)

// WithHumanInput sets what happens at an elicitation no plan answers
// (default HumanInputFail). HumanInputManaged pauses the execution at a
// durable pending round.
func WithHumanInput(h HumanInput) SubmitOption {
	return func(r *m3v1.SubmitRequest) { r.HumanInput = h }
}

// WithRequestID makes the submission idempotent (AIP-155): a retry with the
// same request ID and the same request returns the execution the first call
// created; with a different request it fails with ErrManagedInputConflict
// (conflict kind ConflictRequestIDReused).
func WithRequestID(id string) SubmitOption {
	return func(r *m3v1.SubmitRequest) { r.RequestId = id }
}

// Response answers one elicitation request of a round.
type Response struct {
	// Action is ActionAccept, ActionDecline or ActionCancel.
	Action Action
	// Content is the accepted content, a JSON object (values: nil, bool,
	// numbers, string, []any, map[string]any). Only for an accept of a form
	// request, where it must validate against the request's schema.
	Content map[string]any
}

// Accept answers with MCP action accept and the given content (nil for a
// URL request, where accept only records consent).
func Accept(content map[string]any) Response { return Response{Action: ActionAccept, Content: content} }

// Decline answers with MCP action decline.
func Decline() Response { return Response{Action: ActionDecline} }

// Dismiss answers with MCP action cancel: the user dismissed this request.
// It does not cancel the execution (that is Client.Cancel).
func Dismiss() Response { return Response{Action: ActionCancel} }
