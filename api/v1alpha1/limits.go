package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The defaults of spec.limits: what a limit is when neither the run nor its
// fixture sets it. The schema leaves an unset limit unset, so that a
// fixture's limits apply; ResolveLimits is the one place these are used.
const (
	// DefaultEpisodeSeconds is limits.episodeSeconds' default: six minutes,
	// enough for a small task by an agent that thinks out loud.
	DefaultEpisodeSeconds int32 = 360
	// DefaultProbeSeconds is limits.probeSeconds' default (never longer than
	// the episode).
	DefaultProbeSeconds int32 = 120
	// DefaultMemory is limits.memory's default.
	DefaultMemory = "2Gi"
	// DefaultDisk is limits.disk's default: small enough that a few runs'
	// files fit in a node's memory next to their processes (a tmpfs is
	// memory), large enough for a repository checkout and its dependencies.
	DefaultDisk = "1Gi"
	// DefaultMaxDecisions is limits.maxDecisions' default.
	DefaultMaxDecisions int32 = 5000
	// DefaultMaxProcesses is limits.maxProcesses' default.
	DefaultMaxProcesses int32 = 1024
	// DefaultMaxOutputBytes is limits.maxOutputBytes' default: 8 MiB.
	DefaultMaxOutputBytes int64 = 8 << 20
	// DefaultMaxArtifactBytes is limits.maxArtifactBytes' default: 256 KiB.
	DefaultMaxArtifactBytes int64 = 256 << 10
)

// The bounds of spec.limits, the same as the schema's (a fixture's limits
// never pass the API server, so CheckLimits holds them to these).
const (
	MaxEpisodeSeconds   int32 = 86400
	MaxMaxDecisions     int32 = 1000000
	MaxMaxProcesses     int32 = 65536
	MinMaxOutputBytes   int64 = 1024
	MaxMaxOutputBytes   int64 = 1 << 30
	MaxMaxArtifactBytes int64 = 1 << 30
	MinMemory                 = "16Mi"
	MaxMemory                 = "256Gi"
	MinDisk                   = "1Mi"
	MaxDisk                   = "256Gi"
)

// The sources of an effective limit, in status.limitSources.
const (
	// LimitFromRun: the run's spec.limits set it.
	LimitFromRun = "run"
	// LimitFromFixture: the run left it unset and its fixture's limits set it.
	LimitFromFixture = "fixture"
	// LimitFromDefault: neither set it; it is the default constant of the API.
	LimitFromDefault = "default"
	// LimitFromPolicy prefixes the source of a default that was above a
	// HarnessPolicy's ceiling: the ceiling applies instead, and the source
	// reads "HarnessPolicy NAME limits.RULE".
	LimitFromPolicy = "HarnessPolicy"
)

// LimitCeilings are the strictest HarnessPolicy ceilings on a run's limits,
// as the controller found them when it bound the run.
type LimitCeilings struct {
	PolicyLimits `json:",inline"`

	// policies names the HarnessPolicy of each ceiling, by the ceiling's
	// name (for example maxEpisodeSeconds: strict).
	// +kubebuilder:validation:MaxProperties=8
	// +optional
	Policies map[string]string `json:"policies,omitempty"`
}

