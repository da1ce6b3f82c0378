package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// A sandbox without a shared network gets a network namespace of its own,
// with only a loopback. The runner makes it, rather than bwrap's
// --unshare-net, so that it can listen there before the command starts
// (Spec.Loopback): the runner's own sockets, served from outside, where a
// program started in the sandbox first (a Go bridge, about 2.5 ms of CPU
// and a few of wall time a run, and the agent's parent) did it before.
// The namespace belongs to the runner's user namespace, not the
// sandbox's: nothing in the sandbox has any capability over it (bwrap
// gives the command a user namespace of its own below, with every
// capability dropped), so no route, address, firewall rule or sysctl of
// it can change from inside. bwrap is started in it (the thread that
// forks bwrap enters it, startOnForker) and shares it (--share-net).

// newNetns makes a network namespace with its loopback up and listens on
// lb's addresses in it. ns holds the namespace until it is closed; the
// listeners and the sandbox's processes hold it too.
func newNetns(lb []Loopback) (ns *os.File, ls []net.Listener, err error) {
	err = inNetns(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("a network namespace for the sandbox: %w", err)
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return fmt.Errorf("the sandbox's network namespace: %w", err)
		}
		ns = f
		if err := loopbackUp(); err != nil {
			return err
		}
		ls, err = listenHere(lb)
		return err
	})
	if err != nil {
		// The thread may have made everything and failed only to leave
		// the namespace (inNetns): what it made is closed too.
		closeAll(ls)
		if ns != nil {
			_ = ns.Close()
		}
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	return ns, ls, nil
}

// inNetns runs enter on a thread of its own that returns to this
// process's network namespace afterwards. enter changes the thread's
// namespace (unshare, setns) and makes sockets there: a socket stays in
// the namespace it was made in. A thread that cannot return is never
// given back to Go: a locked thread whose goroutine ends without unlocking
// it ends too.
func inNetns(enter func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("this thread's network namespace: %w", err)
			return
		}
		defer own.Close()
		err = enter()
		if berr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); berr != nil {
			errc <- errors.Join(err, fmt.Errorf("leaving the sandbox's network namespace: %w", berr))
			return // locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// loopbackUp sets this thread's namespace's lo up; the kernel gives it
// 127.0.0.1/8 and ::1 as it comes up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("setting the sandbox's loopback up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("the sandbox's loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("setting the sandbox's loopback up: %w", err)
	}
	return nil
}

// listenHere listens on lb's addresses with sockets made by this thread
// (by system calls, which Go makes on the calling thread; net.Listen
// would too, but says nothing of which thread makes the socket).
func listenHere(lb []Loopback) ([]net.Listener, error) {
	var ls []net.Listener
	for _, l := range lb {
		ln, err := listenTCP4(l)
		if err != nil {
			closeAll(ls)
			return nil, err
		}
		ls = append(ls, ln)
	}
	return ls, nil
}

// listenBacklog is the listen backlog of a sandbox's loopback listeners.
const listenBacklog = 128

func listenTCP4(l Loopback) (net.Listener, error) {
	a, err := l.check()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", l.Addr, err)
	}
	f := os.NewFile(uintptr(fd), "tcp:"+l.Addr)
	defer f.Close() // FileListener holds a copy
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().As4()}); err != nil {
		return nil, fmt.Errorf("listening on %s: bind: %w", l.Addr, err)
	}
	// A connection not yet accepted is the kernel's, charged to no run:
	// the callers serve a few connections at a time (the rest wait here),
	// and a CLI opens a handful.
	if err := unix.Listen(fd, listenBacklog); err != nil {
		return nil, fmt.Errorf("listening on %s: %w", l.Addr, err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", l.Addr, err)
	}
	return ln, nil
}
