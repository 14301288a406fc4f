package unknownfield_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/internal/unknownfield"
)

// withUnknown returns m with an unknown varint field num added.
func withUnknown[M proto.Message](m M, num protowire.Number) M {
	r := m.ProtoReflect()
	b := protowire.AppendTag(r.GetUnknown(), num, protowire.VarintType)
	r.SetUnknown(protowire.AppendVarint(b, 1))
	return m
}

func paths(fields []apierror.Field) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f.Path
	}
	return out
}

func TestFindInBinary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		msg  proto.Message
		want []string
	}{
		{"clean", &jobplanev1.SubmitJobRequest{JobId: "j", JobGraph: &jobplanev1.JobGraph{Config: &jobplanev1.JobConfig{}}}, []string{}},
		{"top level", withUnknown(&jobplanev1.SubmitJobRequest{JobId: "j"}, 9), []string{"9"}},
		{"nested", &jobplanev1.SubmitJobRequest{JobGraph: &jobplanev1.JobGraph{Config: withUnknown(&jobplanev1.JobConfig{}, 99)}}, []string{"job_graph.config.99"}},
		{"list element", &jobplanev1.SubmitJobRequest{JobGraph: &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "a"}, withUnknown(&jobplanev1.JobVertex{Id: "b"}, 7)}}}, []string{"job_graph.vertices[1].7"}},
		{"oneof member", &jobplanev1.SubmitJobRequest{JobGraph: &jobplanev1.JobGraph{Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{
			Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: withUnknown(&jobplanev1.RestartStrategy_FixedDelay{Attempts: 1}, 9)},
		}}}}, []string{"job_graph.config.restart_strategy.fixed_delay.9"}},
		{"several, sorted", withUnknown(&jobplanev1.SubmitJobRequest{JobGraph: withUnknown(&jobplanev1.JobGraph{}, 12)}, 10), []string{"10", "job_graph.12"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Through the wire, as a request arrives.
			b, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			got := tc.msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(b, got); err != nil {
				t.Fatal(err)
			}
			if p := paths(unknownfield.Find(got)); !slices.Equal(p, tc.want) {
				t.Errorf("Find = %q, want %q", p, tc.want)
			}
		})
	}
}

// The JSON codec decodes what it knows as connect's own codec does, and
// records the rest for Find.
func TestFindInJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"clean, JSON names", `{"jobId":"j","jobGraph":{"config":{"restartStrategy":{"fixedDelay":{"attempts":2,"delay":"1s"}},"schedulingMode":"SCHEDULING_MODE_EAGER"}}}`, []string{}},
		{"clean, proto names", `{"job_id":"j","job_graph":{"config":{"restart_strategy":{"none":{}},"client_heartbeat_timeout":"3s"}}}`, []string{}},
		{"misspelt at depth", `{"jobId":"j","jobGraph":{"config":{"restartStrateg":{"fixedDelay":{"attempts":3}}}}}`, []string{"job_graph.config.restartStrateg"}},
		{"misspelt at the top", `{"jobid":"j"}`, []string{"jobid"}},
		{"in a list element", `{"jobGraph":{"vertices":[{"id":"a"},{"id":"b","parallelizm":2}]}}`, []string{"job_graph.vertices[1].parallelizm"}},
		{"map keys are data", `{"jobGraph":{"vertices":[{"id":"a","config":{"anything":"x"}}],"config":{"parallelismOverrides":{"a":2}}}}`, []string{}},
		{"unknown enum name", `{"jobGraph":{"config":{"schedulingMode":"SCHEDULING_MODE_EGAR"}}}`, []string{"job_graph.config.scheduling_mode"}},
		{"enum number kept", `{"jobGraph":{"config":{"schedulingMode":7}}}`, []string{}},
		{"null", `{"jobGraph":null}`, []string{}},
		{"several, sorted", `{"zz":1,"jobGraph":{"nmae":"x","edges":[{"distribution":"ALL"}]}}`, []string{"job_graph.edges[0].distribution", "job_graph.nmae", "zz"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msg := &jobplanev1.SubmitJobRequest{}
			if err := unknownfield.NewJSONCodec().Unmarshal([]byte(tc.body), msg); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if p := paths(unknownfield.Find(msg)); !slices.Equal(p, tc.want) {
				t.Errorf("Find = %q, want %q", p, tc.want)
			}
			// What the codec knew it decoded as connect's codec does.
			want := &jobplanev1.SubmitJobRequest{}
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(tc.body), want); err != nil {
				t.Fatal(err)
			}
			msg.ProtoReflect().SetUnknown(nil)
			if !proto.Equal(msg, want) {
				t.Errorf("decoded %v, want %v", msg, want)
			}
		})
	}
}

