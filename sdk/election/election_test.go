package election

import "testing"

func TestToken(t *testing.T) {
	t.Parallel()
	if !(Token{}).IsZero() {
		t.Error("the zero Token is not IsZero")
	}
	tok := Token{SessionID: "abc", Epoch: 7}
	if tok.IsZero() {
		t.Errorf("%v is IsZero", tok)
	}
	if got, want := tok.String(), "abc@7"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestJob(t *testing.T) {
	t.Parallel()
	if got, want := Job("j1"), "job/j1"; got != want {
		t.Errorf("Job(j1) = %q, want %q", got, want)
	}
}
