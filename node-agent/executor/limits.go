package executor

import (
	"k8s.io/apimachinery/pkg/api/resource"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// DefaultLimits fills unset limits with the API's defaults. On a cluster the
// API server has already done so; a run.yaml read by `harnessfacts run` has
// not been near one.
func DefaultLimits(l harnessv1.Limits) harnessv1.Limits {
	if l.EpisodeSeconds <= 0 {
		l.EpisodeSeconds = 360
	}
	if l.ProbeSeconds <= 0 {
		l.ProbeSeconds = 120
	}
	if l.Memory == nil || l.Memory.Sign() <= 0 {
		m := resource.MustParse("2Gi")
		l.Memory = &m
	}
	if l.MaxDecisions <= 0 {
		l.MaxDecisions = 5000
	}
	if l.MaxProcesses <= 0 {
		l.MaxProcesses = 1024
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = 8 << 20
	}
	if l.MaxArtifactBytes <= 0 {
		l.MaxArtifactBytes = 256 << 10
	}
	if l.Disk == nil || l.Disk.Sign() <= 0 {
		d := resource.MustParse(harnessv1.DefaultDisk)
		l.Disk = &d
	}
	return l
}

// effectiveLimits fills the run's unset limits from the fixture's, then
// from the API's defaults (a run read from a file was never defaulted by an
// API server).
func effectiveLimits(run harnessv1.Limits, fix *harnessv1.Limits) harnessv1.Limits {
	l := run
	if fix != nil {
		if l.EpisodeSeconds == 0 {
			l.EpisodeSeconds = fix.EpisodeSeconds
		}
		if l.ProbeSeconds == 0 {
			l.ProbeSeconds = fix.ProbeSeconds
		}
		if l.Memory == nil {
			l.Memory = fix.Memory
		}
		if l.MaxDecisions == 0 {
			l.MaxDecisions = fix.MaxDecisions
		}
		if l.MaxProcesses == 0 {
			l.MaxProcesses = fix.MaxProcesses
		}
		if l.MaxOutputBytes == 0 {
			l.MaxOutputBytes = fix.MaxOutputBytes
		}
		if l.MaxArtifactBytes == 0 {
			l.MaxArtifactBytes = fix.MaxArtifactBytes
		}
		if l.Disk == nil {
			l.Disk = fix.Disk
		}
	}
	return DefaultLimits(l)
}