// Ceilings merges the limits of the policies into the strictest ceiling of
// each rule; nil when none sets one.
func Ceilings(policies []*HarnessPolicy) *LimitCeilings {
	c := &LimitCeilings{}
	lower := func(rule, policy string) { setString(&c.Policies, rule, policy) }
	for _, p := range policies {
		l := p.Spec.Limits
		if l == nil {
			continue
		}
		if l.MaxMemory != nil && (c.MaxMemory == nil || l.MaxMemory.Cmp(*c.MaxMemory) < 0) {
			c.MaxMemory = ptrTo(l.MaxMemory.DeepCopy())
			lower("maxMemory", p.Name)
		}
		if l.MaxDisk != nil && (c.MaxDisk == nil || l.MaxDisk.Cmp(*c.MaxDisk) < 0) {
			c.MaxDisk = ptrTo(l.MaxDisk.DeepCopy())
			lower("maxDisk", p.Name)
		}
		if l.MaxEpisodeSeconds != nil && (c.MaxEpisodeSeconds == nil || *l.MaxEpisodeSeconds < *c.MaxEpisodeSeconds) {
			c.MaxEpisodeSeconds = ptrTo(*l.MaxEpisodeSeconds)
			lower("maxEpisodeSeconds", p.Name)
		}
		if l.MaxOutputBytes != nil && (c.MaxOutputBytes == nil || *l.MaxOutputBytes < *c.MaxOutputBytes) {
			c.MaxOutputBytes = ptrTo(*l.MaxOutputBytes)
			lower("maxOutputBytes", p.Name)
		}
		if l.MaxDecisions != nil && (c.MaxDecisions == nil || *l.MaxDecisions < *c.MaxDecisions) {
			c.MaxDecisions = ptrTo(*l.MaxDecisions)
			lower("maxDecisions", p.Name)
		}
		if l.MaxProbeSeconds != nil && (c.MaxProbeSeconds == nil || *l.MaxProbeSeconds < *c.MaxProbeSeconds) {
			c.MaxProbeSeconds = ptrTo(*l.MaxProbeSeconds)
			lower("maxProbeSeconds", p.Name)
		}
		if l.MaxProcesses != nil && (c.MaxProcesses == nil || *l.MaxProcesses < *c.MaxProcesses) {
			c.MaxProcesses = ptrTo(*l.MaxProcesses)
			lower("maxProcesses", p.Name)
		}
		if l.MaxArtifactBytes != nil && (c.MaxArtifactBytes == nil || *l.MaxArtifactBytes < *c.MaxArtifactBytes) {
			c.MaxArtifactBytes = ptrTo(*l.MaxArtifactBytes)
			lower("maxArtifactBytes", p.Name)
		}
	}
	if len(c.Policies) == 0 {
		return nil
	}
	return c
}

func setString(m *map[string]string, k, v string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
}

func ptrTo[T any](v T) *T { return &v }

// ResolvedLimits are the limits an attempt runs under.
type ResolvedLimits struct {
	// Limits has every field set.
	Limits Limits
	// Sources says where each limit came from, by its JSON name: one of
	// LimitFromRun, LimitFromFixture, LimitFromDefault, or a
	// LimitFromPolicy source.
	Sources map[string]string
	// Violations are the ceilings a limit the run or its fixture asks for
	// is above. The attempt must be refused when there is one: a limit
	// somebody asked for is never silently cut.
	Violations []PolicyViolation
}

// ResolveLimits is the one place a run's limits are settled: each is the
// run's, else its fixture's, else the default constant above. ceilings (nil:
// none) are the HarnessPolicy ceilings over the namespace: a default above
// one gives way to it (nobody asked for the default, and the operator's
// ceiling is the most it may be), while a value the run or the fixture asks
// for above one is a violation. probeSeconds is never longer than the
// resolved episodeSeconds: a check or an MCP call cannot outlast the run
// that makes it.
func ResolveLimits(run Limits, fixture *Limits, ceilings *LimitCeilings) ResolvedLimits {
	fix := Limits{}
	if fixture != nil {
		fix = *fixture
	}
	c := LimitCeilings{}
	if ceilings != nil {
		c = *ceilings
	}
	r := &resolver{out: ResolvedLimits{Sources: map[string]string{}}, ceilings: c}
	l := &r.out.Limits
	l.EpisodeSeconds = resolve(r, "episodeSeconds", "maxEpisodeSeconds", run.EpisodeSeconds, fix.EpisodeSeconds, DefaultEpisodeSeconds, c.MaxEpisodeSeconds, zero32, less32, fmtInt)
	l.ProbeSeconds = resolve(r, "probeSeconds", "maxProbeSeconds", run.ProbeSeconds, fix.ProbeSeconds, DefaultProbeSeconds, c.MaxProbeSeconds, zero32, less32, fmtInt)
	l.ProbeSeconds = min(l.ProbeSeconds, l.EpisodeSeconds)
	l.Memory = resolveQuantity(r, "memory", "maxMemory", run.Memory, fix.Memory, DefaultMemory, c.MaxMemory)
	l.Disk = resolveQuantity(r, "disk", "maxDisk", run.Disk, fix.Disk, DefaultDisk, c.MaxDisk)
	l.MaxDecisions = resolve(r, "maxDecisions", "maxDecisions", run.MaxDecisions, fix.MaxDecisions, DefaultMaxDecisions, c.MaxDecisions, zero32, less32, fmtInt)
	l.MaxProcesses = resolve(r, "maxProcesses", "maxProcesses", run.MaxProcesses, fix.MaxProcesses, DefaultMaxProcesses, c.MaxProcesses, zero32, less32, fmtInt)
	l.MaxOutputBytes = resolve(r, "maxOutputBytes", "maxOutputBytes", run.MaxOutputBytes, fix.MaxOutputBytes, DefaultMaxOutputBytes, c.MaxOutputBytes, zero64, less64, fmtInt)
	l.MaxArtifactBytes = resolve(r, "maxArtifactBytes", "maxArtifactBytes", run.MaxArtifactBytes, fix.MaxArtifactBytes, DefaultMaxArtifactBytes, c.MaxArtifactBytes, zero64, less64, fmtInt)
	return r.out
}

