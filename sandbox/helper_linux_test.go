package sandbox

import "os"

// runHelper runs the test binary as a helper process when asked to.
func runHelper() {
	if dir := os.Getenv(cgroupMountHelperEnv); dir != "" {
		os.Exit(cgroupMountHelper(dir))
	}
	if dir := os.Getenv(inheritHelperEnv); dir != "" {
		os.Exit(inheritHelper(dir))
	}
	if cfg := os.Getenv(placeHelperEnv); cfg != "" {
		os.Exit(placeHelper(cfg))
	}
	if base := os.Getenv(tidyHelperEnv); base != "" {
		os.Exit(tidyHelper(base))
	}
	if mib := os.Getenv(socketFillHelperEnv); mib != "" {
		os.Exit(socketFillHelper(mib))
	}
	if dir := os.Getenv(devHelperEnv); dir != "" {
		os.Exit(devHelper(dir))
	}
	if parent := os.Getenv(lentParentHelperEnv); parent != "" {
		os.Exit(lentParentHelper(parent))
	}
	if parent := os.Getenv(parkHelperEnv); parent != "" {
		os.Exit(parkHelper(parent))
	}
	if os.Getenv(noCPUHelperEnv) != "" {
		os.Exit(noCPUHelper())
	}
}
