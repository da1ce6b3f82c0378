package egress

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAllowListMatching(t *testing.T) {
	allow, err := NewAllowList(
		"api.example.com",         // default ports 443 and 80
		"Models.Example.NET:8443", // case is not significant
		"gateway.example.org.",    // neither is a trailing dot
		"127.0.0.2:9000",          // IP literals
		"[2001:DB8::1]:443",
		"2001:db8::2",
	)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		target string
		want   bool
		canon  string
	}{
		{"api.example.com:443", true, "api.example.com:443"},
		{"api.example.com:80", true, "api.example.com:80"},
		{"api.example.com:8443", false, "api.example.com:8443"},
		{"API.EXAMPLE.COM:443", true, "api.example.com:443"},
		{"api.example.com.:443", true, "api.example.com:443"},
		{"api.example.com..:443", false, "api.example.com..:443"},
		{"sub.api.example.com:443", false, "sub.api.example.com:443"},
		{"example.com:443", false, "example.com:443"},
		{"api.example.com.evil.test:443", false, "api.example.com.evil.test:443"},
		{"models.example.net:8443", true, "models.example.net:8443"},
		{"models.example.net:443", false, "models.example.net:443"},
		{"gateway.example.org:443", true, "gateway.example.org:443"},
		{"gateway.example.org.:80", true, "gateway.example.org:80"},
		{"127.0.0.2:9000", true, "127.0.0.2:9000"},
		{"127.0.0.2:9001", false, "127.0.0.2:9001"},
		{"127.0.0.1:9000", false, "127.0.0.1:9000"},
		{"[::ffff:127.0.0.2]:9000", true, "127.0.0.2:9000"}, // the same address, IPv4-mapped
		{"127.000.000.002:9000", false, "127.000.000.002:9000"},
		{"[2001:db8::1]:443", true, "[2001:db8::1]:443"},
		{"[2001:0db8:0:0:0:0:0:1]:443", true, "[2001:db8::1]:443"},
		{"[2001:db8::1]:80", false, "[2001:db8::1]:80"},
		{"[2001:db8::2]:80", true, "[2001:db8::2]:80"},
		{"[fe80::1%eth0]:443", false, "[fe80::1%eth0]:443"},
		{"api.example.com", false, "api.example.com"},     // no port
		{"api.example.com:0", false, "api.example.com:0"}, // no such port
		{"api.example.com:+443", false, "api.example.com:+443"},
		{"api.example.com:65536", false, "api.example.com:65536"},
		{":443", false, ":443"},
		{"api example.com:443", false, "api example.com:443"},
		{"api.example.com\x00:443", false, "api.example.com\x00:443"},
	}
	for _, tc := range cases {
		canon, ok := allow.Allows(tc.target)
		if ok != tc.want || canon != tc.canon {
			t.Errorf("Allows(%q) = %q, %v; want %q, %v", tc.target, canon, ok, tc.canon, tc.want)
		}
	}
	want := []string{
		"127.0.0.2:9000", "[2001:db8::1]:443", "[2001:db8::2]:443", "[2001:db8::2]:80",
		"api.example.com:443", "api.example.com:80", "gateway.example.org:443", "gateway.example.org:80",
		"models.example.net:8443",
	}
	if diff := cmp.Diff(want, allow.Entries()); diff != "" {
		t.Errorf("Entries() (-want +got):\n%s", diff)
	}
}

func TestAllowListRefusesBadEntries(t *testing.T) {
	for _, entry := range []string{"", ".", "host:", "host:http", "host:70000", "-host", "a..b", "[::1", "fe80::1%eth0", "*.example.com", "http://example.com"} {
		if _, err := NewAllowList(entry); err == nil {
			t.Errorf("NewAllowList(%q) accepted it", entry)
		}
	}
}

func TestAllowListAddURL(t *testing.T) {
	cases := map[string][]string{
		"https://api.example.com/v1":      {"api.example.com:443"},
		"http://127.0.0.2:8080/v1/models": {"127.0.0.2:8080"},
		"http://Provider.Example.com.":    {"provider.example.com:80"},
		"https://[2001:db8::5]:8443/":     {"[2001:db8::5]:8443"},
	}
	for u, want := range cases {
		a, _ := NewAllowList()
		if err := a.AddURL(u); err != nil {
			t.Errorf("AddURL(%q): %v", u, err)
			continue
		}
		if diff := cmp.Diff(want, a.Entries()); diff != "" {
			t.Errorf("AddURL(%q) (-want +got):\n%s", u, diff)
		}
	}
	for _, u := range []string{"ftp://example.com/", "/relative", "https://", "https://exa mple.com/"} {
		a, _ := NewAllowList()
		if err := a.AddURL(u); err == nil {
			t.Errorf("AddURL(%q) accepted it: %v", u, a.Entries())
		}
	}
}

func TestDialRefusesSpecialAddresses(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:443", "[::]:443", "169.254.169.254:80", "[fe80::1]:443", "224.0.0.1:80"} {
		if err := refuseSpecial("tcp", addr, nil); err == nil {
			t.Errorf("%s was not refused", addr)
		}
	}
	for _, addr := range []string{"127.0.0.2:8080", "192.0.2.10:443", "[2001:db8::1]:443"} {
		if err := refuseSpecial("tcp", addr, nil); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

// TestAllowListWithholds: a withheld pair is refused whatever the entries
// say, in every spelling of its host, and is not listed; the other ports
// of its host stay as the entries say.
func TestAllowListWithholds(t *testing.T) {
	allow, err := NewAllowList("127.0.0.1:18089", "localhost:18089", "LLM.example.com", "llm.example.com:8080")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"http://127.0.0.1:18089/v1", "https://llm.example.com."} {
		if err := allow.Withhold(u, "the gateway carries it"); err != nil {
			t.Fatal(err)
		}
	}
	for target, want := range map[string]bool{
		"127.0.0.1:18089": false, "[::ffff:127.0.0.1]:18089": false, "localhost:18089": true,
		"llm.example.com:443": false, "LLM.EXAMPLE.COM.:443": false, "llm.example.com:80": true, "llm.example.com:8080": true,
	} {
		canon, ok := allow.Allows(target)
		if ok != want {
			t.Errorf("%s (%s): allowed %v, want %v", target, canon, ok, want)
		}
		if why := allow.Withheld(canon); (why != "") == want {
			t.Errorf("%s: withheld %q", target, why)
		}
	}
	if diff := cmp.Diff([]string{"llm.example.com:80", "llm.example.com:8080", "localhost:18089"}, allow.Entries()); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}
