//go:build !linux

package nodecmd

// modeHint has nothing to add outside Linux.
func modeHint() string { return "" }
