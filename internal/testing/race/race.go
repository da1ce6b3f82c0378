//go:build race

package race

// Enabled is whether this test binary was built with -race.
const Enabled = true