func TestMalformedJSONIsStillAnError(t *testing.T) {
	t.Parallel()
	for _, body := range []string{``, `{`, `{"jobId":1}`, `[]`} {
		if err := unknownfield.NewJSONCodec().Unmarshal([]byte(body), &jobplanev1.SubmitJobRequest{}); err == nil {
			t.Errorf("Unmarshal(%q) = nil, want an error", body)
		}
	}
}

// A handler with HandlerOptions refuses unknown fields in unary and
// server-streaming calls, in binary and JSON, with BadRequest details and
// without calling the implementation; calls without them are served.
func TestHandlerRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("/test.v1.Test/Unary", connect.NewUnaryHandler("/test.v1.Test/Unary",
		func(context.Context, *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			calls.Add(1)
			return connect.NewResponse(&jobplanev1.SubmitJobResponse{}), nil
		}, unknownfield.HandlerOptions()...))
	mux.Handle("/test.v1.Test/Stream", connect.NewServerStreamHandler("/test.v1.Test/Stream",
		func(_ context.Context, _ *connect.Request[jobplanev1.SubmitJobRequest], s *connect.ServerStream[jobplanev1.SubmitJobResponse]) error {
			calls.Add(1)
			return s.Send(&jobplanev1.SubmitJobResponse{})
		}, unknownfield.HandlerOptions()...))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	clean := &jobplanev1.SubmitJobRequest{JobId: "j", JobGraph: &jobplanev1.JobGraph{Config: &jobplanev1.JobConfig{}}}
	unknown := &jobplanev1.SubmitJobRequest{JobId: "j", JobGraph: &jobplanev1.JobGraph{Config: withUnknown(&jobplanev1.JobConfig{}, 99)}}
	for _, tc := range []struct {
		name string
		opts []connect.ClientOption
		req  *jobplanev1.SubmitJobRequest
		want string // the violation's path; empty for a served call
	}{
		{"connect/binary/clean", nil, clean, ""},
		{"connect/binary/unknown", nil, unknown, "job_graph.config.99"},
		{"grpcweb/binary/unknown", []connect.ClientOption{connect.WithGRPCWeb()}, unknown, "job_graph.config.99"},
		{"connect/json/clean", []connect.ClientOption{connect.WithProtoJSON()}, clean, ""},
		{"connect/json/unknown", []connect.ClientOption{connect.WithCodec(rawJSON(`{"jobId":"j","jobGraph":{"config":{"restartStrateg":{}}}}`))}, clean, "job_graph.config.restartStrateg"},
		{"grpcweb/json/unknown", []connect.ClientOption{connect.WithGRPCWeb(), connect.WithCodec(rawJSON(`{"jobGraph":{"config":{"restartStrateg":{}}}}`))}, clean, "job_graph.config.restartStrateg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := calls.Load()
			unary := connect.NewClient[jobplanev1.SubmitJobRequest, jobplanev1.SubmitJobResponse](srv.Client(), srv.URL+"/test.v1.Test/Unary", tc.opts...)
			_, err := unary.CallUnary(context.Background(), connect.NewRequest(tc.req))
			expect(t, "unary", err, tc.want)

			stream := connect.NewClient[jobplanev1.SubmitJobRequest, jobplanev1.SubmitJobResponse](srv.Client(), srv.URL+"/test.v1.Test/Stream", tc.opts...)
			s, err := stream.CallServerStream(context.Background(), connect.NewRequest(tc.req))
			if err == nil {
				for s.Receive() {
				}
				err = s.Err()
				s.Close()
			}
			expect(t, "stream", err, tc.want)

			wantCalls := int32(2)
			if tc.want != "" {
				wantCalls = 0
			}
			if got := calls.Load() - before; got != wantCalls {
				t.Errorf("the implementation ran %d times, want %d", got, wantCalls)
			}
		})
	}
}

func expect(t *testing.T, call string, err error, wantPath string) {
	t.Helper()
	if wantPath == "" {
		if err != nil {
			t.Errorf("%s: err = %v, want success", call, err)
		}
		return
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("%s: err = %v, want invalid_argument", call, err)
		return
	}
	if p := paths(apierror.Violations(err)); !slices.Equal(p, []string{wantPath}) {
		t.Errorf("%s: violations = %q, want [%q]", call, p, wantPath)
	}
}

// rawJSON is a client codec that sends a fixed JSON body, whatever the
// message, so a test can send what a generated client never would.
type rawJSON string

func (rawJSON) Name() string                  { return "json" }
func (r rawJSON) Marshal(any) ([]byte, error) { return []byte(r), nil }
func (rawJSON) Unmarshal(b []byte, m any) error {
	return protojson.Unmarshal(b, m.(proto.Message))
}
