package sandbox

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/internal/testing/nethost"
)

// A user-mode network run reaches a host outside this machine's network
// namespace, and none of the caller's loopback listeners (the node-agent's
// metrics, health and MCP servers live there): neither by 127.0.0.1 (its
// own loopback) nor by the stack's gateway 10.0.2.2. Its resolv.conf names
// the stack's DNS forwarder. With NetworkNone the outside is unreachable.
func TestBwrapUserModeNetworkReachesOutsideNotLoopback(t *testing.T) {
	r := requireBwrapHost(t)
	outside := nethost.Outside(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Stands for the node-agent's loopback listeners.
	var accepted atomic.Int32
	loopback := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		accepted.Add(1)
		fmt.Fprint(w, "node-agent loopback")
	})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = loopback.Serve(ln) }()
	defer wg.Wait()
	defer loopback.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	script := fmt.Sprintf(`
curl -sS --max-time 10 http://%s/ && echo
for a in 127.0.0.1 10.0.2.2; do
  if curl -sS --max-time 5 -o /dev/null http://$a:%d/ 2>/dev/null; then echo "REACHED $a"; else echo "refused $a"; fi
done
cat /etc/resolv.conf`, outside, port)
	spec := runDir(t, testBase(t), "sh", "-c", script)
	spec.Network = NetworkUserMode
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.Contains(out, "hello from the outside") {
		t.Fatalf("user-mode network did not reach the outside host %s: %+v\n%s", outside, res, out)
	}
	if strings.Contains(out, "REACHED") || strings.Count(out, "refused") != 2 || accepted.Load() != 0 {
		t.Errorf("user-mode network reached the caller's loopback (accepted %d):\n%s", accepted.Load(), out)
	}
	if !strings.Contains(out, "nameserver "+slirpDNS) {
		t.Errorf("resolv.conf does not name the stack's DNS forwarder:\n%s", out)
	}
	if left := processesNamed("slirp4netns"); left != 0 {
		t.Errorf("%d slirp4netns processes left after the run", left)
	}

	// Controls: without a network the outside is out of reach; with the
	// caller's network the loopback listener answers (so the refusals
	// above are the stack's).
	spec = runDir(t, testBase(t), "sh", "-c", fmt.Sprintf("curl -sS --max-time 5 http://%s/ || echo unreachable", outside))
	if res, out := run(t, r, spec); res.ExitCode != 0 || !strings.Contains(out, "unreachable") {
		t.Errorf("NetworkNone reached the outside: %+v %q", res, out)
	}
	spec = runDir(t, testBase(t), "sh", "-c", fmt.Sprintf("curl -sS --max-time 5 http://127.0.0.1:%d/", port))
	spec.Network = NetworkShared
	if res, out := run(t, r, spec); res.ExitCode != 0 || afterSetupRetries(out) != "node-agent loopback" || accepted.Load() != 1 {
		t.Errorf("NetworkShared control did not reach the loopback listener: %+v %q", res, out)
	}
}

// processesNamed counts host processes whose command name is name.
func processesNamed(name string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err == nil && strings.TrimSpace(string(b)) == name {
			n++
		}
	}
	return n
}

// slirp4netns is attached to the runner's namespace before bwrap starts
// in it: the command starts with tap0 up and the default route through the
// stack's gateway, in every run, and nothing in it can take either down or
// remove the metadata service's blackhole routes (the namespace is the
// runner's user namespace's, where the sandbox has no capability).
func TestBwrapUserModeNetworkIsUpBeforeTheCommandAndNotItsToChange(t *testing.T) {
	r := requireBwrapHost(t)
	script := `grep -o -e 'lo:' -e 'tap0:' /proc/net/dev
awk '$2 == "00000000" && $3 == "0202000A" { print "default via 10.0.2.2" }' /proc/net/route
if command -v ip >/dev/null; then
  ip link set tap0 down 2>/dev/null && echo "TAP DOWN"
  ip route del default 2>/dev/null && echo "DEFAULT ROUTE REMOVED"
  ip route del 169.254.0.0/16 2>/dev/null && echo "BLACKHOLE REMOVED"
fi
awk '$2 == "00000000" && $3 == "0202000A" { print "default via 10.0.2.2" }' /proc/net/route`
	for i := range 3 {
		spec := runDir(t, testBase(t), "sh", "-c", script)
		spec.Network = NetworkUserMode
		res, out := run(t, r, spec)
		if res.ExitCode != 0 || afterSetupRetries(out) != "lo:\ntap0:\ndefault via 10.0.2.2\ndefault via 10.0.2.2\n" {
			t.Fatalf("run %d: %+v\n%s", i, res, out)
		}
	}
}

