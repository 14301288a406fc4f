package endpoint_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// sizer answers ListJobs with page_size jobs of about 40 bytes each, as
// compressible as real summaries are.
type sizer struct {
	jobplanev1connect.UnimplementedDispatcherServiceHandler
}

func (sizer) ListJobs(_ context.Context, req *jobplanev1.ListJobsRequest) (*jobplanev1.ListJobsResponse, error) {
	resp := &jobplanev1.ListJobsResponse{}
	for i := range req.GetPageSize() {
		resp.Jobs = append(resp.Jobs, &jobplanev1.JobSummary{JobId: fmt.Sprintf("job-%06d", i), Name: "word count", Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING})
	}
	return resp, nil
}

// answerBytes returns the encoded size of sizer's answer to page_size n.
func answerBytes(t *testing.T, n int32) int {
	resp, _ := sizer{}.ListJobs(context.Background(), &jobplanev1.ListJobsRequest{PageSize: n})
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// startSizer serves sizer on an endpoint until the test ends, recording
// the Content-Encoding of each request it receives.
func startSizer(t *testing.T) (ep *endpoint.Endpoint, requestEncodings func() []string) {
	t.Helper()
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string
	)
	ep.Mount(jobplanev1connect.DispatcherServiceName, func(opts ...connect.HandlerOption) (string, http.Handler) {
		path, h := jobplanev1connect.NewDispatcherServiceHandler(sizer{}, opts...)
		return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.Header.Get("Content-Encoding"))
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ep, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// An answer under CompressMinBytes goes uncompressed to a client that
// accepts gzip, and one over it compressed, in Connect (Content-Encoding
// of the unary answer) and in gRPC (the compressed flag of the message).
func TestAnswersCompressedOnlyOverThreshold(t *testing.T) {
	const small, large = 2, 200
	if n := answerBytes(t, small); n >= endpoint.CompressMinBytes {
		t.Fatalf("the small answer is %d bytes, not under the threshold", n)
	}
	if n := answerBytes(t, large); n < endpoint.CompressMinBytes {
		t.Fatalf("the large answer is %d bytes, not over the threshold", n)
	}
	ep, _ := startSizer(t)
	url := ep.URL() + jobplanev1connect.DispatcherServiceListJobsProcedure

	for _, tc := range []struct {
		pageSize int32
		want     bool
	}{{small, false}, {large, true}} {
		req, err := proto.Marshal(&jobplanev1.ListJobsRequest{PageSize: tc.pageSize})
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("connect/page=%d", tc.pageSize), func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(req))
			r.Header.Set("Content-Type", "application/proto")
			r.Header.Set("Accept-Encoding", "gzip") // set by hand: the transport leaves the answer as sent
			resp, err := http1Client(t).Do(r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %s", resp.Status)
			}
			if got := resp.Header.Get("Content-Encoding") == "gzip"; got != tc.want {
				t.Errorf("Content-Encoding %q: compressed %v, want %v", resp.Header.Get("Content-Encoding"), got, tc.want)
			}
		})
		t.Run(fmt.Sprintf("grpc/page=%d", tc.pageSize), func(t *testing.T) {
			body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(req)))
			r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(append(body, req...)))
			r.Header.Set("Content-Type", "application/grpc")
			r.Header.Set("Grpc-Accept-Encoding", "gzip")
			r.Header.Set("Te", "trailers")
			resp, err := h2cClient(t).Do(r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			prefix := make([]byte, 5)
			if _, err := io.ReadFull(resp.Body, prefix); err != nil {
				t.Fatalf("reading the answer's first message: %v (grpc-status %q)", err, resp.Trailer.Get("Grpc-Status"))
			}
			if got := prefix[0]&1 == 1; got != tc.want {
				t.Errorf("message flags %#x: compressed %v, want %v", prefix[0], got, tc.want)
			}
		})
	}
}

// The clients of ClientOptions read answers of either kind, and hold
// requests to the same threshold should a caller turn request compression
// on.
func TestClientOptionsThreshold(t *testing.T) {
	ep, requestEncodings := startSizer(t)
	opts := append(endpoint.ClientOptions(), connect.WithSendGzip())
	hc := transport.NewClient(nil)
	t.Cleanup(hc.CloseIdleConnections)
	client := jobplanev1connect.NewDispatcherServiceClient(hc, ep.URL(), opts...)
	ctx := context.Background()
	for _, n := range []int32{2, 200} {
		resp, err := client.ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: n})
		if err != nil || len(resp.GetJobs()) != int(n) {
			t.Errorf("ListJobs(%d) = %d jobs, %v", n, len(resp.GetJobs()), err)
		}
	}
	large := &jobplanev1.ListJobsRequest{PageSize: 1, PageToken: string(bytes.Repeat([]byte("t"), 2*endpoint.CompressMinBytes))}
	if _, err := client.ListJobs(ctx, large); err != nil {
		t.Errorf("ListJobs with a large request: %v", err)
	}
	got := requestEncodings()
	if want := []string{"", "", "gzip"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("request encodings %q, want %q", got, want)
	}
}
