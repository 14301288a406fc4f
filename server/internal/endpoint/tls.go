package endpoint

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
)

// loadCertificate reads the endpoint's certificate and key, if Config
// names them; it returns nil without TLS.
func (c Config) loadCertificate() (*tls.Certificate, error) {
	switch {
	case c.TLSCertFile == "" && c.TLSKeyFile == "":
		return nil, nil
	case c.TLSCertFile == "":
		return nil, errors.New("endpoint: a TLS key needs its certificate")
	case c.TLSKeyFile == "":
		return nil, errors.New("endpoint: a TLS certificate needs its key")
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("endpoint: TLS certificate %s and key %s: %w", c.TLSCertFile, c.TLSKeyFile, err)
	}
	return &cert, nil
}

// serverTLS is the TLS configuration of an endpoint serving cert: TLS 1.2
// or later, HTTP/2 or HTTP/1.1 as the client's ALPN asks (net/http adds
// both to NextProtos for the protocols of tlsProtocols).
func serverTLS(cert *tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
}

// tlsProtocols are the protocols an endpoint serves over TLS: HTTP/2 and
// HTTP/1.1, chosen by ALPN. Unencrypted HTTP/2 is not served on a TLS
// port.
func tlsProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	return &p
}

// ClientTLSConfig returns the TLS configuration of a process's calls to
// https:// peers (see NewTLSClient) that trusts the certificate
// authorities in the PEM file caFile instead of the system's roots. An
// empty caFile returns nil: the system's roots. It fails if the file
// cannot be read or holds no PEM certificate.
func ClientTLSConfig(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("endpoint: TLS certificate authorities: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("endpoint: TLS certificate authorities: %s holds no PEM certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
