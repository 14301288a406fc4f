// Package certs makes a small certificate authority and the certificates
// it signs, with the standard library, for `jobplane certs`: ECDSA P-256
// keys, certificates good for both serverAuth and clientAuth (every
// jobplane process serves and calls), written as PEM files. It is meant
// for tests and small clusters; it keeps no revocation list, and its CA
// key is a file on disk. It must not be used by the server at run time.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jobplane/jobplane/server/internal/atomicfile"
)

// The files of a CA directory (see CA.Write and LoadCA).
const (
	// CACertFile is the CA's certificate: the file every process trusts
	// (--tls-ca and --tls-client-ca).
	CACertFile = "ca.pem"
	// CAKeyFile is the CA's private key, needed only to issue
	// certificates: keep it off the cluster's machines.
	CAKeyFile = "ca-key.pem"
)

// DefaultCAValidity and DefaultValidity are how long a CA and an issued
// certificate are valid by default: ten years and one year.
const (
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	DefaultValidity   = 365 * 24 * time.Hour
)

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named commonName, valid from an hour ago
// (for clocks a little behind) for validity.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		return nil, errors.New("certs: validity must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"jobplane"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Write writes the CA into dir (made if missing) as CACertFile and
// CAKeyFile (mode 0600). It refuses to overwrite an existing CA, whose
// certificates would no longer verify.
func (ca *CA) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	keyPEM, err := encodeKey(ca.Key)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{CAKeyFile, keyPEM, 0o600},
		{CACertFile, encodeCert(ca.Cert.Raw), 0o644},
	} {
		path := filepath.Join(dir, f.name)
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("certs: %s exists: a CA is already there (remove it to make a new one)", path)
			}
			return err
		}
		_, err = fh.Write(f.data)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// LoadCA reads the CA that Write wrote into dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("certs: %s holds no PEM certificate", filepath.Join(dir, CACertFile))
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", filepath.Join(dir, CACertFile), err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("certs: %s holds no PEM key", filepath.Join(dir, CAKeyFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", filepath.Join(dir, CAKeyFile), err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("certs: %s is not the key of %s", filepath.Join(dir, CAKeyFile), filepath.Join(dir, CACertFile))
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Issue makes a certificate for name, signed by the CA, for the hosts
// (IP addresses or DNS names: those others reach the process at), usable
// both as a server and as a client certificate, valid from an hour ago
// for validity (no longer than the CA). It returns the PEM certificate
// and the PEM (PKCS #8) key.
func (ca *CA) Issue(name string, hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if name == "" {
		return nil, nil, errors.New("certs: a certificate needs a name")
	}
	if len(hosts) == 0 {
		return nil, nil, errors.New("certs: a certificate needs at least one host")
	}
	if validity <= 0 {
		return nil, nil, errors.New("certs: validity must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"jobplane"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, nil, errors.New("certs: empty host")
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

// WriteKeyPair writes an issued certificate and key into dir (made if
// missing) as NAME.pem and NAME-key.pem (mode 0600), each replaced
// atomically (a running process that reloads them never reads half a
// file); it returns their paths.
func WriteKeyPair(dir, name string, certPEM, keyPEM []byte) (certFile, keyFile string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := atomicfile.Write(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := atomicfile.Write(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
