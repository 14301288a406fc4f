package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// signingAlgs are the JWS algorithms accepted for JWTs verified against
// a JWKS file (an OIDC issuer's are those its discovery document lists).
// Never "none", never HMAC: a key in the file is public.
var signingAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA,
}

// jwtVerifier verifies the JWTs of one issuer.
type jwtVerifier struct {
	issuer string
	v      *oidc.IDTokenVerifier
}

// verifierConfig is go-oidc's configuration for audience, algorithms and
// an expiry checked with leeway.
func verifierConfig(audience string, leeway time.Duration, algs []string) *oidc.Config {
	return &oidc.Config{
		ClientID:             audience,
		SupportedSigningAlgs: algs,
		// A token is taken until leeway past its expiry, for clocks a
		// little apart.
		Now: func() time.Time { return time.Now().Add(-leeway) },
	}
}

// readJWKS reads the public keys of a JWKS file (RFC 7517: a JSON object
// with a "keys" array).
func readJWKS(path string) ([]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("%s: not a JWKS (a JSON object with a \"keys\" array): %w", path, err)
	}
	var keys []any
	for i, k := range set.Keys {
		if !k.Valid() {
			return nil, fmt.Errorf("%s: key %d (kid %q) is not valid", path, i, k.KeyID)
		}
		pub := k.Public()
		if pub.Key == nil {
			return nil, fmt.Errorf("%s: key %d (kid %q) is not an asymmetric key", path, i, k.KeyID)
		}
		keys = append(keys, pub.Key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no keys", path)
	}
	return keys, nil
}

// newJWKSVerifier verifies the JWTs of issuer against the keys of a
// JWKS file.
func newJWKSVerifier(path, issuer, audience string, leeway time.Duration) (*jwtVerifier, error) {
	keys, err := readJWKS(path)
	if err != nil {
		return nil, err
	}
	set := &oidc.StaticKeySet{}
	for _, k := range keys {
		set.PublicKeys = append(set.PublicKeys, k)
	}
	return &jwtVerifier{issuer: issuer, v: oidc.NewVerifier(issuer, set, verifierConfig(audience, leeway, signingAlgs))}, nil
}

// newOIDCVerifier discovers the OpenID Connect issuer at issuer (its
// /.well-known/openid-configuration, within ctx) and verifies JWTs
// against its JWKS, which go-oidc fetches with client when a JWT's
// signature matches no key it holds (so the issuer's key rotation is
// followed) — at most once per refresh, answering other fetches with the
// last keys, so that a flood of bogus JWTs costs the issuer nothing.
func newOIDCVerifier(ctx context.Context, issuer, audience string, leeway, refresh time.Duration, client *http.Client) (*jwtVerifier, error) {
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, client), issuer)
	if err != nil {
		return nil, fmt.Errorf("discovering the OpenID Connect issuer %s: %w", issuer, err)
	}
	keys := &http.Client{Transport: &throttle{next: client, every: refresh}}
	v := p.VerifierContext(oidc.ClientContext(context.WithoutCancel(ctx), keys), verifierConfig(audience, leeway, nil))
	return &jwtVerifier{issuer: issuer, v: v}, nil
}

// throttle sends a GET at most once per period `every`, and answers the
// GETs in between with the last successful answer (the JWKS fetches of
// one verifier, all of one URL).
type throttle struct {
	next  *http.Client
	every time.Duration

	mu     sync.Mutex
	sent   time.Time
	status int
	header http.Header
	body   []byte
}

// RoundTrip implements http.RoundTripper.
func (t *throttle) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock() // held across the fetch: fetches wait for the one in flight
	defer t.mu.Unlock()
	if t.body != nil && time.Since(t.sent) < t.every {
		return t.answer(req), nil
	}
	resp, err := t.next.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes))
	if err != nil {
		return nil, err
	}
	t.sent = time.Now()
	if resp.StatusCode != http.StatusOK {
		// Not kept: the next fetch asks again (once the period passed).
		t.body = nil
		return &http.Response{StatusCode: resp.StatusCode, Status: resp.Status, Header: resp.Header,
			Body: io.NopCloser(bytes.NewReader(body)), Request: req}, nil
	}
	t.status, t.header, t.body = resp.StatusCode, resp.Header, body
	return t.answer(req), nil
}

// answer is the last successful answer, for req; t.mu is held.
func (t *throttle) answer(req *http.Request) *http.Response {
	return &http.Response{StatusCode: t.status, Status: http.StatusText(t.status), Header: t.header.Clone(),
		Body: io.NopCloser(bytes.NewReader(t.body)), ContentLength: int64(len(t.body)), Request: req}
}

// maxJWKSBytes bounds the JWKS read from an issuer.
const maxJWKSBytes = 1 << 20

// verify returns the subject of a valid JWT of the verifier's issuer.
func (j *jwtVerifier) verify(ctx context.Context, token string) (string, error) {
	t, err := j.v.Verify(ctx, token)
	if err != nil {
		var expired *oidc.TokenExpiredError
		if errors.As(err, &expired) {
			return "", fmt.Errorf("the JWT expired at %s", expired.Expiry.UTC().Format(time.RFC3339))
		}
		return "", err
	}
	if t.Subject == "" {
		return "", errors.New("the JWT has no subject (sub)")
	}
	return t.Subject, nil
}
