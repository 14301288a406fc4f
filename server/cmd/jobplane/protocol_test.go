package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/internal/testcert"
)

// protocolServer is a `jobplane standalone` process with two
// TaskExecutors of four slots, which has run the job "proto" to its end.
type protocolServer struct {
	url  string // http:// or https://
	addr string
	cert *testcert.Cert // nil in the clear
}

// startProtocolServer starts a standalone process, with TLS if cert is
// set, waits for its TaskExecutors and runs the job "proto" on it.
func startProtocolServer(t *testing.T, cert *testcert.Cert) *protocolServer {
	t.Helper()
	args := []string{"standalone", "--data-dir", t.TempDir(), "--task-executors", "2", "--slots", "4"}
	scheme := "http://"
	if cert != nil {
		args = append(args, "--tls-cert", cert.CertFile, "--tls-key", cert.KeyFile, "--tls-ca", cert.CertFile)
		scheme = "https://"
	}
	p, addr := startServer(t, args[0], args[1:]...)
	s := &protocolServer{url: scheme + addr, addr: addr, cert: cert}
	client := jobplanev1connect.NewDispatcherServiceClient(s.h2Client(t), s.url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		resp, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err == nil && resp.GetTaskExecutorCount() == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s not ready: %v, %v\n%s", s.url, resp, err, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	graph := &jobplanev1.JobGraph{Name: "proto", Vertices: []*jobplanev1.JobVertex{{Id: "work", Invokable: "noop", Parallelism: 2}}}
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "proto", JobGraph: graph}); err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}
	res, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "proto", Wait: true})
	if err != nil || res.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result of proto = %v, %v; want FINISHED", res, err)
	}
	return s
}

