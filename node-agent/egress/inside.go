package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Kinds of inside addresses: what the node or the cluster can reach but a
// model provider never is.
const (
	KindLoopback    = "loopback"
	KindPrivate     = "private"
	KindLinkLocal   = "link-local"
	KindCGNAT       = "CGNAT"
	KindMetadata    = "metadata"
	KindCluster     = "cluster"
	KindUnspecified = "unspecified"
	KindMulticast   = "multicast"
	KindReserved    = "reserved"
	// KindNode is an address of the node itself (Inside.Node): public or
	// not, what listens on it for the node's network (a kubelet, an
	// exporter, a host-network pod's port) is the node's.
	KindNode = "node's own"
)

var (
	// Instance metadata services: AWS, GCP, Azure, OpenStack at
	// 169.254.169.254 (link-local anyway), AWS's IPv6 one, Alibaba's (in
	// the CGNAT range), Oracle's, and Azure's platform address
	// 168.63.129.16 (public space: its WireServer and host agent hand a
	// VM's provisioning data, the way into an AKS node's bootstrap
	// credentials).
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254"),
		netip.MustParseAddr("100.100.100.200"), netip.MustParseAddr("192.0.0.192"),
		netip.MustParseAddr("168.63.129.16"),
	}
	cgnat    = netip.MustParsePrefix("100.64.0.0/10")
	reserved = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),       // "this network": Linux dials 0.x as this host
		netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
		netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
		netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
		netip.MustParsePrefix("100::/64"),        // discard
		netip.MustParsePrefix("2001:db8::/32"),   // documentation
		netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated, still routed inside some sites)
		netip.MustParsePrefix("2001::/32"),       // Teredo: tunnels to an embedded IPv4 address
		netip.MustParsePrefix("2001:10::/28"),    // ORCHID
		netip.MustParsePrefix("2001:20::/28"),    // ORCHIDv2
		netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated)
		netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated
		// NAT64's local-use prefix (RFC 8215): where the IPv4 address
		// sits in it depends on the translator's prefix length, so which
		// address a packet reaches cannot be read from it; inside whole.
		netip.MustParsePrefix("64:ff9b:1::/48"),
	}
	// Prefixes that embed an IPv4 address in their last 32 bits: the
	// embedded address is what the packets reach, so it is judged too.
	nat64     = []netip.Prefix{netip.MustParsePrefix("64:ff9b::/96")}
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Classify returns the kind of inside address ip is, or "" for an address
// on the outside. cluster are the cluster's Pod and Service ranges.
func Classify(ip netip.Addr, cluster []netip.Prefix) string {
	ip = ip.Unmap()
	if ip.Zone() != "" {
		ip = ip.WithZone("")
	}
	switch {
	case slices.Contains(metadataAddrs, ip):
		return KindMetadata
	case ip.IsUnspecified():
		return KindUnspecified
	case ip.IsLoopback():
		return KindLoopback
	case ip.IsMulticast():
		return KindMulticast
	case ip.IsLinkLocalUnicast():
		return KindLinkLocal
	}
	for _, p := range cluster {
		if p.Contains(ip) {
			return KindCluster
		}
	}
	switch {
	case ip.IsPrivate():
		return KindPrivate
	case cgnat.Contains(ip):
		return KindCGNAT
	}
	for _, p := range nat64 {
		if p.Contains(ip) {
			b := ip.As16()
			if k := Classify(netip.AddrFrom4([4]byte(b[12:16])), cluster); k != "" {
				return k
			}
		}
	}
	if sixToFour.Contains(ip) {
		b := ip.As16()
		if k := Classify(netip.AddrFrom4([4]byte(b[2:6])), cluster); k != "" {
			return k
		}
	}
	for _, p := range reserved {
		if p.Contains(ip) {
			return KindReserved
		}
	}
	if ip.Is4() && ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return KindReserved
	}
	return ""
}

// forms are the IPv4 or IPv6 addresses ip reaches: itself (IPv4-mapped
// unmapped), and the IPv4 address a NAT64 or 6to4 address carries, as
// Classify reads them.
func forms(ip netip.Addr) []netip.Addr {
	ip = ip.Unmap().WithZone("")
	out := []netip.Addr{ip}
	b := ip.As16()
	for _, p := range nat64 {
		if p.Contains(ip) {
			out = append(out, netip.AddrFrom4([4]byte(b[12:16])))
		}
	}
	if sixToFour.Contains(ip) {
		out = append(out, netip.AddrFrom4([4]byte(b[2:6])))
	}
	return out
}

