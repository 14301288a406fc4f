// Package taskvalue holds what both sides of the cluster protocol know of
// the values and accumulators tasks return (TaskExecutionStatus.value and
// .accumulators): the rules for accumulator names and the reference
// limits. It checks; it keeps nothing and runs nothing.
package taskvalue

import (
	"errors"
	"fmt"
)

// The reference limits (ServerLimits.max_task_value_bytes,
// max_result_value_bytes and max_accumulators). Together they keep a job's
// result within the HA store's 1 MiB limit with room for the rest of it:
// 512 KiB of values and at most 1000 accumulators of at most 128-byte
// names (about 150 KiB).
const (
	// DefaultMaxTaskValueBytes is the largest value one task may return.
	DefaultMaxTaskValueBytes = 64 << 10
	// DefaultMaxResultValueBytes is the largest sum of a job's values.
	DefaultMaxResultValueBytes = 512 << 10
	// DefaultMaxAccumulators is the most accumulator names one job (and so
	// one task) may use.
	DefaultMaxAccumulators = 1000
)

// MaxNameBytes is the longest accumulator name.
const MaxNameBytes = 128

// ErrInvalidName says an accumulator name breaks the contract's rule.
var ErrInvalidName = errors.New("taskvalue: invalid accumulator name")

// CheckName returns nil when name is a valid accumulator name: 1 to
// MaxNameBytes bytes of [A-Za-z0-9_.-]. Otherwise it returns an error
// wrapping ErrInvalidName that quotes the name.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fmt.Errorf("%w %.140q: it must be 1 to %d bytes long", ErrInvalidName, name, MaxNameBytes)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == '-':
		default:
			return fmt.Errorf("%w %q: only letters, digits, '_', '.' and '-' are allowed", ErrInvalidName, name)
		}
	}
	return nil
}