// h1Client speaks HTTP/1.1 only, over TLS for an https:// server.
func (s *protocolServer) h1Client(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetHTTP1(true)
	tr := &http.Transport{Protocols: &p}
	if s.cert != nil {
		tr.TLSClientConfig = s.cert.ClientConfig()
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// h2Client speaks HTTP/2: with prior knowledge in the clear (h2c), by
// ALPN over TLS.
func (s *protocolServer) h2Client(t *testing.T) *http.Client {
	var p http.Protocols
	tr := &http.Transport{Protocols: &p}
	if s.cert != nil {
		p.SetHTTP2(true)
		tr.TLSClientConfig = s.cert.ClientConfig()
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// checkOverview asserts what GetClusterOverview says of the server.
func (s *protocolServer) checkOverview(t *testing.T, resp *jobplanev1.GetClusterOverviewResponse) {
	t.Helper()
	if resp.GetTaskExecutorCount() != 2 || resp.GetSlotCount() != 8 || resp.GetFinishedJobCount() != 1 || resp.GetLeader().GetAddress() != s.url {
		t.Errorf("overview = %v; want 2 TaskExecutors, 8 slots, 1 finished job, leader %s", resp, s.url)
	}
}

// protoSeen records the HTTP version and TLS of the answers a client got.
type protoSeen struct {
	next  http.RoundTripper
	major int
	tls   bool
}

func (p *protoSeen) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(r)
	if err == nil {
		p.major, p.tls = resp.ProtoMajor, resp.TLS != nil
	}
	return resp, err
}

// Every protocol on one port, in the clear and over TLS: connect-go with
// the Connect, gRPC and gRPC-Web protocols over HTTP/1.1 and HTTP/2,
// server streams (WatchJob, ObserveLeader) over HTTP/1.1, grpc-go's own
// client, and buf curl through server reflection. Each answer's content is
// checked.
func TestProtocols(t *testing.T) {
	servers := map[string]*protocolServer{
		"h2c": startProtocolServer(t, nil),
		"tls": startProtocolServer(t, testcert.New(t)),
	}
	plain, secure := servers["h2c"], servers["tls"]

	t.Run("connect-go", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			server    *protocolServer
			client    func(*testing.T) *http.Client
			opts      []connect.ClientOption
			wantMajor int
		}{
			{"connect/http1.1", plain, plain.h1Client, nil, 1},
			{"grpcweb/http1.1", plain, plain.h1Client, []connect.ClientOption{connect.WithGRPCWeb()}, 1},
			{"connect/h2c", plain, plain.h2Client, nil, 2},
			{"grpc/h2c", plain, plain.h2Client, []connect.ClientOption{connect.WithGRPC()}, 2},
			{"connect/tls-http1.1", secure, secure.h1Client, nil, 1},
			{"grpcweb/tls-http1.1", secure, secure.h1Client, []connect.ClientOption{connect.WithGRPCWeb()}, 1},
			{"connect/tls-h2", secure, secure.h2Client, nil, 2},
			{"grpc/tls-h2", secure, secure.h2Client, []connect.ClientOption{connect.WithGRPC()}, 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				seen := &protoSeen{next: tc.client(t).Transport}
				client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: seen}, tc.server.url, tc.opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				resp, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
				if err != nil {
					t.Fatalf("GetClusterOverview: %v", err)
				}
				tc.server.checkOverview(t, resp)
				res, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "proto"})
				if err != nil || res.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
					t.Errorf("GetJobResult(proto) = %v, %v; want FINISHED", res, err)
				}
				if seen.major != tc.wantMajor || seen.tls != (tc.server.cert != nil) {
					t.Errorf("answered over HTTP/%d (TLS %v), want HTTP/%d (TLS %v)", seen.major, seen.tls, tc.wantMajor, tc.server.cert != nil)
				}
			})
		}
	})

	t.Run("streams over HTTP/1.1", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			server *protocolServer
			opts   []connect.ClientOption
		}{
			{"connect", plain, nil},
			{"grpcweb", plain, []connect.ClientOption{connect.WithGRPCWeb()}},
			{"connect/tls", secure, nil},
			{"grpcweb/tls", secure, []connect.ClientOption{connect.WithGRPCWeb()}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				seen := &protoSeen{next: tc.server.h1Client(t).Transport}
				httpClient := &http.Client{Transport: seen}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()

				// WatchJob of an ended job: its current state, FINISHED,
				// then the stream's end.
				watch, err := jobplanev1connect.NewDispatcherServiceClient(httpClient, tc.server.url, tc.opts...).
					WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: "proto"})
				if err != nil {
					t.Fatalf("WatchJob: %v", err)
				}
				var statuses []jobplanev1.JobStatus
				for watch.Receive() {
					if job := watch.Msg().GetJob(); job != nil {
						statuses = append(statuses, job.GetStatus())
					}
				}
				if err := watch.Err(); err != nil {
					t.Fatalf("WatchJob stream: %v", err)
				}
				watch.Close()
				if len(statuses) == 0 || statuses[len(statuses)-1] != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
					t.Errorf("WatchJob statuses = %v, want them to end FINISHED", statuses)
				}
				if seen.major != 1 {
					t.Errorf("WatchJob over HTTP/%d, want HTTP/1.1", seen.major)
				}

				// ObserveLeader: the first event names the leader.
				observe, err := hastorev1connect.NewHAStoreServiceClient(httpClient, tc.server.url, tc.opts...).
					ObserveLeader(ctx, &hastorev1.ObserveLeaderRequest{Election: election.JobManager})
				if err != nil {
					t.Fatalf("ObserveLeader: %v", err)
				}
				defer observe.Close()
				for observe.Receive() {
					if l := observe.Msg().GetLeader(); l != nil {
						if l.GetAddress() != tc.server.url {
							t.Errorf("ObserveLeader: leader %v, want address %s", l, tc.server.url)
						}
						break
					}
				}
				if err := observe.Err(); err != nil {
					t.Errorf("ObserveLeader stream: %v", err)
				}
				if seen.major != 1 {
					t.Errorf("ObserveLeader over HTTP/%d, want HTTP/1.1", seen.major)
				}
			})
		}
	})

	t.Run("grpc-go", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			server *protocolServer
			creds  credentials.TransportCredentials
		}{
			{"h2c", plain, insecure.NewCredentials()},
			{"tls", secure, credentials.NewTLS(secure.cert.ClientConfig())},
		} {
			t.Run(tc.name, func(t *testing.T) {
				conn, err := grpc.NewClient(tc.server.addr, grpc.WithTransportCredentials(tc.creds))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				overview := new(jobplanev1.GetClusterOverviewResponse)
				if err := conn.Invoke(ctx, jobplanev1connect.DispatcherServiceGetClusterOverviewProcedure, &jobplanev1.GetClusterOverviewRequest{}, overview); err != nil {
					t.Fatalf("GetClusterOverview: %v", err)
				}
				tc.server.checkOverview(t, overview)

				stream, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "WatchJob", ServerStreams: true}, jobplanev1connect.DispatcherServiceWatchJobProcedure)
				if err != nil {
					t.Fatalf("WatchJob: %v", err)
				}
				if err := stream.SendMsg(&jobplanev1.WatchJobRequest{JobId: "proto"}); err != nil {
					t.Fatal(err)
				}
				if err := stream.CloseSend(); err != nil {
					t.Fatal(err)
				}
				var statuses []jobplanev1.JobStatus
				for {
					msg := new(jobplanev1.WatchJobResponse)
					if err := stream.RecvMsg(msg); errors.Is(err, io.EOF) {
						break
					} else if err != nil {
						t.Fatalf("WatchJob stream: %v", err)
					}
					if job := msg.GetJob(); job != nil {
						statuses = append(statuses, job.GetStatus())
					}
				}
				if len(statuses) == 0 || statuses[len(statuses)-1] != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
					t.Errorf("WatchJob statuses = %v, want them to end FINISHED", statuses)
				}
			})
		}
	})

	t.Run("buf curl", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			server *protocolServer
			flags  []string
		}{
			{"grpc/h2c", plain, []string{"--http2-prior-knowledge", "--protocol", "grpc"}},
			{"connect/http1.1", plain, nil},
			{"grpcweb/http1.1", plain, []string{"--protocol", "grpcweb"}},
			{"grpc/tls", secure, []string{"--cacert", secure.cert.CertFile, "--protocol", "grpc"}},
			{"connect/tls", secure, []string{"--cacert", secure.cert.CertFile}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				services := strings.Fields(bufCurl(t, append(tc.flags, "--list-services", tc.server.url)...))
				for _, want := range []string{jobplanev1connect.DispatcherServiceName, hastorev1connect.HAStoreServiceName, "grpc.health.v1.Health"} {
					if !slices.Contains(services, want) {
						t.Errorf("--list-services = %v, lacks %s", services, want)
					}
				}
				out := bufCurl(t, append(tc.flags, "--data", "{}", tc.server.url+jobplanev1connect.DispatcherServiceGetClusterOverviewProcedure)...)
				var overview struct {
					Leader            struct{ Address string }
					TaskExecutorCount int
					SlotCount         int
				}
				if err := json.Unmarshal([]byte(out), &overview); err != nil {
					t.Fatalf("GetClusterOverview answer %q: %v", out, err)
				}
				if overview.TaskExecutorCount != 2 || overview.SlotCount != 8 || overview.Leader.Address != tc.server.url {
					t.Errorf("GetClusterOverview = %s; want 2 TaskExecutors, 8 slots, leader %s", out, tc.server.url)
				}
			})
		}
	})
}

// bufCurl runs `buf curl args...` from tools.mod at the repository's root
// and returns its standard output. The tools module stands outside the
// repository's workspace (GOWORK=off), so that its dependencies never
// choose the server's versions.
func bufCurl(t *testing.T, args ...string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "-modfile=tools.mod", "buf", "curl"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("buf curl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
