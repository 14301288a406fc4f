package webui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// leaderAt is a leader lookup that always answers addr.
func leaderAt(addr string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return addr, nil }
}

func post(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{"jobId":"j"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestLeaderProxyPassesTheCallOn(t *testing.T) {
	type seen struct{ method, path, auth, body string }
	got := make(chan seen, 1)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.Header.Get("Authorization"), string(b)}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"summary":{}}`)
	}))
	defer leader.Close()

	resp := post(t, LeaderProxy(leaderAt(leader.URL), leader.Client()), LeaderPath+"jobplane.v1.DispatcherService/GetJob")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != `{"summary":{}}` {
		t.Fatalf("answer %d %q, want the leader's", resp.StatusCode, body)
	}
	want := seen{http.MethodPost, "/jobplane.v1.DispatcherService/GetJob", "Bearer secret", `{"jobId":"j"}`}
	if s := <-got; s != want {
		t.Fatalf("the leader got %+v, want %+v", s, want)
	}
}

func TestLeaderProxyPassesOnlyThePublicService(t *testing.T) {
	called := make(chan string, 10)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called <- r.URL.Path }))
	defer leader.Close()
	h := LeaderProxy(leaderAt(leader.URL), leader.Client())
	for _, path := range []string{
		LeaderPath + "jobplane.cluster.v1.ResourceManagerService/RegisterTaskExecutor",
		LeaderPath + "jobplane.hastore.v1.HAStoreService/Put",
		LeaderPath + "jobplane.v1.DispatcherService/",
		LeaderPath + "jobplane.v1.DispatcherService/GetJob/more",
		LeaderPath + "metrics",
	} {
		if resp := post(t, h, path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", path, resp.StatusCode)
		}
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + LeaderPath + "jobplane.v1.DispatcherService/GetJob")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET: %d, want 404", resp.StatusCode)
	}
	select {
	case p := <-called:
		t.Fatalf("the leader was called at %s", p)
	default:
	}
}

func TestLeaderProxyWithoutALeaderSaysUnavailable(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for name, leader := range map[string]func(context.Context) (string, error){
		"none known":   leaderAt(""),
		"lookup fails": func(context.Context) (string, error) { return "", errors.New("store unavailable") },
		"not a URL":    leaderAt("127.0.0.1:1"),
		"down":         leaderAt(downURL),
	} {
		t.Run(name, func(t *testing.T) {
			resp := post(t, LeaderProxy(leader, http.DefaultClient), LeaderPath+"jobplane.v1.DispatcherService/GetJob")
			var e struct{ Code, Message string }
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "unavailable" || e.Message == "" {
				t.Fatalf("answer %d %+v, want 503 with a Connect error unavailable", resp.StatusCode, e)
			}
		})
	}
}

func TestLeaderProxyPassesAStreamOnAsItComes(t *testing.T) {
	release := make(chan struct{})
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/connect+json")
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second\n")
	}))
	defer leader.Close()
	defer close(release)
	resp := post(t, LeaderProxy(leaderAt(leader.URL), leader.Client()), LeaderPath+"jobplane.v1.DispatcherService/WatchJob")
	lines := make(chan string)
	go func() {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		lines <- line
	}()
	select {
	case line := <-lines:
		if line != "first\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream's first message was held back by the proxy")
	}
}
