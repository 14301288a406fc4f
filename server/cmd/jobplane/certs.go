package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/jobplane/jobplane/server/internal/certs"
)

const certsUsage = `Usage:
  jobplane certs ca --out DIR [--name NAME] [--validity DURATION]
  jobplane certs issue --ca-dir DIR --name NAME --hosts HOST,... [--out DIR] [--validity DURATION]

Makes a small certificate authority, and certificates it signs, for TLS and
mutual TLS between a cluster's processes (--tls-cert, --tls-key, --tls-ca,
--tls-client-ca). Keys are ECDSA P-256; every certificate is good both as a
server and as a client certificate. For tests and small clusters: there is
no revocation, and the CA's key is a plain file (keep it off the cluster's
machines). Larger installations use their own PKI.

  ca     writes DIR/ca.pem (the CA every process trusts) and DIR/ca-key.pem;
         it refuses to overwrite an existing CA.
  issue  writes OUT/NAME.pem and OUT/NAME-key.pem, signed by the CA in
         --ca-dir, for the hosts (names or IP addresses) others reach the
         process at; it replaces existing files atomically, so a running
         process picks the new ones up at its next connection.
`

// runCerts runs `jobplane certs ca` or `jobplane certs issue`.
func runCerts(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, certsUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch args[0] {
	case "ca":
		return runCertsCA(args[1:], stdout, stderr)
	case "issue":
		return runCertsIssue(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "certs: unknown command %q: want ca or issue\n\n%s", args[0], certsUsage)
	return exitUsage
}

func certsFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("certs "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), certsUsage+"\nFlags of "+name+":\n")
		fs.PrintDefaults()
	}
	return fs
}

func runCertsCA(args []string, stdout, stderr io.Writer) int {
	fs := certsFlagSet("ca", stderr)
	out := fs.String("out", "", "directory to write ca.pem and ca-key.pem into (made if missing)")
	name := fs.String("name", "jobplane CA", "the CA's common name")
	validity := fs.Duration("validity", certs.DefaultCAValidity, "how long the CA is valid")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *out == "" {
		fmt.Fprintln(stderr, "certs ca: --out is required")
		return exitUsage
	}
	ca, err := certs.NewCA(*name, *validity)
	if err == nil {
		err = ca.Write(*out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "certs ca: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "%s\n%s\n", filepath.Join(*out, certs.CACertFile), filepath.Join(*out, certs.CAKeyFile))
	return exitOK
}

func runCertsIssue(args []string, stdout, stderr io.Writer) int {
	fs := certsFlagSet("issue", stderr)
	caDir := fs.String("ca-dir", "", "`directory` of the CA (ca.pem and ca-key.pem, as jobplane certs ca wrote them)")
	name := fs.String("name", "", "name of the certificate: its common name, and the files' names NAME.pem and NAME-key.pem")
	hosts := fs.String("hosts", "", "comma-separated host names and IP addresses the certificate is valid for: those others reach the process at (its -advertise host, or its -listen address)")
	out := fs.String("out", ".", "directory to write NAME.pem and NAME-key.pem into (made if missing)")
	validity := fs.Duration("validity", certs.DefaultValidity, "how long the certificate is valid (at most as long as the CA)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	var missing []string
	for _, f := range []struct{ flag, value string }{{"--ca-dir", *caDir}, {"--name", *name}, {"--hosts", *hosts}} {
		if f.value == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "certs issue: %s required\n", strings.Join(missing, ", "))
		return exitUsage
	}
	if strings.ContainsAny(*name, `/\`) {
		fmt.Fprintf(stderr, "certs issue: --name %q: a name, not a path\n", *name)
		return exitUsage
	}
	ca, err := certs.LoadCA(*caDir)
	if err != nil {
		fmt.Fprintf(stderr, "certs issue: %v\n", err)
		return exitError
	}
	certPEM, keyPEM, err := ca.Issue(*name, strings.Split(*hosts, ","), *validity)
	if err != nil {
		fmt.Fprintf(stderr, "certs issue: %v\n", err)
		return exitUsage
	}
	certFile, keyFile, err := certs.WriteKeyPair(*out, *name, certPEM, keyPEM)
	if err != nil {
		fmt.Fprintf(stderr, "certs issue: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "%s\n%s\n", certFile, keyFile)
	return exitOK
}
