package taskvalue

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"rows", true},
		{"rows.read-2_B", true},
		{strings.Repeat("a", MaxNameBytes), true},
		{"", false},
		{strings.Repeat("a", MaxNameBytes+1), false},
		{"with space", false},
		{"slash/no", false},
		{"é", false},
	} {
		err := CheckName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("CheckName(%q) = %v, want ErrInvalidName", tc.name, err)
		}
	}
}
