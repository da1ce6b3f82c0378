package nodecmd

import (
	"fmt"
	"os"
	"runtime"
)

// errNotRoot refuses to start the node-agent as any uid but 0. The
// node-agent runs every agent as an unprivileged uid of its own choosing
// (a pool of them, one per run) and mounts each run dir's size-limited
// file system; as another uid it can do neither. It used to go on anyway,
// ignoring its --run-as-uid: every agent then ran as the operator's own uid,
// able to reach what that uid reaches, /run/user/<uid> among it (the
// session bus, systemd --user, ssh-agent, rootless container sockets).
func errNotRoot(euid int) error {
	return fmt.Errorf("the node-agent must run as root (uid 0; in a pod, root of the pod's user namespace, as the chart does), not as uid %d: "+
		"it runs each agent as an unprivileged uid of --run-uids and mounts each run's size-limited run dir, and as uid %d "+
		"every agent would run as uid %d itself, with everything that uid can reach (its files, /run/user/%d: the session bus, ssh-agent, systemd --user). "+
		"To run one HarnessRun on your own machine without root, use `harnessfacts run`", euid, euid, euid, euid)
}

// checkNodeAgentUser is errNotRoot unless this process is root. Windows has
// no uids: the node-agent runs as SYSTEM there (the chart's Windows
// DaemonSet) and isolates with AppContainers.
func checkNodeAgentUser() error {
	if runtime.GOOS == "windows" {
		return nil
	}
	if euid := os.Geteuid(); euid != 0 {
		return errNotRoot(euid)
	}
	return nil
}
