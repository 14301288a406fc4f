package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jobplane/jobplane/server/internal/principal"
)

// Methods of authentication, as principal.Principal.Method names them.
const (
	// MethodToken: a static token of the token file.
	MethodToken = "token"
	// MethodJWT: a JWT of a trusted issuer.
	MethodJWT = "jwt"
)

// DefaultLeeway is the default of Config.Leeway.
const DefaultLeeway = 30 * time.Second

// DefaultKeyRefresh is the default of Config.KeyRefresh.
const DefaultKeyRefresh = 10 * time.Second

// DefaultDiscoveryTimeout bounds OIDC discovery in New when the caller's
// context has no deadline.
const DefaultDiscoveryTimeout = 10 * time.Second

// Config configures an Authenticator. At least one of TokenFile,
// JWKSFile and OIDCIssuer is required (see Enabled).
type Config struct {
	// TokenFile names a static token file: lines `NAME TOKEN` (see
	// docs/security.md), reloaded within a second of a change. Default: none.
	TokenFile string
	// JWKSFile names a JWKS file (RFC 7517) whose public keys sign the
	// JWTs of JWKSIssuer, which is then required. Default: none.
	JWKSFile string
	// JWKSIssuer is the issuer (`iss`) of the JWTs that JWKSFile's keys
	// sign.
	JWKSIssuer string
	// OIDCIssuer is the URL of an OpenID Connect issuer: its keys are
	// discovered from OIDCIssuer/.well-known/openid-configuration, and
	// its JWTs must carry it as `iss`. Default: none.
	OIDCIssuer string
	// Audience is the `aud` that every JWT must carry; required with
	// JWKSFile or OIDCIssuer.
	Audience string
	// Leeway is how long past its expiry a JWT is still taken, for
	// clocks a little apart. Default: DefaultLeeway.
	Leeway time.Duration
	// KeyRefresh is how often, at most, the OIDC issuer's keys are
	// fetched again when a JWT's signature matches none of them (the
	// issuer rotated its keys, or the JWT is bogus). Default:
	// DefaultKeyRefresh.
	KeyRefresh time.Duration
	// HTTPClient fetches the OIDC issuer's discovery document and keys.
	// Default: an http.Client with a 10s timeout.
	HTTPClient *http.Client
	// Logger receives reloads of the token file. Default: slog.Default().
	Logger *slog.Logger
}

// Enabled tells whether the configuration authenticates anyone: without
// any source of credentials, authentication is off.
func (c Config) Enabled() bool {
	return c.TokenFile != "" || c.JWKSFile != "" || c.OIDCIssuer != ""
}

// Validate reports a configuration that cannot be used, before any file
// is read.
func (c Config) Validate() error {
	var errs []error
	jwt := c.JWKSFile != "" || c.OIDCIssuer != ""
	if jwt && c.Audience == "" {
		errs = append(errs, errors.New("auth: JWTs need an audience to check"))
	}
	if !jwt && c.Audience != "" {
		errs = append(errs, errors.New("auth: an audience is only checked on JWTs: give a JWKS file or an OIDC issuer"))
	}
	if c.JWKSFile != "" && c.JWKSIssuer == "" {
		errs = append(errs, errors.New("auth: a JWKS file needs the issuer whose JWTs its keys sign"))
	}
	if c.JWKSFile == "" && c.JWKSIssuer != "" {
		errs = append(errs, errors.New("auth: a JWKS issuer needs a JWKS file of its keys"))
	}
	if c.JWKSFile != "" && c.OIDCIssuer != "" && c.JWKSIssuer == c.OIDCIssuer {
		errs = append(errs, errors.New("auth: the JWKS file's issuer and the OIDC issuer are the same"))
	}
	if c.Leeway < 0 || c.KeyRefresh < 0 {
		errs = append(errs, errors.New("auth: the leeway and the key refresh must not be negative"))
	}
	return errors.Join(errs...)
}

// Authenticator finds the principal of a bearer token. It is safe for
// concurrent use.
type Authenticator struct {
	tokens *tokenFile
	jwts   []*jwtVerifier
}

// New reads the files of cfg and discovers its OIDC issuer (within ctx,
// or DefaultDiscoveryTimeout if ctx has no deadline), and returns an
// Authenticator; it fails on a file that cannot be read or parsed, and on
// an issuer that cannot be discovered.
func New(ctx context.Context, cfg Config) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("auth: no token file, JWKS file or OIDC issuer")
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = DefaultLeeway
	}
	if cfg.KeyRefresh == 0 {
		cfg.KeyRefresh = DefaultKeyRefresh
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	a := &Authenticator{}
	if cfg.TokenFile != "" {
		f, err := openTokenFile(cfg.TokenFile, cfg.Logger)
		if err != nil {
			return nil, fmt.Errorf("auth: token file: %w", err)
		}
		a.tokens = f
	}
	if cfg.JWKSFile != "" {
		v, err := newJWKSVerifier(cfg.JWKSFile, cfg.JWKSIssuer, cfg.Audience, cfg.Leeway)
		if err != nil {
			return nil, fmt.Errorf("auth: JWKS file: %w", err)
		}
		a.jwts = append(a.jwts, v)
	}
	if cfg.OIDCIssuer != "" {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, DefaultDiscoveryTimeout)
			defer cancel()
		}
		v, err := newOIDCVerifier(ctx, cfg.OIDCIssuer, cfg.Audience, cfg.Leeway, cfg.KeyRefresh, cfg.HTTPClient)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		a.jwts = append(a.jwts, v)
	}
	return a, nil
}

// Authenticate returns the principal of a bearer token: the name of a
// static token, or a JWT's subject (`sub`) — prefixed with its issuer and
// "#" when two issuers are trusted (a JWKS file's and an OIDC issuer's),
// so that one issuer cannot speak for the other's subjects. It fails with
// an error wrapping ErrUnauthenticated, whose detail never holds the
// token.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (principal.Principal, error) {
	if token == "" {
		return principal.Principal{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	if a.tokens != nil {
		if name, ok := a.tokens.lookup(token); ok {
			return principal.Principal{Name: name, Method: MethodToken}, nil
		}
	}
	if len(a.jwts) == 0 || strings.Count(token, ".") != 2 {
		return principal.Principal{}, fmt.Errorf("%w: an unknown token", ErrUnauthenticated)
	}
	var errs []error
	for _, v := range a.jwts {
		sub, err := v.verify(ctx, token)
		if err == nil {
			if len(a.jwts) > 1 {
				sub = v.issuer + "#" + sub
			}
			return principal.Principal{Name: sub, Method: MethodJWT}, nil
		}
		errs = append(errs, err)
	}
	return principal.Principal{}, fmt.Errorf("%w: %w", ErrUnauthenticated, errors.Join(errs...))
}
