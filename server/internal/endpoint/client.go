package endpoint

import "net/http"

// NewClient returns the HTTP client components use to call each other:
// unencrypted HTTP/2 with prior knowledge, so that every call between two
// processes shares one connection.
func NewClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}
