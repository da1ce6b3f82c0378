//go:build linux

// Package nethost gives tests "the outside" these machines allow: a host in
// a network namespace of its own (ip netns and a veth pair, from iproute2).
// It needs root.
package nethost

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Outside is "the outside" of these machines: an HTTP server in a network
// namespace of its own, joined to this one by a veth pair on a random /30.
// It returns the server's address.
func Outside(t testing.TB) string { t.Helper(); return outsideIn(t, "10.209") }

// LinkLocal is Outside on a random /30 of 169.254.0.0/16, where clouds'
// instance metadata services answer.
func LinkLocal(t testing.TB) string { t.Helper(); return outsideIn(t, "169.254") }

// outsideIn is Outside in prefix (two octets).
func outsideIn(t testing.TB, prefix string) string {
	t.Helper()
	var r [3]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	if r[1] == 169 || r[1] == 170 {
		// Never 169.254.169.254 (a cloud's metadata service, which a
		// route to the veth would hide from this machine) nor AWS's
		// 169.254.170.2.
		r[1] = 171
	}
	id := fmt.Sprintf("%02x%02x%02x", r[0], r[1], r[2])
	ns, hostIf, peerIf := "hf-outside-"+id, "hfv"+id, "hfp"+id
	subnet := fmt.Sprintf("%s.%d.%d", prefix, r[1], r[2]&0xfc)
	base := strings.TrimSuffix(subnet, fmt.Sprint(r[2]&0xfc))
	hostIP, peerIP := fmt.Sprintf("%s%d", base, r[2]&0xfc+1), fmt.Sprintf("%s%d", base, r[2]&0xfc+2)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("link", "add", hostIf, "type", "veth", "peer", "name", peerIf, "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	ip("addr", "add", hostIP+"/30", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "addr", "add", peerIP+"/30", "dev", peerIf)
	ip("-n", ns, "link", "set", peerIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")

	// The listening socket is made inside the namespace and stays there.
	ln := func() net.Listener {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Fatal(err)
		}
		ln, lerr := net.Listen("tcp", peerIP+":0")
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			panic(err) // this thread must not go back to the pool in the wrong namespace
		}
		if lerr != nil {
			t.Fatal(lerr)
		}
		return ln
	}()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "hello from the outside")
	})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); wg.Wait() })
	return ln.Addr().String()
}
