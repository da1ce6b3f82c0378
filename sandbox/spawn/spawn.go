// Package spawn is the far end of the bwrap runner's prepared sandboxes.
//
// On a cgroup v1 host a child cannot be started inside a cgroup (there is
// no CLONE_INTO_CGROUP), and moving a started process into the memory and
// pids hierarchies takes the kernel's global threadgroup lock twice: the
// largest part of a sandbox's start. So the runner starts a spawner ahead,
// while no run waits, moves it into a fresh run cgroup, and when a run
// comes sends it one Request over a socket, with the child's descriptors:
// the spawner starts the run's bwrap as the run's uid, born in its cgroup
// as on cgroup v2, and ends as it ends.
//
// This package is small on purpose (standard library and x/sys only): both
// binaries serve it, and harnessfacts-sandbox-init must start fast.
package spawn

// Command is the (hidden) command line argument that makes a binary Serve.
const Command = "sandbox-spawn"

// ControlFd is the spawner's end of its control socket (a SOCK_SEQPACKET
// socket pair with the runner).
const ControlFd = 3

// MaxRequest bounds one request's JSON.
const MaxRequest = 1 << 20

// MaxFds bounds the descriptors one request passes.
const MaxFds = 16

// Request is the one message a spawner gets. The descriptors travel beside
// it (SCM_RIGHTS), in the order of Fds.
type Request struct {
	// Path is the program to execute (bwrap), absolute.
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	// UID and GID are the run's; the spawner refuses root.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Fds are the numbers the passed descriptors get in the program, in
	// the order they were passed; any other descriptor is closed.
	Fds []int `json:"fds"`
}

// Messages on the control socket from the spawner: Ready once it waits for
// its request (a prepared sandbox is only ready then: the spawner's own
// start is no run's wait), Started once the program runs, or Failed with
// the reason. End of file before either means the spawner died.
const (
	Ready   = "ready"
	Started = "started"
	Failed  = "failed: "
)
