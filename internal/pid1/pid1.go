// Package pid1 lets a process that is PID 1 of its pid namespace (the
// node-agent in its container) do PID 1's duty: reap every orphaned
// process the kernel hands it. A Go program cannot do that itself without
// racing os/exec, whose Wait would find its own child already reaped by a
// wait for any child. So, as tini and dumb-init do, the PID 1 process
// becomes a tiny init: it starts the same command again as its only child,
// forwards the signals a container receives to it, reaps whatever exits,
// and exits with the child's status. The child, not being PID 1, runs as
// usual; its orphans (a killed sandbox's inner bwrap, whatever an exec'd
// command left behind) go to the init and are reaped there.
package pid1
