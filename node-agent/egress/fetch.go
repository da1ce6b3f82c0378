package egress

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// FetchControl is the socket Control hook of every fetch the node-agent
// makes for a run author: git fixtures, OCI fixtures and environment
// images. A run author names those URLs, and the node-agent dials them from
// the node's network with its own identity, so without a check a run author
// could make it request the cloud's instance metadata service (credentials
// of the node) or other link-local services. Those addresses, and the
// unspecified, multicast and reserved ranges, never hold a git server or a
// registry, so they are refused whoever asks. Loopback, private and cluster
// addresses stay allowed: in-cluster registries and git servers live there,
// as do registries on a developer's loopback (docs/fixtures.md says so).
//
// The hook judges the socket's own address, after resolution: a name that
// resolves (or re-resolves) to a refused address is refused all the same.
// Behind an HTTP proxy (HTTPS_PROXY in the node-agent's environment) it
// judges the proxy's address; the proxy is the operator's.
func FetchControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refusing to connect to %s: %w", address, err)
	}
	switch kind := Classify(ap.Addr(), nil); kind {
	case KindMetadata, KindLinkLocal, KindUnspecified, KindMulticast, KindReserved:
		return &insideError{target: address, msg: fmt.Sprintf(
			"refusing to connect to %s, a %s address: a fixture source or an environment image is never fetched from there", address, kind)}
	}
	return nil
}

// PullControl is FetchControl for the connections of one registry pull,
// which the registry itself leads elsewhere: its token service (the
// WWW-Authenticate realm, whose JSON answer's token go-containerregistry
// then sends to the registry) and its blobs' redirects. When the pull's
// first connection (the registry's) went to a public address, no later one
// may go inside (loopback, private, CGNAT, the cluster's): a run author's
// registry on the internet naming an internal service as its token
// endpoint would have the node-agent fetch it and hand its token over. A
// registry inside may name a token service anywhere, as in-cluster mirrors
// with a public login do. Behind an HTTP proxy every connection is the
// proxy's, and this judges nothing more than FetchControl.
func PullControl() func(network, address string, c syscall.RawConn) error {
	cluster, node := pullCluster()
	var (
		once    sync.Once
		outside bool
	)
	return func(network, address string, c syscall.RawConn) error {
		if err := FetchControl(network, address, c); err != nil {
			return err
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		kind := Classify(ap.Addr(), cluster)
		if kind == "" && slices.Contains(node, ap.Addr().Unmap()) {
			kind = KindNode
		}
		once.Do(func() { outside = kind == "" })
		if outside && kind != "" {
			return &insideError{target: address, msg: fmt.Sprintf(
				"refusing to connect to %s, a %s address: the registry is on a public address, and its token service or redirects are not followed inside", address, kind)}
		}
		return nil
	}
}

// pullInside is what PullControl counts as inside besides Classify's ranges:
// the cluster's Pod and Service ranges and the node's own addresses, which
// may be public (GKE's Service range 34.118.224.0/20). One node-agent
// process serves one node of one cluster: SetPullInside sets them once, at
// its start.
var pullInside atomic.Pointer[struct {
	cluster []netip.Prefix
	node    []netip.Addr
}]

// SetPullInside sets the cluster's ranges and the node's addresses that a
// pull from a public registry never follows its token service or redirects
// to (PullControl).
func SetPullInside(cluster []netip.Prefix, node []netip.Addr) {
	un := make([]netip.Addr, len(node))
	for i, a := range node {
		un[i] = a.Unmap()
	}
	pullInside.Store(&struct {
		cluster []netip.Prefix
		node    []netip.Addr
	}{slices.Clone(cluster), un})
}

func pullCluster() ([]netip.Prefix, []netip.Addr) {
	if p := pullInside.Load(); p != nil {
		return p.cluster, p.node
	}
	return nil, nil
}

// FetchTransport is the HTTP transport of such fetches: proxies from the
// environment as usual, every connection judged by FetchControl, and roots
// (nil: the system's) to verify TLS.
func FetchTransport(roots *x509.CertPool) *http.Transport {
	return FetchTransportWith(roots, FetchControl)
}

// FetchTransportWith is FetchTransport with control (FetchControl, or
// PullControl for a registry pull) judging every connection.
func FetchTransportWith(roots *x509.CertPool, control func(network, address string, c syscall.RawConn) error) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
			Control: control}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          16,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
}
