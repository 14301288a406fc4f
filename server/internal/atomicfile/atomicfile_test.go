package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Write replaces a file's content whole, with the mode asked, and leaves
// no temporary file behind.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	for _, content := range []string{"first\n", "second, longer\n", ""} {
		if err := Write(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(name)
		if err != nil || string(b) != content {
			t.Fatalf("content %q, %v; want %q", b, err, content)
		}
	}
	if fi, err := os.Stat(name); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries in the directory; want the file alone", len(entries))
	}
}
