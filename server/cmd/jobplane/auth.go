package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/server/internal/auth"
	"github.com/jobplane/jobplane/server/internal/principal"
)

// authFlags configure the authentication of the public API's clients,
// and their authorization.
type authFlags struct {
	cfg        auth.Config
	policyFile string
	// options install the authentication, once validate built it; nil
	// while authentication is off.
	options []connect.HandlerOption
}

func (a *authFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.cfg.TokenFile, "auth-token-file", "", "authenticate the public API's clients with the static bearer tokens of this `file`: one \"NAME TOKEN\" per line (# comments), a token at least 16 characters; NAME is the principal; reloaded within a second of a change")
	fs.StringVar(&a.cfg.JWKSFile, "auth-jwks-file", "", "authenticate clients with JWTs signed by the public keys of this JWKS `file` (RFC 7517), issued by -auth-jwks-issuer for -auth-audience; the principal is the JWT's sub")
	fs.StringVar(&a.cfg.JWKSIssuer, "auth-jwks-issuer", "", "the issuer (iss) of the JWTs that -auth-jwks-file's keys sign")
	fs.StringVar(&a.cfg.OIDCIssuer, "auth-oidc-issuer", "", "authenticate clients with JWTs of this OpenID Connect issuer `URL`, for -auth-audience: its keys are discovered from URL/.well-known/openid-configuration at start, and fetched again when it rotates them; the principal is the JWT's sub (ISSUER#sub when -auth-jwks-file is set too)")
	fs.StringVar(&a.cfg.Audience, "auth-audience", "", "the audience (aud) every JWT must name; required with -auth-jwks-file and -auth-oidc-issuer")
	fs.DurationVar(&a.cfg.Leeway, "auth-leeway", auth.DefaultLeeway, "how long past its expiry a JWT is still accepted, for clocks a little apart")
	fs.StringVar(&a.policyFile, "auth-policy", "", "YAML authorization policy `file` (admins, submit, read, cancel: lists of principals, \"*\" for all); default with authentication on: everyone may submit and read, a job's submitter may cancel it")
}

// validate reads the files the flags name, and discovers the OIDC issuer,
// before anything listens; it builds the handler options of the public
// API, logging each call's principal to log.
func (a *authFlags) validate(log *slog.Logger) error {
	if !a.cfg.Enabled() {
		switch {
		case a.policyFile != "":
			return errors.New("-auth-policy needs authentication: -auth-token-file, -auth-jwks-file or -auth-oidc-issuer")
		case a.cfg.Audience != "" || a.cfg.JWKSIssuer != "":
			return errors.New("-auth-audience and -auth-jwks-issuer need -auth-jwks-file or -auth-oidc-issuer")
		}
		return nil
	}
	a.cfg.Logger = log
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	authn, err := auth.New(ctx, a.cfg)
	if err != nil {
		return fmt.Errorf("authentication: %w", err)
	}
	var authz principal.Authorizer = auth.DefaultPolicy()
	if a.policyFile != "" {
		p, err := auth.LoadPolicy(a.policyFile)
		if err != nil {
			return fmt.Errorf("-auth-policy: %w", err)
		}
		authz = p
	}
	a.options = auth.NewInterceptor(authn, authz, log).HandlerOptions()
	return nil
}

// warnOpenCluster warns when clients are authenticated but the cluster's
// own services, served on the same non-loopback port, take any caller:
// whoever reaches the port could then write the HA store or offer slots
// without a token. Client certificates (-tls-client-ca) or a cluster port
// of its own (-cluster-listen) close that.
func (a *authFlags) warnOpenCluster(listen listenFlags, log *slog.Logger) {
	if a.options == nil || listen.cfg.ClientCAFile != "" || listen.security.clusterListen != "" {
		return
	}
	if host, _, err := net.SplitHostPort(listen.cfg.Listen); err != nil || loopback(host) {
		return
	}
	log.Warn("clients of the public API are authenticated, but the cluster's services on the same port (HA store, ResourceManager, JobMaster) take any caller: "+
		"set -tls-client-ca so that only the cluster's certificates reach them, or serve them on a private -cluster-listen address", "listen", listen.cfg.Listen)
}
