package livelog

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"

	"github.com/go-logr/logr"

	"github.com/harnessfacts/harnessfacts/internal/certfile"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
)

// Config says where a log server listens and whom it asks.
type Config struct {
	// BindAddress is where it listens (host:port; port 0 picks one).
	BindAddress string
	// AdvertiseHost is the host (an IP or a DNS name) by which followers
	// reach it: the pod's IP in a cluster. It goes into the certificate
	// and into each run's status.liveOutput.
	AdvertiseHost string
	// Reviews creates TokenReviews and SubjectAccessReviews (a
	// *kube.Client).
	Reviews kubeauth.Creator
	// CAReader reads the cluster's client CA (see ClusterClientCA); nil
	// accepts bearer tokens only.
	CAReader *kube.Client
	Log      logr.Logger
}

// Listening is a log server bound to its address.
type Listening struct {
	Server   *Server
	Listener net.Listener
	// BaseURL is https://ADVERTISE-HOST:PORT.
	BaseURL string
	// CertificateSHA256 is the hex SHA-256 of the certificate's DER, for
	// clients to pin.
	CertificateSHA256 string
}

// Listen makes the server's key and self-signed certificate (for
// AdvertiseHost, kept in memory only, new at each start), binds
// BindAddress and reads the cluster's client CA. Serve it with
// l.Server.Serve(ctx, l.Listener).
func Listen(ctx context.Context, hub *Hub, cfg Config) (*Listening, error) {
	if cfg.AdvertiseHost == "" {
		return nil, fmt.Errorf("livelog: the address followers reach the node-agent by is not known")
	}
	certPEM, keyPEM, err := certfile.SelfSigned(cfg.AdvertiseHost, cfg.AdvertiseHost)
	if err != nil {
		return nil, fmt.Errorf("livelog: making the serving certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("livelog: %w", err)
	}
	sum := sha256.Sum256(cert.Certificate[0])
	srv := &Server{Hub: hub, Reviews: cfg.Reviews, Certificate: cert, Log: cfg.Log}
	if cfg.CAReader != nil {
		pool, err := ClusterClientCA(ctx, cfg.CAReader)
		if err != nil {
			cfg.Log.Info("WARNING the live-output server accepts bearer tokens only: the cluster's client CA could not be read, so users with client certificates cannot follow runs", "reason", err.Error())
		}
		srv.ClientCAs = pool
	}
	l, err := net.Listen("tcp", cfg.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("livelog: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return &Listening{Server: srv, Listener: l, CertificateSHA256: hex.EncodeToString(sum[:]),
		BaseURL: "https://" + net.JoinHostPort(cfg.AdvertiseHost, strconv.Itoa(port))}, nil
}
