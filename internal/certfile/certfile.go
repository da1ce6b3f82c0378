// Package certfile is the serving certificates of HarnessFacts' own HTTPS
// endpoints (the run source, the node-agent's metrics and live output): a
// key pair read from PEM files and read again when they change, or a
// self-signed one made in memory where no other is given.
//
// It does what controller-runtime's certwatcher does without linking
// controller-runtime (and fsnotify): the node-agent, which serves its
// metrics with it, runs on every node and keeps its memory small.
package certfile

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// SelfSigned makes an ECDSA P-256 key and a certificate for hosts (DNS
// names or IP addresses), named commonName, that is its own CA and is valid
// for a year. Clients trust it by being handed it (as a CA or a pin).
func SelfSigned(commonName string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("making a self-signed certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// Reloading is a certificate and key read from PEM files, and read again
// at the first TLS handshake after either file changed: a mounted Secret
// that cert-manager or the chart renews is served without a restart.
//
// It looks at the files (a stat of each) at every handshake rather than
// watching them: a handshake is rare on these endpoints (a scrape every few
// seconds at most, on kept-alive connections), and a Secret volume replaces
// its files through a symbolic link swap that a file watch has to be set
// again after, which certwatcher needs a poll to catch anyway.
type Reloading struct {
	certFile, keyFile string
	log               logr.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	certStat os.FileInfo
	keyStat  os.FileInfo
	// failed is the last pair of files that did not load, so that each
	// is logged once, not at every handshake.
	failedCert, failedKey []byte
}

// Load reads certFile and keyFile; log says when they are read again, or
// could not be.
func Load(certFile, keyFile string, log logr.Logger) (*Reloading, error) {
	r := &Reloading{certFile: certFile, keyFile: keyFile, log: log}
	cs, ks, err := r.stat()
	if err != nil {
		return nil, err
	}
	_, _, cert, err := r.read()
	if err != nil {
		return nil, err
	}
	r.cert, r.certStat, r.keyStat = cert, cs, ks
	return r, nil
}

// GetCertificate is the certificate to present, for tls.Config's
// GetCertificate: the files' latest, or the last that loaded while the
// files are half written or wrong.
func (r *Reloading) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, ks, err := r.stat()
	if err != nil || (same(cs, r.certStat) && same(ks, r.keyStat)) {
		// A file missing for a moment (a Secret volume's swap) keeps the
		// certificate served until the next handshake looks again.
		return r.cert, nil
	}
	certPEM, keyPEM, cert, err := r.read()
	if err != nil {
		if !bytes.Equal(certPEM, r.failedCert) || !bytes.Equal(keyPEM, r.failedKey) {
			r.failedCert, r.failedKey = certPEM, keyPEM
			r.log.Error(err, "the changed certificate files did not load; serving the previous certificate", "certFile", r.certFile, "keyFile", r.keyFile)
		}
		return r.cert, nil
	}
	r.cert, r.certStat, r.keyStat = cert, cs, ks
	r.failedCert, r.failedKey = nil, nil
	r.log.Info("serving the renewed certificate", "certFile", r.certFile, "notAfter", cert.Leaf.NotAfter)
	return r.cert, nil
}

func (r *Reloading) stat() (cert, key os.FileInfo, err error) {
	if cert, err = os.Stat(r.certFile); err != nil {
		return nil, nil, err
	}
	if key, err = os.Stat(r.keyFile); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func (r *Reloading) read() (certPEM, keyPEM []byte, cert *tls.Certificate, err error) {
	if certPEM, err = os.ReadFile(r.certFile); err != nil {
		return nil, nil, nil, err
	}
	if keyPEM, err = os.ReadFile(r.keyFile); err != nil {
		return certPEM, nil, nil, err
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return certPEM, keyPEM, nil, fmt.Errorf("%s and %s: %w", r.certFile, r.keyFile, err)
	}
	return certPEM, keyPEM, &c, nil
}

// same reports whether a file is still the one last read: the same file
// (device and inode: a Secret volume's swap makes new ones), the same
// size and modification time (a file written in place).
func same(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
