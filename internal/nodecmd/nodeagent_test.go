package nodecmd

import (
	"net/netip"
	"slices"
	"testing"
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
