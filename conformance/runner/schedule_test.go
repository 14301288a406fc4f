package runner

import (
	"fmt"
	"testing"

	"github.com/jobplane/jobplane/server/hastore"
)

// A schedule's decision for a call depends only on the seed, the method,
// the key and how many such calls came before, not on the order in which
// calls of different keys interleave: a seed replays the same faults.
func TestScheduleReplays(t *testing.T) {
	decisions := func(seed uint64, order []string) map[string]string {
		sc := newSchedule(seed, 0.3, 1000)
		out := map[string]string{}
		n := map[string]int{}
		for _, k := range order {
			f, ok := sc.draw("Campaign", k)
			out[fmt.Sprintf("%s#%d", k, n[k])] = fmt.Sprintf("%v %+v", ok, f)
			n[k]++
		}
		return out
	}
	var ab, ba []string
	for range 50 {
		ab = append(ab, "a", "b")
		ba = append(ba, "b", "a")
	}
	one, other := decisions(7, ab), decisions(7, ba)
	faulted := 0
	for k, v := range one {
		if other[k] != v {
			t.Fatalf("call %s: %s in one order, %s in the other; want the same decision", k, v, other[k])
		}
		if v[:4] == "true" {
			faulted++
		}
	}
	if faulted < 10 || faulted > 50 {
		t.Errorf("%d of 100 calls faulted at p=0.3; want about 30", faulted)
	}
	same := 0
	for k, v := range decisions(8, ab) {
		if one[k] == v {
			same++
		}
	}
	if same == len(one) {
		t.Errorf("seeds 7 and 8 fault the same calls; want another schedule")
	}
}

// A schedule injects no more faults than its budget.
func TestScheduleBudget(t *testing.T) {
	sc := newSchedule(1, 1, 3)
	for i := range 10 {
		sc.draw("KeepAlive", fmt.Sprint(i))
	}
	if got := sc.faults(); got != 3 {
		t.Errorf("%d faults; want the budget, 3", got)
	}
}

// An armed fault applies to as many calls as it says (times, every n-th),
// and a disarmed one to none.
func TestFaultRepeats(t *testing.T) {
	for _, tc := range []struct {
		name  string
		f     fault
		calls int
		want  string // which calls it applied to
	}{
		{"once", fault{}, 4, "x..."},
		{"three times", fault{times: 3}, 5, "xxx.."},
		{"every second, twice", fault{times: 2, every: 2}, 6, ".x.x.."},
		{"every third, without end", fault{times: -1, every: 3}, 7, "..x..x."},
	} {
		s := &store{log: &Log{}}
		f := tc.f
		f.op, f.before = "OpenSession", hastore.ErrUnavailable
		s.arm(f)
		got := ""
		for range tc.calls {
			if _, ok := s.take("OpenSession", ""); ok {
				got += "x"
			} else {
				got += "."
			}
		}
		if got != tc.want {
			t.Errorf("%s: applied to %q; want %q", tc.name, got, tc.want)
		}
	}
	s := &store{log: &Log{}}
	s.arm(fault{op: "Withdraw", times: -1})
	s.disarm("Withdraw", "")
	if _, ok := s.take("Withdraw", "j"); ok {
		t.Errorf("a disarmed fault applied")
	}
}
