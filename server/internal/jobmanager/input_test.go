package jobmanager_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/localcluster"
)

// misspelt is a JSON SubmitJob whose restart strategy is misspelt at
// depth: before the public API refused unknown fields, the job ran
// without its restart strategy.
const misspelt = `{"jobId": "typo", "jobGraph": {"name": "typo",
  "vertices": [{"id": "v", "invokable": "noop", "parallelism": 1}],
  "config": {"restartStrateg": {"fixedDelay": {"attempts": 3}}}}}`

// rawJSON is a client codec that sends a fixed JSON body, whatever the
// message, so a test can send what a generated client never would.
type rawJSON string

func (rawJSON) Name() string                  { return "json" }
func (r rawJSON) Marshal(any) ([]byte, error) { return []byte(r), nil }
func (rawJSON) Unmarshal(b []byte, m any) error {
	return protojson.Unmarshal(b, m.(proto.Message))
}

// The public API refuses a request with a field it does not know, in JSON
// or binary, over Connect and gRPC: INVALID_ARGUMENT with a BadRequest
// violation naming the field, and no job. The same job spelt right is
// then accepted, restart strategy and all.
func TestUnknownFieldsAreRefused(t *testing.T) {
	c := newCluster(t, localcluster.Config{TaskExecutors: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	h2cTransport := &http.Transport{Protocols: &h2c}
	h1Transport := &http.Transport{}
	t.Cleanup(h2cTransport.CloseIdleConnections)
	t.Cleanup(h1Transport.CloseIdleConnections)
	h1, h2 := &http.Client{Transport: h1Transport}, &http.Client{Transport: h2cTransport}

	// A binary request with field 99 in job_graph.config, which no schema
	// version of JobConfig has.
	binary := &jobplanev1.SubmitJobRequest{JobId: "typo", JobGraph: &jobplanev1.JobGraph{
		Name:     "typo",
		Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}},
		Config:   &jobplanev1.JobConfig{},
	}}
	withUnknownField(binary.GetJobGraph().GetConfig(), 99)

	for _, tc := range []struct {
		name     string
		client   *http.Client
		opts     []connect.ClientOption
		wantPath string
	}{
		{"json/connect-http1", h1, []connect.ClientOption{connect.WithCodec(rawJSON(misspelt))}, "job_graph.config.restartStrateg"},
		{"json/grpc-h2c", h2, []connect.ClientOption{connect.WithGRPC(), connect.WithCodec(rawJSON(misspelt))}, "job_graph.config.restartStrateg"},
		{"binary/connect-http1", h1, nil, "job_graph.config.99"},
		{"binary/grpc-h2c", h2, []connect.ClientOption{connect.WithGRPC()}, "job_graph.config.99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := jobplanev1connect.NewDispatcherServiceClient(tc.client, c.URL(), tc.opts...)
			_, err := client.SubmitJob(ctx, binary)
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("SubmitJob = %v, want invalid_argument", err)
			}
			var got []string
			for _, v := range apierror.Violations(err) {
				got = append(got, v.Path)
			}
			if !slices.Equal(got, []string{tc.wantPath}) {
				t.Errorf("violations %q, want [%q]", got, tc.wantPath)
			}
			if !strings.Contains(err.Error(), tc.wantPath) {
				t.Errorf("message %q does not name %s", err.Error(), tc.wantPath)
			}
			assertNoJob(t, ctx, c, "typo")
		})
	}

	// What a curl user sees: a 400 whose body names the field.
	resp, err := h1.Post(c.URL()+jobplanev1connect.DispatcherServiceSubmitJobProcedure, "application/json", strings.NewReader(misspelt))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "job_graph.config.restartStrateg") {
		t.Errorf("curl: HTTP %d %s, want 400 naming job_graph.config.restartStrateg", resp.StatusCode, body)
	}
	assertNoJob(t, ctx, c, "typo")

	// A stream refuses its request alike.
	watch := withUnknownField(&jobplanev1.WatchJobRequest{JobId: "typo"}, 5)
	stream, err := c.Dispatcher().WatchJob(ctx, watch)
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
		stream.Close()
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("WatchJob with an unknown field = %v, want invalid_argument", err)
	}

	// The server is fine, and the same job spelt right is accepted.
	fixed := strings.Replace(misspelt, "restartStrateg", "restartStrategy", 1)
	client := jobplanev1connect.NewDispatcherServiceClient(h1, c.URL(), connect.WithCodec(rawJSON(fixed)))
	out, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{})
	if err != nil || !out.GetCreated() {
		t.Fatalf("SubmitJob spelt right = %v, %v; want created", out, err)
	}
	plan, err := c.Store().GetExecutionPlan(ctx, "typo")
	if err != nil || plan.GetJobGraph().GetConfig().GetRestartStrategy().GetFixedDelay().GetAttempts() != 3 {
		t.Errorf("stored plan = %v, %v; want the fixed-delay restart strategy", plan, err)
	}
}

// assertNoJob fails the test if job id exists in any form.
func assertNoJob(t *testing.T, ctx context.Context, c *localcluster.Cluster, id string) {
	t.Helper()
	if _, err := c.Store().GetExecutionPlan(ctx, id); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("plan of %s: %v, want none", id, err)
	}
	if _, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob(%s) = %v, want not_found", id, err)
	}
}

func withUnknownField[M proto.Message](m M, num protowire.Number) M {
	r := m.ProtoReflect()
	r.SetUnknown(protowire.AppendVarint(protowire.AppendTag(r.GetUnknown(), num, protowire.VarintType), 1))
	return m
}
