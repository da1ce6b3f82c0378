package nodecmd

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/go-logr/logr"

	"github.com/harnessfacts/harnessfacts/node-agent/egress"
)

func TestParseCIDRs(t *testing.T) {
	got, err := parseCIDRs([]string{"10.244.1.0/16", " fd12::/64", "192.0.2.7", "::ffff:10.1.2.3", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd12::/64"),
		netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("10.1.2.3/32")}
	if !slices.Equal(got, want) {
		t.Errorf("parseCIDRs = %v, want %v", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "pods", "10.0.0.0/8/8"} {
		if _, err := parseCIDRs([]string{bad}); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}

// TestParseNodeIPs: --node-ips takes the downward API's status.hostIPs as
// the chart passes it ($HOST_IPS, comma-separated, dual-stack).
func TestParseNodeIPs(t *testing.T) {
	got, err := parseAddrs(splitList("203.0.113.9,2001:db8::7, ::ffff:198.51.100.2"))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("198.51.100.2")}
	if !slices.Equal(got, want) {
		t.Errorf("parseAddrs = %v, want %v", got, want)
	}
	if got := splitList(" "); got != nil {
		t.Errorf("splitList of nothing = %q", got)
	}
	if _, err := parseAddrs([]string{"node-1"}); err == nil {
		t.Error("a name was taken as an address")
	}
}

// TestPublicClusterAddressesAreInside: on a cluster whose Service range is
// public (GKE's 34.118.224.0/20) and an install that named no
// --cluster-cidrs, egress took kubernetes.default for the outside. The
// pod's two known addresses of the cluster are added, loudly; private ones
// and those the ranges cover already are not.
func TestPublicClusterAddressesAreInside(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "34.118.224.1")
	t.Setenv("POD_IP", "10.8.0.5")
	got := coverClusterAddrs(nil, logr.Discard())
	if want := []netip.Prefix{netip.MustParsePrefix("34.118.224.1/32")}; !slices.Equal(got, want) {
		t.Errorf("coverClusterAddrs = %v, want %v", got, want)
	}
	if egress.Classify(netip.MustParseAddr("34.118.224.1"), got) == "" {
		t.Error("the API server's public Service address is still outside")
	}
	named := []netip.Prefix{netip.MustParsePrefix("34.118.224.0/20")}
	if got := coverClusterAddrs(named, logr.Discard()); !slices.Equal(got, named) {
		t.Errorf("with the range named: %v", got)
	}
	t.Setenv("POD_IP", "2600:1f14::7")
	if got := coverClusterAddrs(named, logr.Discard()); !slices.Equal(got, append(named, netip.MustParsePrefix("2600:1f14::7/128"))) {
		t.Errorf("an EKS IPv6 pod's own address: %v", got)
	}
}

// TestRunSourceIsOutOfUnrestrictedReach: the run source's addresses go to
// the executor as unreachable from user-mode sandboxes.
func TestRunSourceIsOutOfUnrestrictedReach(t *testing.T) {
	got := runSourceAddrs(context.Background(), "https://10.96.5.5:9443", logr.Discard())
	if want := []netip.Prefix{netip.MustParsePrefix("10.96.5.5/32")}; !slices.Equal(got, want) {
		t.Errorf("an address: %v, want %v", got, want)
	}
	if got := runSourceAddrs(context.Background(), "https://localhost:9443", logr.Discard()); len(got) == 0 {
		t.Error("a name resolved to nothing")
	}
	if got := runSourceAddrs(context.Background(), "", logr.Discard()); got != nil {
		t.Errorf("no URL: %v", got)
	}
}
