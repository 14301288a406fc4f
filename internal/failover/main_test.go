package failover

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/server/localcluster"
)

func TestMain(m *testing.M) {
	code := localcluster.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println("goroutines left behind:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}
