//go:build !race

// Package race tells a test whether the race detector is on. Tests that
// measure the CPU or memory of the real thing (a run's share of a core, a
// fetch's resident memory, a sandbox's memory limit) skip under it: it
// multiplies both several times, so their bounds would fail on correct
// code. Everything else in `go test -race ./...` runs.
package race

// Enabled is whether this test binary was built with -race.
const Enabled = false
