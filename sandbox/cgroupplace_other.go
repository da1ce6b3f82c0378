//go:build !linux

package sandbox

import "time"

// placeNodeAgent changes nothing where there are no cgroups (Windows bounds
// each run with a Job Object instead).
func placeNodeAgent(opts Options, _ int64) (Options, Placement, error) {
	return opts, Placement{}, nil
}

// RemoveAbandonedCgroups has nothing to remove where there are no cgroups.
func RemoveAbandonedCgroups(Options, time.Duration) ([]string, error) { return nil, nil }
