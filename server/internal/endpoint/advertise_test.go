package endpoint_test

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/jobplane/jobplane/server/internal/endpoint"
)

func TestParseAdvertise(t *testing.T) {
	for _, tc := range []struct {
		raw, want string // want "" means refused
	}{
		{"http://host1:8080", "http://host1:8080"},
		{"http://host1:8080/", "http://host1:8080"},
		{"HTTPS://host1:443", "https://host1:443"},
		{"http://10.0.0.5:1", "http://10.0.0.5:1"},
		{"http://[2001:db8::1]:8080", "http://[2001:db8::1]:8080"},
		{"host1:8080", ""},
		{"ftp://host1:8080", ""},
		{"http://host1", ""},
		{"http://host1:", ""},
		{"http://host1:0", ""},
		{"http://host1:65536", ""},
		{"http://:8080", ""},
		{"http://0.0.0.0:8080", ""},
		{"http://[::]:8080", ""},
		{"http://host1:8080/jobplane", ""},
		{"http://host1:8080?x=1", ""},
		{"http://host1:8080?", ""},
		{"http://host1:8080#top", ""},
		{"http://user:pw@host1:8080", ""},
		{"", ""},
	} {
		got, err := endpoint.ParseAdvertise(tc.raw)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParseAdvertise(%q) = %q, want an error", tc.raw, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseAdvertise(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
		}
	}
}

// A listen address on every interface is refused without an advertised
// URL, before anything is bound, and accepted with one.
func TestUnspecifiedListenNeedsAdvertise(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", "[::]:0", ":0"} {
		err := endpoint.Config{Listen: listen}.Validate()
		if !errors.Is(err, endpoint.ErrAdvertiseRequired) {
			t.Errorf("Validate(listen %q, no advertise) = %v, want ErrAdvertiseRequired", listen, err)
		}
		if _, err := endpoint.Listen(endpoint.Config{Listen: listen}, slog.New(slog.NewTextHandler(io.Discard, nil))); !errors.Is(err, endpoint.ErrAdvertiseRequired) {
			t.Errorf("Listen(%q, no advertise) = %v, want ErrAdvertiseRequired", listen, err)
		}
		if err := (endpoint.Config{Listen: listen, Advertise: "http://host1:8080"}).Validate(); err != nil {
			t.Errorf("Validate(listen %q, advertised) = %v, want nil", listen, err)
		}
	}
	if err := (endpoint.Config{Listen: "127.0.0.1:0", Advertise: "http://host1"}).Validate(); err == nil {
		t.Error("Validate with an advertised URL without a port: no error")
	}
}

// URL is the advertised URL when one is set, and the bound address
// otherwise; the endpoint serves on the bound address either way.
func TestURLIsTheAdvertisedOne(t *testing.T) {
	ep := start(t)
	if want := "http://" + ep.Addr().String(); ep.URL() != want {
		t.Errorf("URL() = %q, want the bound %q", ep.URL(), want)
	}
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", Advertise: "http://proxy.example:9000/"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if got, want := ep.URL(), "http://proxy.example:9000"; got != want {
		t.Errorf("URL() = %q, want the advertised %q", got, want)
	}
}
