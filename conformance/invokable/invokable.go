// Package invokable holds the invokables a TaskExecutor under test offers
// for the conformance runner's TaskExecutor mode (--taskexecutor-command),
// as the reference TaskExecutor implements them. conformance/README.md
// ("Checking a TaskExecutor") defines them for any implementation. The
// package only defines task functions: it starts nothing and talks to no
// one.
package invokable

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
)

// The names of the suite's invokables, and the configuration keys they
// read.
const (
	// Gate runs until its attempt is canceled; with the configuration key
	// GateMillis (a decimal count of milliseconds) it finishes once that
	// long has passed, if not canceled before.
	Gate = "conformance.gate"
	// Fail fails at once, with the configuration key FailMessage as its
	// failure message (DefaultFailMessage when unset).
	Fail = "conformance.fail"
	// Value finishes at once, returning the configuration key ValueKey's
	// text (UTF-8) as its value.
	Value = "conformance.value"

	GateMillis  = "ms"
	FailMessage = "message"
	ValueKey    = "value"
	// DefaultFailMessage is Fail's message when its configuration names
	// none.
	DefaultFailMessage = "conformance.fail failed as asked"
)

// Suite returns the suite's invokables, to add to a TaskExecutor's
// (taskexecutor.Config.Invokables).
func Suite() map[string]taskexecutor.Invokable {
	return map[string]taskexecutor.Invokable{Gate: gate, Fail: fail, Value: value}
}

func gate(ctx context.Context, t taskexecutor.Task) error {
	var timer <-chan time.Time
	if s, ok := t.Config[GateMillis]; ok {
		ms, err := strconv.Atoi(s)
		if err != nil || ms < 0 {
			return errors.New("conformance.gate: config ms must be a count of milliseconds")
		}
		timer = time.After(time.Duration(ms) * time.Millisecond)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer:
		return nil
	}
}

func fail(_ context.Context, t taskexecutor.Task) error {
	if m := t.Config[FailMessage]; m != "" {
		return errors.New(m)
	}
	return errors.New(DefaultFailMessage)
}

func value(_ context.Context, t taskexecutor.Task) error {
	if t.SetValue != nil {
		t.SetValue([]byte(t.Config[ValueKey]))
	}
	return nil
}
