package hacluster_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/standalonetest"
)

func TestMain(m *testing.M) {
	code := standalonetest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println("goroutines left behind:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}
