package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// slirpDNS is slirp4netns's DNS forwarder in its default 10.0.2.0/24.
const slirpDNS = "10.0.2.3"

// slirpPath finds the slirp4netns binary of opts (or the one in PATH).
func slirpPath(opts Options) (string, error) {
	name := opts.Slirp4netns
	if name == "" {
		name = "slirp4netns"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("sandbox: a run with a user-mode network needs slirp4netns (%w): install Debian's slirp4netns package (apt-get install slirp4netns)", err)
	}
	return p, nil
}

// resolvConfPath is where the sandbox's /etc/resolv.conf is read from: the
// file itself or, when it is a link (systemd-resolved's stub in /run), the
// file it names, which the sandbox's tmpfs over /run would otherwise leave
// dangling.
func resolvConfPath() string {
	if p, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil {
		return p
	}
	return "/etc/resolv.conf"
}

// slirpNet is a slirp4netns process serving one sandbox's network
// namespace.
type slirpNet struct {
	cmd   *exec.Cmd
	exitW *os.File
	done  chan struct{}
	once  sync.Once
}

// startSlirp attaches slirp4netns to the sandbox's network namespace ns
// (the runner's, before bwrap starts in it) and returns once the
// namespace's tap0 is configured (address
// 10.0.2.100, gateway 10.0.2.2, DNS 10.0.2.3). It runs as the caller: it
// must open /dev/net/tun, which many hosts (this project's machines among
// them) keep 0600 root, and the sandbox's own uid could not. slirp4netns
// parses every packet the agent sends, so it confines itself first:
// --enable-sandbox gives it an empty mount namespace and drops every
// capability but CAP_NET_BIND_SERVICE, --enable-seccomp allows few system
// calls. --disable-host-loopback refuses connections to the gateway that
// would reach the caller's 127.0.0.1.
func startSlirp(path string, ns *os.File) (*slirpNet, error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	// The namespace as slirp4netns's own descriptor 5, which it opens
	// again by its /proc path: it names no process that could be gone.
	cmd := exec.Command(path, "--configure", "--mtu=65520", "--disable-host-loopback",
		"--enable-sandbox", "--enable-seccomp", "--ready-fd=3", "--exit-fd=4",
		"--netns-type=path", "/proc/self/fd/5", "tap0")
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{readyW, exitR, ns}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &limitedWriter{w: &stderr, left: 4096}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		exitW.Close()
		return nil, fmt.Errorf("starting slirp4netns: %w", err)
	}
	n := &slirpNet{cmd: cmd, exitW: exitW, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(n.done)
	}()
	_ = readyR.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [1]byte
	if _, err := readyR.Read(b[:]); err != nil || b[0] != '1' {
		n.stop()
		return nil, fmt.Errorf("slirp4netns did not configure the sandbox's network (%w): %s", err, strings.TrimSpace(stderr.String()))
	}
	return n, nil
}

// stop ends slirp4netns: closing the exit descriptor asks it to, a kill
// makes sure.
func (n *slirpNet) stop() {
	n.once.Do(func() {
		_ = n.exitW.Close()
		select {
		case <-n.done:
		case <-time.After(2 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	})
}

// limitedWriter keeps at most left bytes and drops the rest.
type limitedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left > 0 {
		k := min(len(p), l.left)
		l.left -= k
		if _, err := l.w.Write(p[:k]); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
