package dispatcher

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// A stop whose cancel failed after the savepoint was durable answers the
// cancel's refusal, code and reason kept, naming the savepoint.
func TestWithSavepointKeepsTheRefusal(t *testing.T) {
	refusal := apierror.New(jobplanev1.ErrorReason_ERROR_REASON_CANCEL_NOT_RECORDED, "cancel again", map[string]string{"job_id": "j"})
	err := withSavepoint(refusal, "sp-j-7")
	if connect.CodeOf(err) != connect.CodeOf(refusal) || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_CANCEL_NOT_RECORDED) || !strings.Contains(err.Error(), "sp-j-7") {
		t.Fatalf("withSavepoint = %v; want the refusal's code and reason, naming savepoint sp-j-7", err)
	}
}
