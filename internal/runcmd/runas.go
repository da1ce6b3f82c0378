package runcmd

import (
	"fmt"
	"os"
	"runtime"
)

// checkLocalRunUser refuses a uid flag `harnessfacts run` cannot honour:
// only root can run the agent as another uid. Without the flag a non-root
// run goes on as the invoking user, and says so.
func checkLocalRunUser(uidFlagSet bool) (warning string, err error) {
	euid := os.Geteuid()
	if runtime.GOOS == "windows" || euid == 0 {
		return "", nil
	}
	if uidFlagSet {
		return "", fmt.Errorf("--run-as-uid needs root: this process is uid %d and cannot run the agent as another uid. "+
			"Run as root, or leave --run-as-uid out: the agent then runs as uid %d, sandboxed", euid, euid)
	}
	return fmt.Sprintf("not root: the agent runs as your own uid %d (in the sandbox, with /run, /tmp and your home hidden); as root it would run as an unprivileged uid of its own", euid), nil
}
