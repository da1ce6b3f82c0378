//go:build !linux

package sandbox

// placeNodeAgent changes nothing where there are no cgroups (Windows bounds
// each run with a Job Object instead).
func placeNodeAgent(opts Options, _ int64) (Options, Placement, error) {
	return opts, Placement{}, nil
}
