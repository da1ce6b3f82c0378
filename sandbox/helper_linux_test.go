package sandbox

import "os"

// runHelper runs the test binary as a helper process when asked to.
func runHelper() {
	if dir := os.Getenv(cgroupMountHelperEnv); dir != "" {
		os.Exit(cgroupMountHelper(dir))
	}
	if cfg := os.Getenv(placeHelperEnv); cfg != "" {
		os.Exit(placeHelper(cfg))
	}
}