// slirp4netns holds a host socket for every connection the agent opens,
// with the data the far end sent that the agent has not read yet: an agent
// that opens many connections to a server that streams and reads none
// made the node hold far more than its memory limit, outside its cgroup
// (200 connections: about 217 MiB of receive queues, and slirp4netns's own
// buffers, under a limit of 32 MiB). In the run's cgroup they count in its
// memory: the queues of slirp4netns's sockets stay near the limit, and
// the run is killed at its memory limit once they and its memory pass it
// (on cgroup v1 the runner watches them, v1Cgroup.watchSockets).
func TestBwrapUserModeNetworkBuffersAreTheRuns(t *testing.T) {
	r := requireBwrapHost(t)
	nethost.Outside(t) // a non-loopback address here, the veth's, at least
	host := nonLoopbackIPv4(t)
	ln, err := net.Listen("tcp4", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				// Small send buffers: what piles up is on slirp4netns's
				// side, where a real server's far end would leave it.
				_ = c.(*net.TCPConn).SetWriteBuffer(64 << 10)
				for {
					select {
					case <-stop:
						return
					default:
					}
					_ = c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
					if _, err := c.Write(chunk); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
						return
					}
				}
			}()
		}
	}()
	defer func() { ln.Close(); close(stop); conns.Wait() }()

	const limit = 32 << 20
	script := fmt.Sprintf(`use IO::Socket::INET; my @k;
for (1..200) { my $s = IO::Socket::INET->new(PeerAddr => "%s", Timeout => 5) or last; push @k, $s }
print "open ", scalar(@k), "\n"; sleep 8;`, ln.Addr())
	spec := runDir(t, testBase(t), "perl", "-e", script)
	spec.Network = NetworkUserMode
	spec.Limits = Limits{MemoryBytes: limit, Timeout: 60 * time.Second}
	var held atomic.Int64
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		for i := 0; i < 24; i++ {
			time.Sleep(500 * time.Millisecond)
			if q := recvQueuedFrom(t, ln.Addr().(*net.TCPAddr)); q > held.Load() {
				held.Store(q)
			}
		}
	}()
	res, out := run(t, r, spec)
	<-watching
	t.Logf("run: exit %d, OOM %v, peak %d MiB; %s; slirp4netns's sockets held up to %d MiB", res.ExitCode, res.OOMKilled, res.PeakMemory>>20, strings.TrimSpace(out), held.Load()>>20)
	if !strings.Contains(out, "open ") && !res.OOMKilled {
		t.Fatalf("the connections were not opened, and the run was not killed at its memory limit: %+v %q", res, out)
	}
	if held.Load() > 2*limit {
		t.Errorf("slirp4netns held %d MiB for a run limited to %d MiB", held.Load()>>20, limit>>20)
	}
	if left := processesNamed("slirp4netns"); left != 0 {
		t.Errorf("%d slirp4netns processes left after the run", left)
	}
}

// nonLoopbackIPv4 is an address of this network namespace that
// slirp4netns may connect to (--disable-host-loopback refuses 127.0.0.1).
func nonLoopbackIPv4(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Fatal("no non-loopback IPv4 address here")
	return ""
}

// recvQueuedFrom sums the receive queues of this namespace's TCP sockets
// whose far end is peer (/proc/net/tcp: addresses in hex, the IPv4 one in
// the kernel's byte order; rx_queue after the colon of the fifth field).
func recvQueuedFrom(t *testing.T, peer *net.TCPAddr) int64 {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Error(err)
		return 0
	}
	ip := peer.IP.To4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], peer.Port)
	var sum int64
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 5 || f[2] != want {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseInt(rx, 16, 64)
		if err == nil {
			sum += n
		}
	}
	return sum
}

// A user-mode network run (egress Unrestricted) never reaches the
// link-local range, where clouds' instance metadata services hand out the
// node's credentials: slirp4netns connects from the node-agent's network
// namespace and filters nothing. A host at a link-local address that the
// caller's network reaches (the control, with the caller's network) is
// refused at once from the sandbox, and the outside still answers.
func TestBwrapUserModeNetworkNeverReachesLinkLocal(t *testing.T) {
	r := requireBwrapHost(t)
	metadata, outside := nethost.LinkLocal(t), nethost.Outside(t)
	script := fmt.Sprintf(`
if curl -sS --max-time 10 http://%s/; then echo " REACHED"; else echo refused; fi
curl -sS --max-time 10 http://%s/`, metadata, outside)
	spec := runDir(t, testBase(t), "sh", "-c", script)
	spec.Network = NetworkUserMode
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || strings.Contains(out, "REACHED") || !strings.Contains(out, "refused") ||
		!strings.Contains(out, "hello from the outside") {
		t.Fatalf("user-mode network and the link-local host %s: %+v\n%s", metadata, res, out)
	}
	spec = runDir(t, testBase(t), "sh", "-c", fmt.Sprintf("curl -sS --max-time 10 http://%s/", metadata))
	spec.Network = NetworkShared
	if res, out := run(t, r, spec); res.ExitCode != 0 || afterSetupRetries(out) != "hello from the outside" {
		t.Fatalf("the control with the caller's network did not reach %s: %+v %q", metadata, res, out)
	}
}

// TestBwrapUserModeNetworkKeepsOutTheCallersServices: a user-mode
// sandbox's connections leave from the caller's address, so a service of
// the caller's that bounds clients by address (the node-agent's run
// source) counted them as the caller's: an agent that held its share shut
// its node-agent out of every other run's Secrets. Spec.Unreachable keeps
// such an address out of the sandbox's reach; the same host is reached
// without it.
func TestBwrapUserModeNetworkKeepsOutTheCallersServices(t *testing.T) {
	r := requireBwrapHost(t)
	service := nethost.Outside(t)
	host, _, err := net.SplitHostPort(service)
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`if curl -sS --max-time 10 http://%s/; then echo " REACHED"; else echo refused; fi`, service)
	spec := runDir(t, testBase(t), "sh", "-c", script)
	spec.Network = NetworkUserMode
	if res, out := run(t, r, spec); res.ExitCode != 0 || !strings.Contains(out, "REACHED") {
		t.Fatalf("the control without Unreachable did not reach %s: %+v\n%s", service, res, out)
	}
	spec = runDir(t, testBase(t), "sh", "-c", script)
	spec.Network = NetworkUserMode
	spec.Unreachable = []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr(host), 32)}
	if res, out := run(t, r, spec); res.ExitCode != 0 || strings.Contains(out, "REACHED") || !strings.Contains(out, "refused") {
		t.Fatalf("user-mode network and the caller's service %s: %+v\n%s", service, res, out)
	}
}
