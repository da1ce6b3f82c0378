package egress

import (
	"context"
	"errors"
	"net/http"
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
