package egress

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// The fetch hook refuses the addresses no git server or registry a run
// names is on (the instance metadata service first), and leaves the
// inside ranges where in-cluster registries live.
func TestFetchControl(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		refuse string
	}{
		{"169.254.169.254:80", KindMetadata},
		{"[fd00:ec2::254]:80", KindMetadata},
		{"100.100.100.200:80", KindMetadata},
		{"169.254.10.1:443", KindLinkLocal},
		{"[fe80::1]:443", KindLinkLocal},
		{"0.0.0.0:5000", KindUnspecified},
		{"[::]:5000", KindUnspecified},
		{"224.0.0.1:80", KindMulticast},
		{"240.0.0.1:80", KindReserved},
		{"[::ffff:169.254.169.254]:80", KindMetadata},
		{"127.0.0.1:5000", ""},
		{"10.96.0.10:5000", ""},
		{"192.168.1.20:443", ""},
		{"[::1]:5000", ""},
		{"203.0.113.7:443", ""},
	} {
		err := FetchControl("tcp", tc.addr, nil)
		switch {
		case tc.refuse == "" && err != nil:
			t.Errorf("%s refused: %v", tc.addr, err)
		case tc.refuse != "" && (!errors.Is(err, ErrInside) || !strings.Contains(err.Error(), tc.refuse)):
			t.Errorf("%s: %v, want a refusal naming %s", tc.addr, err, tc.refuse)
		}
	}
}

// TestPullControl: a pull whose registry (its first connection) is on a
// public address follows its token service or a redirect to no inside
// address, and to the metadata service never; a pull whose registry is
// inside goes anywhere FetchControl allows.
func TestPullControl(t *testing.T) {
	const public, public2 = "93.184.215.14:443", "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443"
	for _, tc := range []struct {
		name  string
		addrs []string
		bad   int // the first refused, -1 for none
	}{
		{"a public registry, its public token service", []string{public, public2, public}, -1},
		{"a public registry naming a loopback token service", []string{public, "127.0.0.1:8080"}, 1},
		{"a public registry redirecting to a private address", []string{public, public2, "10.0.0.5:443"}, 2},
		{"a public registry naming the cluster's service", []string{public, "[fd00::1]:443"}, 1},
		{"a public registry naming the metadata service", []string{public, "169.254.169.254:80"}, 1},
		{"an in-cluster registry with a public login", []string{"10.96.0.10:5000", public, "10.96.0.10:5000"}, -1},
		{"a registry on loopback", []string{"127.0.0.1:5000", "127.0.0.1:5001"}, -1},
	} {
		control := PullControl()
		for i, a := range tc.addrs {
			err := control("tcp", a, nil)
			switch {
			case i == tc.bad && !errors.Is(err, ErrInside):
				t.Errorf("%s: connection %d to %s: %v, want a refusal", tc.name, i, a, err)
			case i != tc.bad && err != nil:
				t.Errorf("%s: connection %d to %s refused: %v", tc.name, i, a, err)
			}
			if i == tc.bad {
				break
			}
		}
	}
}

// The transport refuses at connect, before a byte is sent: a request to the
// metadata service fails at once with the refusal, not with a timeout.
func TestFetchTransportRefusesTheMetadataService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/latest/api/token"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr := FetchTransport(nil)
		tr.Proxy = nil // the test judges the target, not a proxy the machine may set
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			_ = resp.Body.Close()
			t.Fatalf("%s: fetched (%s)", u, resp.Status)
		}
		if !errors.Is(err, ErrInside) {
			t.Fatalf("%s: %v, want the refusal", u, err)
		}
	}
}

// TestPullFollowsNothingIntoTheClustersPublicRanges: a registry on a public
// address that names a token service or redirect in the cluster's ranges
// or at the node is not followed there, though the ranges are public
// (GKE's Service range) and Classify alone takes them for the outside.
func TestPullFollowsNothingIntoTheClustersPublicRanges(t *testing.T) {
	SetPullInside([]netip.Prefix{netip.MustParsePrefix("34.118.224.0/20")}, []netip.Addr{netip.MustParseAddr("203.0.113.9")})
	t.Cleanup(func() { SetPullInside(nil, nil) })
	for _, inside := range []string{"34.118.224.1:443", "203.0.113.9:443", "[::ffff:203.0.113.9]:443"} {
		control := PullControl()
		if err := control("tcp", "198.51.100.20:443", nil); err != nil {
			t.Fatalf("the registry itself: %v", err)
		}
		if err := control("tcp", inside, nil); err == nil {
			t.Errorf("a public registry's pull was led to %s", inside)
		}
	}
	// A pull whose registry is in the cluster may go anywhere.
	control := PullControl()
	if err := control("tcp", "34.118.224.9:5000", nil); err != nil {
		t.Fatalf("an in-cluster registry: %v", err)
	}
	if err := control("tcp", "198.51.100.20:443", nil); err != nil {
		t.Errorf("an in-cluster registry's public token service: %v", err)
	}
}
