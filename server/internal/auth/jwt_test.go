package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/internal/auth"
)

// signingKey is an ES256 key with its key id.
type signingKey struct {
	kid  string
	priv *ecdsa.PrivateKey
}

func newKey(t *testing.T, kid string) signingKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signingKey{kid: kid, priv: priv}
}

func (k signingKey) public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: &k.priv.PublicKey, KeyID: k.kid, Algorithm: string(jose.ES256), Use: "sig"}
}

// claims are a JWT's claims; zero fields are left out.
type claims struct {
	Issuer   string `json:"iss,omitempty"`
	Subject  string `json:"sub,omitempty"`
	Audience string `json:"aud,omitempty"`
	Expiry   int64  `json:"exp,omitempty"`
	IssuedAt int64  `json:"iat,omitempty"`
}

// sign returns the compact JWT of c signed with k.
func (k signingKey) sign(t *testing.T, c claims) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// issuer is an OpenID Connect issuer on 127.0.0.1: its discovery
// document and its JWKS, whose keys the test can rotate.
type issuer struct {
	url string

	mu      sync.Mutex
	keys    []signingKey
	fetches int // of the JWKS
}

func newIssuer(t *testing.T, keys ...signingKey) *issuer {
	t.Helper()
	is := &issuer{keys: keys}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.url, "jwks_uri": is.url + "/keys",
			"authorization_endpoint": is.url + "/authorize", "token_endpoint": is.url + "/token",
			"id_token_signing_alg_values_supported": []string{"ES256"},
			"response_types_supported":              []string{"code"},
			"subject_types_supported":               []string{"public"},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		is.mu.Lock()
		defer is.mu.Unlock()
		is.fetches++
		set := jose.JSONWebKeySet{}
		for _, k := range is.keys {
			set.Keys = append(set.Keys, k.public())
		}
		_ = json.NewEncoder(w).Encode(set)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	is.url = srv.URL
	return is
}

// rotate replaces the issuer's keys.
func (is *issuer) rotate(keys ...signingKey) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = keys
}

const audience = "jobplane-test"

// valid returns claims for sub that k's issuer at iss issues for the
// test's audience, expiring in an hour.
func valid(iss, sub string) claims {
	now := time.Now()
	return claims{Issuer: iss, Subject: sub, Audience: audience, IssuedAt: now.Unix(), Expiry: now.Add(time.Hour).Unix()}
}

