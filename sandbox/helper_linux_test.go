package sandbox

import (
	"os"

	"github.com/harnessfacts/harnessfacts/sandbox/spawn"
)

// runHelper runs the test binary as a helper process when asked to.
func runHelper() {
	if len(os.Args) > 1 && os.Args[1] == spawn.Command {
		os.Exit(spawn.Serve()) // the test binary is the Preparer's spawner
	}
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
	if os.Getenv(noCPUHelperEnv) != "" {
		os.Exit(noCPUHelper())
	}
}
