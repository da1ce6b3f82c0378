package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

// Each limit resolves as the run's, else the fixture's, else the default;
// a default gives way to a lower ceiling, while a value somebody asked for
// above one is a violation, never cut.
func TestResolveLimits(t *testing.T) {
	defaults := Limits{EpisodeSeconds: DefaultEpisodeSeconds, ProbeSeconds: DefaultProbeSeconds, Memory: q(DefaultMemory), Disk: q(DefaultDisk),
		MaxDecisions: DefaultMaxDecisions, MaxProcesses: DefaultMaxProcesses, MaxOutputBytes: DefaultMaxOutputBytes, MaxArtifactBytes: DefaultMaxArtifactBytes}
	with := func(change func(*Limits)) Limits {
		l := *defaults.DeepCopy()
		change(&l)
		return l
	}
	allFrom := func(src string, except map[string]string) map[string]string {
		m := map[string]string{}
		for _, k := range []string{"episodeSeconds", "probeSeconds", "memory", "disk", "maxDecisions", "maxProcesses", "maxOutputBytes", "maxArtifactBytes"} {
			m[k] = src
		}
		for k, v := range except {
			m[k] = v
		}
		return m
	}
	hello := &Limits{EpisodeSeconds: 60, ProbeSeconds: 20}
	ceilings := &LimitCeilings{
		PolicyLimits: PolicyLimits{MaxEpisodeSeconds: ptr.To[int32](300), MaxMemory: q("1Gi"), MaxDisk: q("512Mi"),
			MaxOutputBytes: ptr.To[int64](1 << 20), MaxDecisions: ptr.To[int32](100)},
		Policies: map[string]string{"maxEpisodeSeconds": "short", "maxMemory": "small", "maxDisk": "small", "maxOutputBytes": "quiet", "maxDecisions": "quiet"},
	}
	cases := map[string]struct {
		run      Limits
		fixture  *Limits
		ceilings *LimitCeilings
		want     Limits
		sources  map[string]string
		refused  []string
	}{
		"nothing set: the defaults": {want: defaults, sources: allFrom(LimitFromDefault, nil)},
		"the fixture's apply when the run sets none": {fixture: hello,
			want:    with(func(l *Limits) { l.EpisodeSeconds, l.ProbeSeconds = 60, 20 }),
			sources: allFrom(LimitFromDefault, map[string]string{"episodeSeconds": "fixture", "probeSeconds": "fixture"})},
		"the run's win over the fixture's": {run: Limits{EpisodeSeconds: 90, Disk: q("8Mi")}, fixture: &Limits{EpisodeSeconds: 60, ProbeSeconds: 20, Disk: q("2Gi")},
			want:    with(func(l *Limits) { l.EpisodeSeconds, l.ProbeSeconds, l.Disk = 90, 20, q("8Mi") }),
			sources: allFrom(LimitFromDefault, map[string]string{"episodeSeconds": "run", "probeSeconds": "fixture", "disk": "run"})},
		"every field from the fixture": {fixture: &Limits{EpisodeSeconds: 10, ProbeSeconds: 5, Memory: q("64Mi"), Disk: q("4Mi"), MaxDecisions: 3, MaxProcesses: 7, MaxOutputBytes: 2048, MaxArtifactBytes: 9},
			want:    Limits{EpisodeSeconds: 10, ProbeSeconds: 5, Memory: q("64Mi"), Disk: q("4Mi"), MaxDecisions: 3, MaxProcesses: 7, MaxOutputBytes: 2048, MaxArtifactBytes: 9},
			sources: allFrom(LimitFromFixture, nil)},
		"a default probe stays within a short episode": {run: Limits{EpisodeSeconds: 30},
			want:    with(func(l *Limits) { l.EpisodeSeconds, l.ProbeSeconds = 30, 30 }),
			sources: allFrom(LimitFromDefault, map[string]string{"episodeSeconds": "run"})},
		"defaults give way to lower ceilings": {ceilings: ceilings,
			want: with(func(l *Limits) {
				l.EpisodeSeconds, l.Memory, l.Disk, l.MaxOutputBytes, l.MaxDecisions = 300, q("1Gi"), q("512Mi"), 1<<20, 100
			}),
			sources: allFrom(LimitFromDefault, map[string]string{
				"episodeSeconds": "HarnessPolicy short limits.maxEpisodeSeconds", "memory": "HarnessPolicy small limits.maxMemory",
				"disk": "HarnessPolicy small limits.maxDisk", "maxOutputBytes": "HarnessPolicy quiet limits.maxOutputBytes",
				"maxDecisions": "HarnessPolicy quiet limits.maxDecisions"})},
		"within the ceilings nothing changes": {fixture: hello, run: Limits{Memory: q("1Gi")}, ceilings: ceilings,
			want: with(func(l *Limits) {
				l.EpisodeSeconds, l.ProbeSeconds, l.Memory, l.Disk, l.MaxOutputBytes, l.MaxDecisions = 60, 20, q("1Gi"), q("512Mi"), 1<<20, 100
			}),
			sources: allFrom(LimitFromDefault, map[string]string{
				"episodeSeconds": "fixture", "probeSeconds": "fixture", "memory": "run",
				"disk": "HarnessPolicy small limits.maxDisk", "maxOutputBytes": "HarnessPolicy quiet limits.maxOutputBytes",
				"maxDecisions": "HarnessPolicy quiet limits.maxDecisions"})},
		"a fixture above a ceiling is refused, not cut": {fixture: &Limits{EpisodeSeconds: 600, Disk: q("1Gi")}, ceilings: ceilings,
			want: with(func(l *Limits) {
				l.EpisodeSeconds, l.Memory, l.Disk, l.MaxOutputBytes, l.MaxDecisions = 600, q("1Gi"), q("1Gi"), 1<<20, 100
			}),
			sources: allFrom(LimitFromDefault, map[string]string{
				"episodeSeconds": "fixture", "memory": "HarnessPolicy small limits.maxMemory", "disk": "fixture",
				"maxOutputBytes": "HarnessPolicy quiet limits.maxOutputBytes", "maxDecisions": "HarnessPolicy quiet limits.maxDecisions"}),
			refused: []string{
				"HarnessPolicy short rule limits.maxEpisodeSeconds: limits.episodeSeconds 600 (set by the fixture) is above the ceiling 300",
				"HarnessPolicy small rule limits.maxDisk: limits.disk 1Gi (set by the fixture) is above the ceiling 512Mi",
			}},
		"the ceilings of checks' time, processes and artifacts": {fixture: &Limits{MaxProcesses: 4096}, ceilings: &LimitCeilings{
			PolicyLimits: PolicyLimits{MaxProbeSeconds: ptr.To[int32](30), MaxProcesses: ptr.To[int32](512), MaxArtifactBytes: ptr.To[int64](1 << 16)},
			Policies:     map[string]string{"maxProbeSeconds": "brief", "maxProcesses": "few", "maxArtifactBytes": "small"}},
			want: with(func(l *Limits) { l.ProbeSeconds, l.MaxProcesses, l.MaxArtifactBytes = 30, 4096, 1<<16 }),
			sources: allFrom(LimitFromDefault, map[string]string{
				"probeSeconds": "HarnessPolicy brief limits.maxProbeSeconds", "maxProcesses": "fixture",
				"maxArtifactBytes": "HarnessPolicy small limits.maxArtifactBytes"}),
			refused: []string{"HarnessPolicy few rule limits.maxProcesses: limits.maxProcesses 4096 (set by the fixture) is above the ceiling 512"}},
		"a run above a ceiling is refused too": {run: Limits{MaxOutputBytes: 1<<20 + 1}, ceilings: ceilings,
			want: with(func(l *Limits) {
				l.EpisodeSeconds, l.Memory, l.Disk, l.MaxOutputBytes, l.MaxDecisions = 300, q("1Gi"), q("512Mi"), 1<<20+1, 100
			}),
			sources: allFrom(LimitFromDefault, map[string]string{
				"episodeSeconds": "HarnessPolicy short limits.maxEpisodeSeconds", "memory": "HarnessPolicy small limits.maxMemory",
				"disk": "HarnessPolicy small limits.maxDisk", "maxOutputBytes": "run", "maxDecisions": "HarnessPolicy quiet limits.maxDecisions"}),
			refused: []string{"HarnessPolicy quiet rule limits.maxOutputBytes: limits.maxOutputBytes 1048577 (set by the run) is above the ceiling 1048576"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ResolveLimits(tc.run, tc.fixture, tc.ceilings)
			if diff := cmp.Diff(tc.want, got.Limits); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.sources, got.Sources); diff != "" {
				t.Errorf("sources (-want +got):\n%s", diff)
			}
			var refused []string
			for _, v := range got.Violations {
				refused = append(refused, v.String())
			}
			if diff := cmp.Diff(tc.refused, refused); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
			if err := CheckLimits(&got.Limits); err != nil && len(tc.refused) == 0 {
				t.Errorf("resolved limits outside the schema's bounds: %v", err)
			}
		})
	}
}

