package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// servedBy is a Loopback whose server answers with who, counting requests.
func servedBy(addr, who string, hits *atomic.Int32) Loopback {
	return Loopback{Addr: addr, Serve: func(l net.Listener) {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits.Add(1)
			fmt.Fprint(w, who)
		}))
	}}
}

// freePort is a port free on the host's loopback now.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestBwrapLoopbackIsTheRunnersInTheSandboxesOwnNetwork: a Loopback is
// listened on by the runner in the sandbox's own network namespace before
// the command starts: the command reaches it at once, on its loopback;
// the host's loopback, where a listener of the same port answers
// something else, is never what it reaches, and sandboxes side by side
// each have their own on the same port. Nothing in the sandbox may change
// that namespace (it is the runner's).
func TestBwrapLoopbackIsTheRunnersInTheSandboxesOwnNetwork(t *testing.T) {
	r := requireBwrapHost(t)
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	host, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	var hostHits atomic.Int32
	go func() {
		_ = http.Serve(host, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hostHits.Add(1); fmt.Fprint(w, "the host") }))
	}()
	defer host.Close()

	base := testBase(t)
	script := fmt.Sprintf(`curl -sS --max-time 10 http://%s/ && echo
if command -v ip >/dev/null; then
  ip link set lo down 2>/dev/null && echo "LO DOWN"
  ip addr add 10.9.9.9/32 dev lo 2>/dev/null && echo "ADDR ADDED"
  ip route add blackhole 10.8.0.0/16 2>/dev/null && echo "ROUTE ADDED"
fi
curl -sS --max-time 10 http://%s/ && echo`, addr, addr)
	const sandboxes = 3
	var hits [sandboxes]atomic.Int32
	outs := make([]string, sandboxes)
	results := make([]Result, sandboxes)
	var wg sync.WaitGroup
	for i := range sandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := runDir(t, base, "sh", "-c", script)
			spec.Loopback = []Loopback{servedBy(addr, fmt.Sprintf("sandbox %d's runner", i), &hits[i])}
			var out strings.Builder
			var mu sync.Mutex
			w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
			spec.Stdout, spec.Stderr = w, w
			res, err := r.Run(context.Background(), spec)
			if err != nil {
				t.Errorf("sandbox %d: %v", i, err)
			}
			results[i], outs[i] = res, out.String()
		}()
	}
	wg.Wait()
	for i := range sandboxes {
		want := fmt.Sprintf("sandbox %d's runner\n", i)
		if results[i].ExitCode != 0 || strings.Count(outs[i], want) != 2 || hits[i].Load() != 2 {
			t.Errorf("sandbox %d did not reach its own loopback listener twice (hits %d): %+v\n%s", i, hits[i].Load(), results[i], outs[i])
		}
		for _, changed := range []string{"LO DOWN", "ADDR ADDED", "ROUTE ADDED"} {
			if strings.Contains(outs[i], changed) {
				t.Errorf("sandbox %d changed its network namespace: %s\n%s", i, changed, outs[i])
			}
		}
	}
	if hostHits.Load() != 0 {
		t.Errorf("a sandbox reached the host's loopback %d times", hostHits.Load())
	}
	// The listeners were closed with each run: the port is free in no
	// namespace but the host's, where the host's listener still answers.
	if c, err := net.Dial("tcp4", addr); err != nil {
		t.Errorf("the host's listener: %v", err)
	} else {
		c.Close()
	}
	assertNoRunCgroups(t)
}

