package v1alpha1

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// PolicyViolation is one rule of a HarnessPolicy that a run breaks.
type PolicyViolation struct {
	// Policy is the HarnessPolicy's name.
	Policy string
	// Rule is the rule's field path in the policy, e.g. limits.maxMemory.
	Rule string
	// Message says what the run asks and what the rule allows.
	Message string
}

// String is the refusal as the admission policy words it.
func (v PolicyViolation) String() string {
	return "HarnessPolicy " + v.Policy + " rule " + v.Rule + ": " + v.Message
}

// Selects reports whether the policy governs a namespace with these labels.
// A selector the API server let through but that cannot be evaluated (an In
// without values) selects nothing, with the error.
func (p *HarnessPolicy) Selects(namespaceLabels map[string]string) (bool, error) {
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.NamespaceSelector)
	if err != nil {
		return false, fmt.Errorf("HarnessPolicy %s: namespaceSelector: %w", p.Name, err)
	}
	return sel.Matches(labels.Set(namespaceLabels)), nil
}

// Violations lists the rules of p that a run with spec breaks, in the order
// the chart's admission policy checks them, with the same words. Limits are
// judged as the run sets them: a limit it leaves unset is resolved on the
// node (ResolveLimits) and judged there against the ceilings the controller
// records in status.limitCeilings when it binds the run. fairShare and spend
// are not rules a run can break.
func (p *HarnessPolicy) Violations(spec *HarnessRunSpec) []PolicyViolation {
	var out []PolicyViolation
	add := func(rule, format string, args ...any) {
		out = append(out, PolicyViolation{Policy: p.Name, Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	ps := &p.Spec
	if ps.Isolation != nil && ps.Isolation.ForbidFallback && spec.Isolation.Policy == IsolationAllowFallback {
		add("isolation.forbidFallback", "isolation.policy AllowFallback is not allowed: agents run sandboxed or not at all")
	}
	if n := ps.Network; n != nil {
		if n.ForbidUnrestricted && spec.Network.Egress == EgressUnrestricted {
			add("network.forbidUnrestricted", "network.egress Unrestricted is not allowed")
		}
		if n.ForbidProviderTools && spec.Network.ProviderTools == ProviderToolsAllowed {
			add("network.forbidProviderTools", "network.providerTools Allowed is not allowed: no provider reaches the network for an agent")
		}
		if len(n.AllowedHosts) > 0 {
			var outside []string
			for _, h := range spec.Network.AllowHosts {
				if !hostListed(n.AllowedHosts, h) {
					outside = append(outside, h)
				}
			}
			if len(outside) > 0 {
				add("network.allowedHosts", "network.allowHosts %s not in %s", strings.Join(outside, ", "), strings.Join(n.AllowedHosts, ", "))
			}
			if u := spec.Agent.ProviderURL; u != "" && !urlListed(n.AllowedHosts, u) {
				add("network.allowedHosts", "agent.providerURL %s has a host not in %s", u, strings.Join(n.AllowedHosts, ", "))
			}
		}
		if len(n.AllowedSources) > 0 {
			for _, src := range SourceHosts(spec) {
				if !hostListed(n.AllowedSources, src.Host) {
					add("network.allowedSources", "%s names %s, not in %s", src.Field, src.Host, strings.Join(n.AllowedSources, ", "))
				}
			}
		}
	}
	if g := ps.Gateway; g != nil && len(g.AllowedProviders) > 0 && spec.Agent.ProviderURL != "" && !ProviderAllowed(g.AllowedProviders, spec.Agent.ProviderURL) {
		add("gateway.allowedProviders", "agent.providerURL %s is not at or below any of %s", spec.Agent.ProviderURL, strings.Join(g.AllowedProviders, ", "))
	}
	if len(ps.Adapters) > 0 && !slices.Contains(ps.Adapters, spec.Agent.Adapter) {
		names := make([]string, len(ps.Adapters))
		for i, a := range ps.Adapters {
			names[i] = string(a)
		}
		add("adapters", "adapter %s is not allowed (allowed: %s)", spec.Agent.Adapter, strings.Join(names, ", "))
	}
	if len(ps.RequiredNodeSelector) > 0 {
		var missing []string
		for k, v := range ps.RequiredNodeSelector {
			if got, ok := spec.NodeSelector[k]; !ok || got != v {
				missing = append(missing, k+"="+v)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			add("requiredNodeSelector", "nodeSelector must include %s", strings.Join(missing, ", "))
		}
	}
	if l := ps.Limits; l != nil {
		lim := &spec.Limits
		if l.MaxMemory != nil && lim.Memory != nil && lim.Memory.Cmp(*l.MaxMemory) > 0 {
			add("limits.maxMemory", "limits.memory %s is above the ceiling %s", lim.Memory, l.MaxMemory)
		}
		if l.MaxDisk != nil && lim.Disk != nil && lim.Disk.Cmp(*l.MaxDisk) > 0 {
			add("limits.maxDisk", "limits.disk %s is above the ceiling %s", lim.Disk, l.MaxDisk)
		}
		if l.MaxEpisodeSeconds != nil && lim.EpisodeSeconds > *l.MaxEpisodeSeconds {
			add("limits.maxEpisodeSeconds", "limits.episodeSeconds %d is above the ceiling %d", lim.EpisodeSeconds, *l.MaxEpisodeSeconds)
		}
		if l.MaxOutputBytes != nil && lim.MaxOutputBytes > *l.MaxOutputBytes {
			add("limits.maxOutputBytes", "limits.maxOutputBytes %d is above the ceiling %d", lim.MaxOutputBytes, *l.MaxOutputBytes)
		}
		if l.MaxDecisions != nil && lim.MaxDecisions > *l.MaxDecisions {
			add("limits.maxDecisions", "limits.maxDecisions %d is above the ceiling %d", lim.MaxDecisions, *l.MaxDecisions)
		}
		if l.MaxProbeSeconds != nil && lim.ProbeSeconds > *l.MaxProbeSeconds {
			add("limits.maxProbeSeconds", "limits.probeSeconds %d is above the ceiling %d", lim.ProbeSeconds, *l.MaxProbeSeconds)
		}
		if l.MaxProcesses != nil && lim.MaxProcesses > *l.MaxProcesses {
			add("limits.maxProcesses", "limits.maxProcesses %d is above the ceiling %d", lim.MaxProcesses, *l.MaxProcesses)
		}
		if l.MaxArtifactBytes != nil && lim.MaxArtifactBytes > *l.MaxArtifactBytes {
			add("limits.maxArtifactBytes", "limits.maxArtifactBytes %d is above the ceiling %d", lim.MaxArtifactBytes, *l.MaxArtifactBytes)
		}
	}
	return out
}

// SourceHost is a host the node-agent fetches a run's files from, and the
// field of the run that names it.
type SourceHost struct{ Field, Host string }

// SourceHosts are the hosts the node-agent fetches spec's files from: the
// git server of fixture.git.url (host or host:port, as written) and the
// registries of fixture.oci.ref and environment.image.
func SourceHosts(spec *HarnessRunSpec) []SourceHost {
	var out []SourceHost
	if g := spec.Fixture.Git; g != nil {
		if u, err := url.Parse(g.URL); err == nil {
			out = append(out, SourceHost{"fixture.git.url", u.Host})
		}
	}
	if o := spec.Fixture.OCI; o != nil {
		out = append(out, SourceHost{"fixture.oci.ref", RegistryOf(o.Ref)})
	}
	if e := spec.Environment; e != nil {
		out = append(out, SourceHost{"environment.image", RegistryOf(e.Image)})
	}
	return out
}

// RegistryOf is the registry an image reference names, as the container
// tools read it: its first segment when it has another and that one holds
// a '.' or a ':' or is localhost, else docker.io.
func RegistryOf(ref string) string {
	first, _, ok := strings.Cut(ref, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return "docker.io"
}

// hostListed: entry ("host" or "host:port") is listed itself, or its host is.
func hostListed(list []string, entry string) bool {
	if slices.Contains(list, entry) {
		return true
	}
	host, _, err := net.SplitHostPort(entry)
	return err == nil && slices.Contains(list, host)
}

// urlListed: the URL's host, or host:port (the scheme's port when none), is
// listed.
func urlListed(list []string, raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return slices.Contains(list, u.Hostname()) || slices.Contains(list, net.JoinHostPort(u.Hostname(), port))
}

// ProviderAllowed says whether raw is at or below one of the allowed base
// URLs: the same scheme, host and port (the scheme's when none), and a path
// equal to the entry's or below it by whole segments. Paths are compared
// cleaned and unescaped once, so "/v1/../admin" is not below "/v1", and
// neither a user part nor a query is accepted.
func ProviderAllowed(allowed []string, raw string) bool {
	u, ok := providerBase(raw)
	if !ok {
		return false
	}
	for _, a := range allowed {
		b, ok := providerBase(a)
		if !ok || u.Scheme != b.Scheme || u.Host != b.Host {
			continue
		}
		if b.Path == "/" || u.Path == b.Path || strings.HasPrefix(u.Path, b.Path+"/") {
			return true
		}
	}
	return false
}

// providerBase is raw with a lower-case scheme and host, an explicit port
// and a clean path without a trailing slash ("/" for none).
func providerBase(raw string) (*url.URL, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.RawPath != "" {
		return nil, false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	p := path.Clean("/" + u.Path)
	if strings.Contains(u.Path, "..") && p != u.Path {
		return nil, false
	}
	return &url.URL{Scheme: u.Scheme, Host: net.JoinHostPort(host, port), Path: p}, true
}

// GatewayLimits are the model gateway's limits for one run (0: none).
type GatewayLimits struct {
	MaxRequests, MaxTokens int64
	// Budgets name the spend rules over the run's namespace: a budget is
	// charged from the tokens counted, which only the gateway counts for
	// the run (an agent's own report of its usage is the agent's to make).
	Budgets []string
	// Sources name the policy rule each came from.
	Sources []string
}

// Any says whether a policy limits the run's model use: each limit holds
// only for the model requests the gateway carries.
func (l GatewayLimits) Any() bool { return l.MaxRequests > 0 || l.MaxTokens > 0 || len(l.Budgets) > 0 }

// Rules names every rule behind the limits.
func (l GatewayLimits) Rules() []string { return append(slices.Clone(l.Sources), l.Budgets...) }

// GatewayLimitsOf is the smallest of the gateway limits of the policies
// given (those that select the run's namespace).
func GatewayLimitsOf(policies []HarnessPolicy) GatewayLimits {
	var out GatewayLimits
	for i := range policies {
		g := policies[i].Spec.Gateway
		if g == nil {
			continue
		}
		if v := g.MaxRequestsPerRun; v != nil && (out.MaxRequests == 0 || *v < out.MaxRequests) {
			out.MaxRequests = *v
			out.Sources = append(out.Sources, "HarnessPolicy "+policies[i].Name+" gateway.maxRequestsPerRun")
		}
		if v := g.MaxTokensPerRun; v != nil && (out.MaxTokens == 0 || *v < out.MaxTokens) {
			out.MaxTokens = *v
			out.Sources = append(out.Sources, "HarnessPolicy "+policies[i].Name+" gateway.maxTokensPerRun")
		}
	}
	for i := range policies {
		if sp := policies[i].Spec.Spend; sp != nil {
			if sp.NamespaceTokens != nil {
				out.Budgets = append(out.Budgets, "HarnessPolicy "+policies[i].Name+" spend.namespaceTokens")
			}
			if sp.SuiteTokens != nil {
				out.Budgets = append(out.Budgets, "HarnessPolicy "+policies[i].Name+" spend.suiteTokens")
			}
		}
	}
	return out
}

// InsideHosts are the names policies allow to resolve to inside addresses:
// those every policy that sets network.insideHosts lists (the strictest
// wins: a policy without the list allows nothing by it, and takes nothing
// away), sorted. The controller records them in status.insideHosts when it
// binds a run; the node-agent's egress proxy reads them there.
func InsideHosts(policies []*HarnessPolicy) []string {
	var out []string
	first := true
	for _, p := range policies {
		if p.Spec.Network == nil || len(p.Spec.Network.InsideHosts) == 0 {
			continue
		}
		var names []string
		for _, h := range p.Spec.Network.InsideHosts {
			names = append(names, strings.ToLower(strings.TrimSuffix(h, ".")))
		}
		if first {
			out, first = names, false
			continue
		}
		out = slices.DeleteFunc(out, func(h string) bool { return !slices.Contains(names, h) })
	}
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}
