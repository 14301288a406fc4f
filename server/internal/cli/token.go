package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/jobplane/jobplane/sdk"
)

// tokenFlags say which bearer token the client verbs send.
type tokenFlags struct {
	token string
	file  string
}

// registerTokenFlags adds --token and --token-file to every client verb.
// Their environment variables are read when a verb runs, not shown as
// defaults: --help must not print a token.
func registerTokenFlags(root *cobra.Command, a *app) {
	root.PersistentFlags().StringVar(&a.token.token, "token", "",
		"bearer token to authenticate with, for clusters that authenticate their clients (default $"+sdk.TokenEnv+"; prefer --token-file or the variable: a flag shows in the process list)")
	root.PersistentFlags().StringVar(&a.token.file, "token-file", "",
		"file holding the bearer token, read again when it changes (default $"+sdk.TokenFileEnv+")")
}

// option returns the SDK option that sends the token: --token, else
// --token-file, else $JOBPLANE_TOKEN, else $JOBPLANE_TOKEN_FILE; nil for
// none.
func (t tokenFlags) option() (sdk.Option, error) {
	switch {
	case t.token != "" && t.file != "":
		return nil, exit(exitUsage, errors.New("--token and --token-file: give one"))
	case strings.TrimSpace(t.token) != "":
		return sdk.WithToken(t.token), nil
	case t.file != "":
		return tokenFile("--token-file", t.file)
	}
	if v := strings.TrimSpace(os.Getenv(sdk.TokenEnv)); v != "" {
		return sdk.WithToken(v), nil
	}
	if f := strings.TrimSpace(os.Getenv(sdk.TokenFileEnv)); f != "" {
		return tokenFile("$"+sdk.TokenFileEnv, f)
	}
	if t.token != "" {
		return nil, exit(exitUsage, errors.New("--token is blank"))
	}
	return nil, nil
}

// tokenFile checks that a token file can be read before anything is
// sent, and returns the option that sends its token.
func tokenFile(what, path string) (sdk.Option, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, exit(exitUsage, fmt.Errorf("%s: %w", what, err))
	}
	if strings.TrimSpace(string(data)) == "" {
		return nil, exit(exitUsage, fmt.Errorf("%s: %s is empty", what, path))
	}
	return sdk.WithTokenFile(path), nil
}

// authFailure turns a command's end on an UNAUTHENTICATED or
// PERMISSION_DENIED answer into its own exit code and a sentence that
// says what to do; other ends are returned as they are.
func authFailure(ce *codeError) *codeError {
	var cerr *connect.Error
	if ce.err == nil || !errors.As(ce.err, &cerr) {
		return ce
	}
	switch cerr.Code() {
	case connect.CodeUnauthenticated:
		return &codeError{code: exitUnauthenticated, err: fmt.Errorf(
			"not authenticated: the cluster wants a valid bearer token; give one with --token-file, $%s, $%s or --token (the server said: %s)",
			sdk.TokenFileEnv, sdk.TokenEnv, cerr.Message())}
	case connect.CodePermissionDenied:
		msg := cerr.Message()
		if !strings.HasPrefix(msg, "permission denied") {
			msg = "permission denied: " + msg
		}
		return &codeError{code: exitPermissionDenied, err: errors.New(msg)}
	}
	return ce
}
