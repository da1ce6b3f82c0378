// Package egress is the per-run HTTP proxy of egress ProviderOnly.
//
// The sandbox has its own network namespace with only a loopback interface,
// so the agent reaches nothing by itself. The node-agent serves this proxy on
// a unix socket in the run dir; `harnessfacts sandbox-init` bridges a
// 127.0.0.1 port inside the sandbox to it and the agent gets HTTPS_PROXY and
// HTTP_PROXY pointing there. The proxy lets CONNECT tunnels and plain HTTP
// requests through only to the host:port pairs of its AllowList, resolves
// names itself (the sandbox needs no DNS), refuses everything else with a 403
// whose body says why, and counts both.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// DefaultPorts are the ports an allow-list entry without a port allows.
var DefaultPorts = []int{443, 80}

// AllowList is a set of host:port pairs. Hosts match after canonicalization:
// lower case, one trailing dot dropped, IP literals in their canonical form
// (IPv4-mapped IPv6 addresses as IPv4). A name matches only that name: an IP
// literal a name resolves to is not allowed by the name, nor is a subdomain.
type AllowList struct {
	ports map[string][]int // canonical host → ports
	// withheld are canonical "host:port" pairs refused whatever the
	// entries say, each with the reason the proxy gives.
	withheld map[string]string
}

// NewAllowList parses entries: "host", "host:port", "[ipv6]:port" or a bare
// IPv6 address. An entry without a port allows DefaultPorts.
func NewAllowList(entries ...string) (*AllowList, error) {
	a := &AllowList{ports: map[string][]int{}}
	for _, e := range entries {
		if err := a.Add(e); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Add adds one entry (see NewAllowList).
func (a *AllowList) Add(entry string) error {
	host, port, err := splitEntry(entry)
	if err != nil {
		return fmt.Errorf("allow-list entry %q: %w", entry, err)
	}
	ports := DefaultPorts
	if port != 0 {
		ports = []int{port}
	}
	for _, p := range ports {
		if !slices.Contains(a.ports[host], p) {
			a.ports[host] = append(a.ports[host], p)
		}
	}
	return nil
}

// Withhold refuses the host and port of an http or https URL (the port
// defaults to the scheme's) whatever the entries allow, saying why: the
// pair is reached another way (a run's provider, through its model
// gateway).
func (a *AllowList) Withhold(raw, why string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host, err := canonicalHost(u.Hostname())
	if err != nil {
		return fmt.Errorf("URL %q: %w", raw, err)
	}
	p, err := parsePort(port)
	if err != nil {
		return fmt.Errorf("URL %q: %w", raw, err)
	}
	if a.withheld == nil {
		a.withheld = map[string]string{}
	}
	a.withheld[net.JoinHostPort(host, strconv.Itoa(p))] = why
	return nil
}

// Withheld is why canonical ("host:port", as Allows returns it) is
// withheld, or "".
func (a *AllowList) Withheld(canonical string) string { return a.withheld[canonical] }

// AddURL allows the host and port of an http or https URL (the port defaults
// to the scheme's).
func (a *AllowList) AddURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Host == "" {
		return fmt.Errorf("URL %q has no host", raw)
	}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		default:
			return fmt.Errorf("URL %q: scheme %q is neither http nor https", raw, u.Scheme)
		}
	}
	return a.Add(net.JoinHostPort(u.Hostname(), port))
}

// Allows reports whether hostport ("host:port", as in a CONNECT request) is
// allowed, and returns its canonical form for reports. A hostport that cannot
// be parsed is not allowed.
func (a *AllowList) Allows(hostport string) (canonical string, ok bool) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, false
	}
	port, err := parsePort(p)
	if err != nil {
		return hostport, false
	}
	host, err := canonicalHost(h)
	if err != nil {
		return hostport, false
	}
	canonical = net.JoinHostPort(host, strconv.Itoa(port))
	if _, no := a.withheld[canonical]; no {
		return canonical, false
	}
	return canonical, slices.Contains(a.ports[host], port)
}

// Entries lists the allowed pairs as "host:port", sorted.
func (a *AllowList) Entries() []string {
	var out []string
	for h, ports := range a.ports {
		for _, p := range ports {
			if e := net.JoinHostPort(h, strconv.Itoa(p)); a.withheld[e] == "" {
				out = append(out, e)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Len is the number of allowed pairs (withheld ones not counted).
func (a *AllowList) Len() int { return len(a.Entries()) }

func splitEntry(entry string) (host string, port int, err error) {
	h, p := entry, ""
	switch strings.Count(entry, ":") {
	case 0:
	case 1:
		if h, p, err = net.SplitHostPort(entry); err != nil {
			return "", 0, err
		}
	default: // IPv6: "[addr]:port" or a bare address
		if strings.HasPrefix(entry, "[") {
			if h, p, err = net.SplitHostPort(entry); err != nil {
				return "", 0, err
			}
		}
	}
	if p != "" || strings.HasSuffix(entry, ":") {
		if port, err = parsePort(p); err != nil {
			return "", 0, err
		}
	}
	host, err = canonicalHost(h)
	return host, port, err
}

func parsePort(p string) (int, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || strings.HasPrefix(p, "+") {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return n, nil
}

// canonicalHost lower-cases a name and drops one trailing dot, or returns an
// IP literal's canonical form. Zones, empty labels and characters outside a
// DNS name are errors.
func canonicalHost(h string) (string, error) {
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", errors.New("an IPv6 zone is not allowed")
		}
		return ip.Unmap().String(), nil
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" || len(h) > 253 {
		return "", errors.New("not a host name")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("%q is not a host name", h)
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return "", fmt.Errorf("%q is not a host name", h)
			}
		}
	}
	return h, nil
}