// The strictest ceiling of each rule wins, named by its policy.
func TestCeilings(t *testing.T) {
	pol := func(name string, l *PolicyLimits) *HarnessPolicy {
		return &HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: HarnessPolicySpec{Limits: l}}
	}
	if c := Ceilings([]*HarnessPolicy{pol("none", nil), pol("empty", &PolicyLimits{})}); c != nil {
		t.Errorf("no ceiling set, got %+v", c)
	}
	got := Ceilings([]*HarnessPolicy{
		pol("a", &PolicyLimits{MaxEpisodeSeconds: ptr.To[int32](600), MaxMemory: q("1Gi")}),
		pol("b", &PolicyLimits{MaxEpisodeSeconds: ptr.To[int32](300), MaxMemory: q("2Gi"), MaxDisk: q("1Gi")}),
	})
	want := &LimitCeilings{PolicyLimits: PolicyLimits{MaxEpisodeSeconds: ptr.To[int32](300), MaxMemory: q("1Gi"), MaxDisk: q("1Gi")},
		Policies: map[string]string{"maxEpisodeSeconds": "b", "maxMemory": "a", "maxDisk": "b"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCheckLimitsSaysWhatIsWrong(t *testing.T) {
	err := CheckLimits(&Limits{EpisodeSeconds: 100000, Disk: q("300Gi")})
	if err == nil || !strings.Contains(err.Error(), "limits.episodeSeconds 100000 is not between 1 and 86400") ||
		!strings.Contains(err.Error(), "limits.disk 300Gi is not between 1Mi and 256Gi") {
		t.Errorf("got %v", err)
	}
}
