//go:build unix

package taskexecutor

import (
	"context"
	"encoding/json"
	"testing"
)

// An exec command returns what it wrote to JOBPLANE_VALUE_FILE as its
// value; one that writes none returns none; a symbolic link is refused
// rather than followed; the file is read only one byte past the limit.
func TestExecReturnsTheValueFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		want         string
		wantSet      bool
		fails        bool
	}{
		{"written", `printf 'the answer' > "$JOBPLANE_VALUE_FILE"`, "the answer", true, false},
		{"none", `true`, "", false, false},
		{"symlink", `ln -s /etc/passwd "$JOBPLANE_VALUE_FILE"`, "", false, true},
		{"over the limit", `printf '0123456789abc' > "$JOBPLANE_VALUE_FILE"`, "0123456789a", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			argv, _ := json.Marshal([]string{"sh", "-c", tc.script})
			var got []byte
			set := false
			task := Task{JobID: "j", VertexID: "v", Config: map[string]string{"argv": string(argv)},
				SetValue: func(v []byte) { got, set = v, true }}
			err := execInvokable(DefaultCancelGrace, ExecConfig{Dir: t.TempDir()}, 10)(context.Background(), task)
			if (err != nil) != tc.fails {
				t.Fatalf("exec: %v, want failure %v", err, tc.fails)
			}
			if set != tc.wantSet || string(got) != tc.want {
				t.Errorf("value = %q (set %v), want %q (set %v)", got, set, tc.want, tc.wantSet)
			}
		})
	}
}
