package m3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	m3v1 "github.com/m3grpc/m3grpc/clients/go/gen/m3/v1"
)

// EventKind says what a WatchPending event is about.
type EventKind int

// The kinds of WatchPending events.
const (
	// EventRoundPending: a round became pending (or, in the opening part of
	// a stream without a cursor, is pending now). Event.Round is set.
	EventRoundPending EventKind = iota + 1
	// EventRoundLeftPending: a round left pending (a response was accepted,
	// or it failed). Event.Left is set. Ignore it for a round not seen pending.
	EventRoundLeftPending
	// EventExecutionFinished: an execution finished. Event.Finished is its
	// final state.
	EventExecutionFinished
)

// String returns the event kind as the proto field names it, e.g. "round_pending".
func (k EventKind) String() string {
	switch k {
	case EventRoundPending:
		return "round_pending"
	case EventRoundLeftPending:
		return "round_left_pending"
	case EventExecutionFinished:
		return "execution_finished"
	}
	return "unknown"
}

// Event is one managed-input event of a WatchPending stream.
type Event struct {
	// Cursor is the event's position: pass it as WatchOptions.Cursor to
	// resume exactly after this event.
	Cursor string
	// Kind says which of the fields below is set.
	Kind EventKind
	// Round is the pending round (EventRoundPending).
	Round *PendingRound
	// Left is the round that left pending and its new status
	// (EventRoundLeftPending).
	Left *RoundLeftPending
	// Finished is the finished execution's final state (EventExecutionFinished).
	Finished *ExecutionState
}

// WatchOptions selects the events of a WatchPending stream.
type WatchOptions struct {
	// ExecutionID, when set, limits the stream to that execution's events;
	// the stream then ends (the iteration stops without an error) right
	// after its EventExecutionFinished. Empty: every execution, until ctx is
	// cancelled or the loop breaks.
	ExecutionID string
	// Cursor, when set, resumes exactly after the event that carried it.
	// Empty: first every round pending now, then live events. A cursor from
	// a stream with an ExecutionID may only be used with the same one.
	Cursor string
	// Kinds, when set, limits the stream to events of these kinds (skipped
	// events still move the cursor). Without EventRoundPending there is no
	// opening snapshot; a stream with an ExecutionID still ends after that
	// execution finishes. Nil: every kind.
	Kinds []EventKind
}

// WatchPending streams managed-input events as an iterator:
//
//	for ev, err := range client.WatchPending(ctx, m3.WatchOptions{ExecutionID: id}) {
//		if err != nil {
//			return err // the stream failed; resume from the last ev.Cursor
//		}
//		if ev.Kind == m3.EventRoundPending { ... }
//	}
//
// The stream opens when the loop starts and closes when it ends, breaks, or
// ctx is done. A failure (including UNAVAILABLE with
// ErrServiceShuttingDown when the server shuts down) is yielded once as
// the last element. Events of kinds this client does not know are skipped.
func (c *Client) WatchPending(ctx context.Context, opts WatchOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		kinds, err := watchEventKinds(opts.Kinds)
		if err != nil {
			yield(Event{}, err)
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // ends the stream when the consumer stops early
		stream, err := c.executions.WatchPending(ctx, &m3v1.WatchPendingRequest{
			ExecutionId: opts.ExecutionID,
			Cursor:      opts.Cursor,
			Kinds:       kinds,
		})
		if err != nil {
			yield(Event{}, wrapError(err))
			return
		}
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(Event{}, wrapError(err))
				return
			}
			ev, ok := eventFromMessage(msg)
			if !ok {
				continue
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// watchEventKinds maps the kinds to the request's enum; the numbers happen to
// be equal, but the mapping keeps EventKind free to change.
func watchEventKinds(kinds []EventKind) ([]m3v1.WatchEventKind, error) {
	wire := make([]m3v1.WatchEventKind, 0, len(kinds))
	for i, kind := range kinds {
		switch kind {
		case EventRoundPending:
			wire = append(wire, m3v1.WatchEventKind_WATCH_EVENT_KIND_ROUND_PENDING)
		case EventRoundLeftPending:
			wire = append(wire, m3v1.WatchEventKind_WATCH_EVENT_KIND_ROUND_LEFT_PENDING)
		case EventExecutionFinished:
			wire = append(wire, m3v1.WatchEventKind_WATCH_EVENT_KIND_EXECUTION_FINISHED)
		default:
			return nil, fmt.Errorf("m3: kinds[%d]: %d is not an EventKind", i, int(kind))
		}
	}
	return wire, nil
}

func eventFromMessage(msg *m3v1.WatchPendingResponse) (Event, bool) {
	ev := Event{Cursor: msg.GetCursor()}
	switch e := msg.GetEvent().(type) {
	case *m3v1.WatchPendingResponse_RoundPending:
		ev.Kind, ev.Round = EventRoundPending, e.RoundPending
	case *m3v1.WatchPendingResponse_RoundLeftPending:
		ev.Kind, ev.Left = EventRoundLeftPending, e.RoundLeftPending
	case *m3v1.WatchPendingResponse_ExecutionFinished:
		ev.Kind, ev.Finished = EventExecutionFinished, e.ExecutionFinished
	default:
		return Event{}, false
	}
	return ev, true
}
