package endpoint_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// With a cluster endpoint, Mount and SetServing send the services that
// are not public to it; Run serves both and stops both.
func TestClusterSurface(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	public, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", PublicServices: []string{publicService}}, log)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0"}, log)
	if err != nil {
		t.Fatal(err)
	}
	public.SetCluster(cluster)
	if public.ClusterURL() != cluster.URL() {
		t.Errorf("ClusterURL = %s, want %s", public.ClusterURL(), cluster.URL())
	}
	for _, s := range []string{clusterService, publicService} {
		public.Mount(s, func(...connect.HandlerOption) (string, http.Handler) {
			return "/" + s + "/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
		})
	}
	public.SetServing(clusterService, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- public.Run(ctx) }()

	status := func(url, service string) int {
		resp, err := http.Post(url+"/"+service+"/Call", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		url, service string
		want         int
	}{
		{public.URL(), publicService, http.StatusOK},
		{public.URL(), clusterService, http.StatusNotFound},
		{cluster.URL(), clusterService, http.StatusOK},
		{cluster.URL(), publicService, http.StatusNotFound},
	} {
		if got := status(tc.url, tc.service); got != tc.want {
			t.Errorf("%s at %s: %d, want %d", tc.service, tc.url, got, tc.want)
		}
	}
	// The cluster service's health is the cluster endpoint's.
	resp, err := grpchealth.NewClient(http.DefaultClient, cluster.URL()).Check(context.Background(), &grpchealth.CheckRequest{Service: clusterService})
	if err != nil || resp.Status != grpchealth.StatusNotServing {
		t.Errorf("cluster service health on the cluster endpoint = %v, %v; want NOT_SERVING", resp, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := http.Get(cluster.URL() + "/"); err == nil {
		t.Error("the cluster endpoint still serves after Run returned")
	}
	http.DefaultClient.CloseIdleConnections()
}