// Resolver resolves a name to addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Inside is what egress ProviderOnly may reach of the inside: by default
// nothing. Every connection is judged on the address actually dialled,
// after resolution (so a name that resolves to an inside address, or
// re-resolves there later, is refused all the same).
type Inside struct {
	// ClusterCIDRs are the cluster's Pod and Service ranges.
	ClusterCIDRs []netip.Prefix
	// Hosts are names (canonical, as AllowList keeps them) that may resolve
	// to inside addresses: allowed by the operator's policy, by name. An IP
	// literal here allows that address.
	Hosts []string
	// Loopback are "host:port" pairs that may reach a loopback address on
	// exactly that port: the run's providerURL when it is on loopback.
	Loopback []string
	// Node are the node's own addresses, inside whatever their range: a
	// node on a public address is as much the node as one on a private
	// one.
	Node []netip.Addr
	// Resolver resolves names; nil is net.DefaultResolver.
	Resolver Resolver
	// AllowedBy says, in a refusal, where a name is allowed inside;
	// "" is a HarnessPolicy's network.insideHosts.
	AllowedBy string
}

// ErrInside marks a connection refused because it would reach the inside.
var ErrInside = errors.New("inside address")

// insideError is a refusal of an inside address for target.
type insideError struct {
	target string
	msg    string
}

func (e *insideError) Error() string        { return e.msg }
func (e *insideError) Is(target error) bool { return target == ErrInside }

// Dialer returns a dial function for Options.Dial that resolves the target
// itself and refuses, in the socket's Control hook, every inside address
// that in does not allow for that target.
func (in Inside) Dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	res := in.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h, p, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		host, err := canonicalHost(h)
		if err != nil {
			return nil, err
		}
		port, err := parsePort(p)
		if err != nil {
			return nil, err
		}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else if ips, err = res.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, err
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("%s resolves to no address", host)
		}
		target := net.JoinHostPort(host, strconv.Itoa(port))
		// A name whose answer holds one refused address is refused whole,
		// before any dial: an answer that mixes a public and an inside
		// address is a rebinding attempt or a misconfiguration, and
		// dialling its public part first would make the outcome depend on
		// which address answers.
		for _, ip := range ips {
			if err := in.check(host, target, netip.AddrPortFrom(ip, uint16(port)).String()); err != nil {
				return nil, err
			}
		}
		// The Control hook judges the address of the socket itself: what is
		// dialled is what was judged, whatever resolves later.
		d := &net.Dialer{Timeout: timeout, Control: func(_, address string, _ syscall.RawConn) error {
			return in.check(host, target, address)
		}}
		var errs []error
		for _, ip := range ips {
			c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), strconv.Itoa(port)))
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
		return nil, errors.Join(errs...)
	}
}

// Canonical is host as an allow list or Inside.Hosts keeps it: a name in
// lower case without a trailing dot, an IP literal in its canonical form.
func Canonical(host string) (string, error) { return canonicalHost(host) }

// check judges one dialled address (ip:port) for target host.
func (in Inside) check(host, target, address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refusing to connect to %s: %w", address, err)
	}
	kind := Classify(ap.Addr(), in.ClusterCIDRs)
	if kind == "" && slices.ContainsFunc(forms(ap.Addr()), func(a netip.Addr) bool { return slices.Contains(in.Node, a) }) {
		kind = KindNode
	}
	switch {
	case kind == "":
		return nil
	case kind == KindUnspecified || kind == KindMulticast:
		// Never a provider, whoever allows it.
	case kind == KindLoopback && slices.Contains(in.Loopback, target):
		return nil
	case slices.Contains(in.Hosts, host):
		return nil
	}
	by := in.AllowedBy
	if by == "" {
		by = "a HarnessPolicy's network.insideHosts"
	}
	if net.ParseIP(host) != nil {
		return &insideError{target: target, msg: fmt.Sprintf("refusing to connect to %s, a %s address: egress ProviderOnly reaches only the outside (%s may allow it)",
			target, kind, by)}
	}
	return &insideError{target: target, msg: fmt.Sprintf("refusing to connect to %s: %s resolves to %s, a %s address: egress ProviderOnly reaches only the outside (%s may allow %s)",
		target, host, ap.Addr(), kind, by, host)}
}
