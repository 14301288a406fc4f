package endpoint

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
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
	return loadKeyPair(c.TLSCertFile, c.TLSKeyFile)
}

// serverTLS is the TLS configuration of an endpoint serving the
// certificate of cert: TLS 1.2 or later, HTTP/2 or HTTP/1.1 as the
// client's ALPN asks. Each handshake takes the current certificate, and
// with clientCAs the current authorities: a client certificate is then
// asked for, and one that they did not sign fails the handshake (a client
// that presents none gets through; see requireClientCert).
func serverTLS(cert *reloading[*tls.Certificate], clientCAs *reloading[*x509.CertPool]) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   []string{"h2", "http/1.1"},
				Certificates: []tls.Certificate{*cert.get()},
			}
			if clientCAs != nil {
				c.ClientCAs, c.ClientAuth = clientCAs.get(), tls.VerifyClientCertIfGiven
			}
			return c, nil
		},
	}
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
// https:// peers (see transport.NewClient) that trusts the certificate
// authorities in the PEM file caFile instead of the system's roots. An
// empty caFile returns nil: the system's roots. It fails if the file
// cannot be read or holds no PEM certificate. The file is read once; see
// NewClientTLS for files read again when they change.
func ClientTLSConfig(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
