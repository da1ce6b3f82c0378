package runsource

import (
	"crypto/tls"

	"github.com/harnessfacts/harnessfacts/internal/certfile"
)

// SelfSigned makes a certificate for hosts (DNS names or IP addresses) that
// is its own CA, valid for a year: the server's certificate where no other
// exists (`harnessfacts dev`, tests), handed to the node-agent as its CA.
func SelfSigned(hosts ...string) (certPEM, keyPEM []byte, err error) {
	return certfile.SelfSigned("harnessfacts-controller", hosts...)
}

// TLSConfig is a server configuration with one certificate.
func TLSConfig(certPEM, keyPEM []byte) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