// JWTs of an OpenID Connect issuer discovered by URL, beside static
// tokens, on a running cluster: a valid JWT is let in as its subject;
// expired (past the leeway), wrongly signed, of another issuer or
// audience, or without a subject, it is refused with UNAUTHENTICATED.
// The issuer's key rotation is followed.
func TestOIDCIssuer(t *testing.T) {
	t.Parallel()
	k1, other := newKey(t, "k1"), newKey(t, "k1") // other: the same key id, another key
	is := newIssuer(t, k1)
	authn, err := auth.New(context.Background(), auth.Config{TokenFile: tokenFile(t), OIDCIssuer: is.url, Audience: audience, KeyRefresh: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, authn, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	mod := func(f func(*claims)) claims {
		cl := valid(is.url, "dora")
		f(&cl)
		return cl
	}
	now := time.Now()
	for _, tc := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"valid", k1.sign(t, valid(is.url, "dora")), true},
		{"expired within the leeway", k1.sign(t, mod(func(c *claims) { c.Expiry = now.Add(-5 * time.Second).Unix() })), true},
		{"expired", k1.sign(t, mod(func(c *claims) { c.Expiry = now.Add(-2 * time.Minute).Unix() })), false},
		{"without expiry", k1.sign(t, mod(func(c *claims) { c.Expiry = 0 })), false},
		{"wrong signature", other.sign(t, valid(is.url, "dora")), false},
		{"wrong issuer", k1.sign(t, valid("http://127.0.0.1:1/other", "dora")), false},
		{"wrong audience", k1.sign(t, mod(func(c *claims) { c.Audience = "another-service" })), false},
		{"no subject", k1.sign(t, mod(func(c *claims) { c.Subject = "" })), false},
		{"static token beside JWTs", aliceToken, true},
	} {
		unary, stream := calls(ctx, c.client(t, sdk.WithToken(tc.token)))
		if tc.ok {
			if unary != nil {
				t.Errorf("%s: %v, want OK", tc.name, unary)
			}
			wantCode(t, tc.name+", stream", stream, connect.CodeNotFound)
			continue
		}
		wantCode(t, tc.name, unary, connect.CodeUnauthenticated)
		wantCode(t, tc.name+", stream", stream, connect.CodeUnauthenticated)
	}

	dora := c.client(t, sdk.WithToken(k1.sign(t, valid(is.url, "dora"))))
	sub, err := dora.Submit(ctx, sleepJob(t))
	if err != nil {
		t.Fatal(err)
	}
	det, err := dora.Get(ctx, sub.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if got := det.GetSummary().GetSubmittedBy(); got != "dora" {
		t.Errorf("submitted_by %q, want dora (the JWT's sub)", got)
	}

	// The issuer rotates to a new key: JWTs it signs with it are taken
	// (the keys are fetched again for the unknown key, once KeyRefresh
	// passed since the last fetch).
	k2 := newKey(t, "k2")
	is.rotate(k2)
	rotated := c.client(t, sdk.WithToken(k2.sign(t, valid(is.url, "dora"))))
	waitFor(t, "a JWT signed with the rotated key to be taken", func() bool {
		_, err := rotated.Cluster(ctx)
		return err == nil
	})
}

// Bogus JWTs (keys the issuer never had) do not make the server fetch
// the issuer's keys more than once per KeyRefresh.
func TestOIDCKeyFetchesThrottled(t *testing.T) {
	t.Parallel()
	k := newKey(t, "k")
	is := newIssuer(t, k)
	authn, err := auth.New(context.Background(), auth.Config{OIDCIssuer: is.url, Audience: audience, KeyRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := authn.Authenticate(ctx, k.sign(t, valid(is.url, "dora"))); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		bogus := newKey(t, fmt.Sprintf("bogus-%d", i))
		if _, err := authn.Authenticate(ctx, bogus.sign(t, valid(is.url, "mallory"))); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("a JWT of a bogus key: %v, want ErrUnauthenticated", err)
		}
	}
	if _, err := authn.Authenticate(ctx, k.sign(t, valid(is.url, "dora"))); err != nil {
		t.Errorf("a valid JWT after the bogus ones: %v", err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.fetches != 1 {
		t.Errorf("the issuer's keys were fetched %d times for 20 bogus JWTs within KeyRefresh, want 1", is.fetches)
	}
}

// JWTs verified against a JWKS file; with an OIDC issuer as well, each
// issuer's subjects are named with their issuer.
func TestJWKSFile(t *testing.T) {
	t.Parallel()
	k := newKey(t, "file-key")
	data, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{k.public()}})
	if err != nil {
		t.Fatal(err)
	}
	jwks := writeFile(t, "jwks.json", string(data))
	const fileIssuer = "https://issuer.example/"
	ctx := context.Background()

	authn, err := auth.New(ctx, auth.Config{JWKSFile: jwks, JWKSIssuer: fileIssuer, Audience: audience})
	if err != nil {
		t.Fatal(err)
	}
	p, err := authn.Authenticate(ctx, k.sign(t, valid(fileIssuer, "erin")))
	if err != nil || p.Name != "erin" || p.Method != auth.MethodJWT {
		t.Errorf("a valid JWT: %+v, %v; want erin by jwt", p, err)
	}
	for name, tok := range map[string]string{
		"wrong issuer":    k.sign(t, valid("https://other.example/", "erin")),
		"wrong signature": newKey(t, "file-key").sign(t, valid(fileIssuer, "erin")),
		"not a JWT":       "not-a-jwt-at-all-but-long",
	} {
		if _, err := authn.Authenticate(ctx, tok); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
	}

	ok := newKey(t, "o1")
	is := newIssuer(t, ok)
	both, err := auth.New(ctx, auth.Config{JWKSFile: jwks, JWKSIssuer: fileIssuer, OIDCIssuer: is.url, Audience: audience})
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{
		k.sign(t, valid(fileIssuer, "erin")): fileIssuer + "#erin",
		ok.sign(t, valid(is.url, "erin")):    is.url + "#erin",
	} {
		if p, err := both.Authenticate(ctx, tok); err != nil || p.Name != want {
			t.Errorf("with two issuers: %+v, %v; want %s", p, err, want)
		}
	}
	// Neither issuer speaks for the other.
	if _, err := both.Authenticate(ctx, k.sign(t, valid(is.url, "erin"))); err == nil {
		t.Error("a JWT of the OIDC issuer signed with the file's key was taken")
	}
}
