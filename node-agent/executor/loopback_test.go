package executor

import (
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

// TestLoopbackRelayHoldsAtMostItsChannelsConnections: the relay into a
// sandbox's loopback is the node-agent's (its memory is every run's), so
// an agent that opens hundreds of connections to it gets at most its
// channel's connections carried at once; the others wait in the listen
// backlog, in the kernel, and are carried as the first ones close.
func TestLoopbackRelayHoldsAtMostItsChannelsConnections(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mcp-http.sock")
	behind, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer behind.Close()
	var open, most atomic.Int32
	release := make(chan struct{})
	var served sync.WaitGroup
	go func() {
		for {
			c, err := behind.Accept()
			if err != nil {
				return
			}
			n := open.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			served.Add(1)
			go func() {
				defer served.Done()
				<-release
				fmt.Fprint(c, "served")
				open.Add(-1)
				c.Close()
			}()
		}
	}()

	lb := loopback([]sandboxinit.Forward{{Listen: fmt.Sprintf("127.0.0.1:%d", SandboxMCPPort), Socket: sock}}, nil)
	if len(lb) != 1 {
		t.Fatalf("%d listeners", len(lb))
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0") // stands for the sandbox's 127.0.0.1:7700
	if err != nil {
		t.Fatal(err)
	}
	relayed := make(chan struct{})
	go func() { defer close(relayed); lb[0].Serve(ln) }()

	const clients = 200
	conns := make([]net.Conn, clients)
	for i := range conns {
		if conns[i], err = net.Dial("tcp4", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
	}
	bound := int32(httpMCPChannel.MaxConns)
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() < bound && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // time for a relay past the bound to show
	if got := most.Load(); got != bound {
		t.Fatalf("the relay carried %d connections at once, want its channel's %d", got, bound)
	}
	close(release) // every connection is served in turn
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, 16)
		n, _ := c.Read(b)
		if string(b[:n]) != "served" {
			t.Fatalf("client %d got %q", i, b[:n])
		}
		c.Close()
	}
	if got := most.Load(); got > bound {
		t.Errorf("the relay carried %d connections at once, want at most %d", got, bound)
	}
	ln.Close()
	<-relayed
	behind.Close()
	served.Wait()
}