// TestLoopbackOfASharedNetworkIsTheCallers: with the network shared (and
// in the plain runner) the command's loopback is the caller's, and so is
// the listener.
func TestLoopbackOfASharedNetworkIsTheCallers(t *testing.T) {
	r := requireBwrapHost(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for _, runner := range []Runner{r, &PlainRunner{}} {
		var hits atomic.Int32
		spec := runDir(t, testBase(t), "curl", "-sS", "--max-time", "10", "http://"+addr+"/")
		spec.Network = NetworkShared
		spec.Loopback = []Loopback{servedBy(addr, "the caller's", &hits)}
		var seen atomic.Int32
		spec.Started = func() {
			// Listening on the caller's loopback while the command runs.
			if c, err := net.Dial("tcp4", addr); err == nil {
				seen.Add(1)
				c.Close()
			}
		}
		res, out := run(t, runner, spec)
		if res.ExitCode != 0 || out != "the caller's" || hits.Load() != 1 || seen.Load() != 1 {
			t.Errorf("%s: %+v %q (hits %d, seen from here %d)", runner.Mode(), res, out, hits.Load(), seen.Load())
		}
		if c, err := net.Dial("tcp4", addr); err == nil {
			c.Close()
			t.Errorf("%s: the listener outlived the run", runner.Mode())
		}
	}
}

func TestLoopbackIsCheckedBeforeAnythingStarts(t *testing.T) {
	for _, lb := range []Loopback{
		{Addr: "0.0.0.0:4000", Serve: func(net.Listener) {}},
		{Addr: "10.0.0.1:4000", Serve: func(net.Listener) {}},
		{Addr: "[::1]:4000", Serve: func(net.Listener) {}},
		{Addr: "127.0.0.1:0", Serve: func(net.Listener) {}},
		{Addr: "127.0.0.1:4000"},
	} {
		spec := Spec{Argv: []string{"true"}, Dir: "/", Loopback: []Loopback{lb}}
		if err := spec.validate(); err == nil {
			t.Errorf("%+v accepted", lb)
		}
	}
	twice := Spec{Argv: []string{"true"}, Dir: "/", Loopback: []Loopback{
		{Addr: "127.0.0.1:4000", Serve: func(net.Listener) {}}, {Addr: "127.0.0.1:4000", Serve: func(net.Listener) {}}}}
	if err := twice.validate(); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("the same address twice: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestBwrapLoopbackWithAUserModeNetwork: a user-mode network's namespace is
// the runner's too (slirp4netns attached to it before bwrap starts), and
// its loopback listeners are there with the stack.
func TestBwrapLoopbackWithAUserModeNetwork(t *testing.T) {
	r := requireBwrapHost(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var hits atomic.Int32
	spec := runDir(t, testBase(t), "curl", "-sS", "--max-time", "10", "http://"+addr+"/")
	spec.Network = NetworkUserMode
	spec.Loopback = []Loopback{servedBy(addr, "the runner, in the user-mode network", &hits)}
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || out != "the runner, in the user-mode network" || hits.Load() != 1 {
		t.Fatalf("%+v %q (hits %d)", res, out, hits.Load())
	}
	assertNoRunCgroups(t)
}

// TestAForkerThatCannotLeaveANetworkNamespaceIsParked: the forker starts a
// command in the namespace it is given and returns to its own; one that
// cannot return is parked (and says so), and the next start, in no
// namespace of a sandbox's, is the process's own again.
func TestAForkerThatCannotLeaveANetworkNamespaceIsParked(t *testing.T) {
	requireBwrapHost(t)
	ns, ls, err := newNetns(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	closeAll(ls)
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	netnsOf := func(netns *os.File) (string, error) {
		c := exec.Command("readlink", "/proc/self/ns/net")
		var out bytes.Buffer
		c.Stdout = &out
		if err := startOnForker(nil, netns, c, nil); err != nil {
			return "", err
		}
		err := c.Wait()
		return strings.TrimSpace(out.String()), err
	}
	if got, err := netnsOf(ns); err != nil || got != theirs || got == own {
		t.Fatalf("started in %q (%v), want the sandbox's %q", got, err, theirs)
	}
	if got, err := netnsOf(nil); err != nil || got != own {
		t.Fatalf("started in %q (%v) after a start in the sandbox's, want this process's %q", got, err, own)
	}

	saved := setnsBack
	setnsBack = func(int) error { return errors.New("refused by the test") }
	got, err := netnsOf(ns)
	setnsBack = saved
	if err == nil || !strings.Contains(err.Error(), "parked") || !strings.Contains(err.Error(), "network namespace") {
		t.Fatalf("a forker that could not leave said %v (started in %q)", err, got)
	}
	if got, err := netnsOf(nil); err != nil || got != own {
		t.Fatalf("the next start, after a forker was parked, ran in %q (%v), want this process's %q", got, err, own)
	}
}

// TestBwrapCommandThatCannotBeExecutedExitsAsInAShell: bwrap reports a
// command it could not execute as exit 1, like any failure; the runner
// says it the shells' way (127 not found, 126 found but not executable),
// which a sandbox-init in front of every command used to. What else exits
// 1 stays 1, bwrap's words printed by the command among them when it
// printed more.
func TestBwrapCommandThatCannotBeExecutedExitsAsInAShell(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	for _, c := range []struct {
		argv []string
		code int
		says string
	}{
		{[]string{"/nonexistent/agent"}, 127, "bwrap: execvp /nonexistent/agent: No such file or directory\n"},
		{[]string{"no-such-command-here"}, 127, "bwrap: execvp no-such-command-here: No such file or directory\n"},
		{[]string{"/usr"}, 126, "bwrap: execvp /usr: Permission denied\n"},
		{[]string{"/etc/hostname"}, 126, "bwrap: execvp /etc/hostname: Permission denied\n"},
		{[]string{"sh", "-c", "exit 1"}, 1, ""},
		{[]string{"sh", "-c", "echo 'bwrap: execvp sh: No such file or directory' >&2; echo more; exit 1"}, 1, "bwrap: execvp sh: No such file or directory\nmore\n"},
	} {
		res, out := run(t, r, runDir(t, base, c.argv...))
		if res.ExitCode != c.code || afterSetupRetries(out) != c.says {
			t.Errorf("%q: exit %d %q, want %d %q", c.argv, res.ExitCode, out, c.code, c.says)
		}
	}
}

// TestBwrapOfAUserMakesItsOwnNetwork: a caller that is not root can make
// no network namespace, nor enter one: bwrap makes the sandbox's, with
// only its loopback (the caller's is out of reach), and a Spec that asks
// the runner to listen there, or for a user-mode network, is refused
// before anything starts. Played as root with the flag a user's runner
// gets.
func TestBwrapOfAUserMakesItsOwnNetwork(t *testing.T) {
	r := requireBwrapHost(t)
	user := *r
	user.userNetns = true
	if ServesLoopback(&user) || !ServesLoopback(r) || !ServesLoopback(&PlainRunner{}) {
		t.Fatalf("ServesLoopback: a user's bwrap %v, root's %v, plain %v", ServesLoopback(&user), ServesLoopback(r), ServesLoopback(&PlainRunner{}))
	}
	host, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	script := fmt.Sprintf(`grep -c ':' /proc/net/dev; curl -sS --max-time 5 http://%s/ >/dev/null 2>&1 && echo REACHED; readlink /proc/self/ns/net`, host.Addr())
	res, out := run(t, &user, runDir(t, testBase(t), "sh", "-c", script))
	own, _ := os.Readlink("/proc/self/ns/net")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// /proc/net/dev: two header lines, then lo alone.
	if res.ExitCode != 0 || len(lines) != 2 || lines[0] != "1" || lines[1] == own {
		t.Fatalf("%+v %q: want lo alone, the caller's loopback out of reach, a namespace not the caller's (%s)", res, out, own)
	}

	spec := runDir(t, testBase(t), "true")
	spec.Loopback = []Loopback{{Addr: "127.0.0.1:7700", Serve: func(net.Listener) {}}}
	if _, err := user.Run(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "sandbox-init") {
		t.Errorf("a user's runner asked to listen in the sandbox: %v", err)
	}
	spec = runDir(t, testBase(t), "true")
	spec.Network = NetworkUserMode
	if _, err := user.Run(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("a user's runner asked for a user-mode network: %v", err)
	}
	assertNoRunCgroups(t)
}
