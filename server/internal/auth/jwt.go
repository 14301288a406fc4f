package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
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
// against its JWKS, which go-oidc fetches with client when it meets a key
// id it does not know (so the issuer's key rotation is followed).
func newOIDCVerifier(ctx context.Context, issuer, audience string, leeway time.Duration, client *http.Client) (*jwtVerifier, error) {
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, client), issuer)
	if err != nil {
		return nil, fmt.Errorf("discovering the OpenID Connect issuer %s: %w", issuer, err)
	}
	v := p.VerifierContext(oidc.ClientContext(context.WithoutCancel(ctx), client), verifierConfig(audience, leeway, nil))
	return &jwtVerifier{issuer: issuer, v: v}, nil
}

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