type resolver struct {
	out      ResolvedLimits
	ceilings LimitCeilings
}

func zero32(v int32) bool    { return v <= 0 }
func zero64(v int64) bool    { return v <= 0 }
func less32(a, b int32) bool { return a < b }
func less64(a, b int64) bool { return a < b }

func fmtInt[T int32 | int64](v T) string { return fmt.Sprint(v) }

// resolve settles one limit. rule is the HarnessPolicy ceiling's name ("":
// no ceiling exists for it).
func resolve[T any](r *resolver, name, rule string, run, fix, def T, ceiling *T, unset func(T) bool, less func(a, b T) bool, show func(T) string) T {
	v, from := def, LimitFromDefault
	switch {
	case !unset(run):
		v, from = run, LimitFromRun
	case !unset(fix):
		v, from = fix, LimitFromFixture
	}
	if ceiling != nil && less(*ceiling, v) {
		policy := r.ceilings.Policies[rule]
		if from == LimitFromDefault {
			r.out.Sources[name] = LimitFromPolicy + " " + policy + " limits." + rule
			return *ceiling
		}
		r.out.Violations = append(r.out.Violations, PolicyViolation{Policy: policy, Rule: "limits." + rule,
			Message: fmt.Sprintf("limits.%s %s (set by the %s) is above the ceiling %s", name, show(v), from, show(*ceiling))})
	}
	r.out.Sources[name] = from
	return v
}

func resolveQuantity(r *resolver, name, rule string, run, fix *resource.Quantity, def string, ceiling *resource.Quantity) *resource.Quantity {
	d := resource.MustParse(def)
	unset := func(q *resource.Quantity) bool { return q == nil || q.Sign() <= 0 }
	less := func(a, b *resource.Quantity) bool { return a.Cmp(*b) < 0 }
	show := func(q *resource.Quantity) string { return q.String() }
	var c **resource.Quantity
	if ceiling != nil {
		c = &ceiling
	}
	v := resolve(r, name, rule, run, fix, &d, c, unset, less, show)
	return ptrTo(v.DeepCopy())
}

// CheckLimits holds limits that never passed the API server (a fixture's) to
// the schema's bounds, so a fixture cannot ask for what no run may.
func CheckLimits(l *Limits) error {
	if l == nil {
		return nil
	}
	var bad []string
	in := func(name string, v, lo, hi int64) {
		if v != 0 && (v < lo || v > hi) {
			bad = append(bad, fmt.Sprintf("limits.%s %d is not between %d and %d", name, v, lo, hi))
		}
	}
	in("episodeSeconds", int64(l.EpisodeSeconds), 1, int64(MaxEpisodeSeconds))
	in("probeSeconds", int64(l.ProbeSeconds), 1, int64(MaxEpisodeSeconds))
	in("maxDecisions", int64(l.MaxDecisions), 1, int64(MaxMaxDecisions))
	in("maxProcesses", int64(l.MaxProcesses), 1, int64(MaxMaxProcesses))
	in("maxOutputBytes", l.MaxOutputBytes, MinMaxOutputBytes, MaxMaxOutputBytes)
	in("maxArtifactBytes", l.MaxArtifactBytes, 1, MaxMaxArtifactBytes)
	inQ := func(name string, q *resource.Quantity, lo, hi string) {
		if q != nil && (q.Cmp(resource.MustParse(lo)) < 0 || q.Cmp(resource.MustParse(hi)) > 0) {
			bad = append(bad, fmt.Sprintf("limits.%s %s is not between %s and %s", name, q, lo, hi))
		}
	}
	inQ("memory", l.Memory, MinMemory, MaxMemory)
	inQ("disk", l.Disk, MinDisk, MaxDisk)
	if l.EpisodeSeconds > 0 && l.ProbeSeconds > l.EpisodeSeconds {
		bad = append(bad, "limits.probeSeconds must not be longer than limits.episodeSeconds")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}
