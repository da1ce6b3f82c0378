package bounded

import (
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func listen(t *testing.T, lim Limits) *Listener {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, lim)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func dial(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// acceptAll accepts l's connections until it is closed, handing each on.
func acceptAll(l net.Listener) chan net.Conn {
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return accepted
}

func TestAtMostMaxConnsAreServedAtOnce(t *testing.T) {
	l := listen(t, Limits{MaxConns: 2})
	accepted := acceptAll(l)
	for range 5 {
		dial(t, l)
	}
	first := []net.Conn{<-accepted, <-accepted}
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted while two were open")
	case <-time.After(200 * time.Millisecond):
	}
	_ = first[0].Close()
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("closing a connection did not let the next one in")
	}
	_ = first[1].Close()
	<-accepted // drain what the closes let in, so Close finds them
}

// TestNodeBoundsChannelsTogether: two channels of two connections each,
// sharing a node bound of three, serve three at once; the fourth waits
// until one of either closes, and a closed channel gives its tokens back.
func TestNodeBoundsChannelsTogether(t *testing.T) {
	node := make(chan struct{}, 3)
	accepted := make(chan net.Conn, 10)
	var ls []*Listener
	for range 2 {
		l := listen(t, Limits{MaxConns: 2, Node: node})
		ls = append(ls, l)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		dial(t, l)
		dial(t, l)
	}
	var open []net.Conn
	for range 3 {
		select {
		case c := <-accepted:
			open = append(open, c)
		case <-time.After(5 * time.Second):
			t.Fatal("three connections were not accepted")
		}
	}
	select {
	case <-accepted:
		t.Fatal("a fourth connection was accepted with the node's three taken")
	case <-time.After(200 * time.Millisecond):
	}
	_ = open[0].Close()
	select {
	case c := <-accepted:
		open[0] = c
	case <-time.After(5 * time.Second):
		t.Fatal("closing a connection did not let the fourth in")
	}
	for _, c := range open {
		_ = c.Close()
	}
	for _, l := range ls {
		_ = l.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(node) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d node tokens still taken once every channel closed", len(node))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTheByteBudgetClosesTheChannel(t *testing.T) {
	l := listen(t, Limits{MaxBytes: 1 << 20})
	got := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err
			return
		}
		_, err = io.Copy(io.Discard, c)
		got <- err
	}()
	c := dial(t, l)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	if err := <-got; !errors.Is(err, ErrBudget) {
		t.Fatalf("reading past the budget: %v, want ErrBudget", err)
	}
	st := l.Stats()
	if !st.Exhausted || st.Bytes > 1<<20+64<<10 {
		t.Fatalf("stats %+v: want exhausted, at most one read over the budget", st)
	}
	// A new connection is closed at once.
	next := make(chan struct{})
	go func() {
		defer close(next)
		c, err := l.Accept()
		if err == nil {
			_ = c.Close()
			t.Error("a connection was accepted after the budget was spent")
		}
	}()
	c2 := dial(t, l)
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("a connection after the budget: read %v, want EOF (closed by the node-agent)", err)
	}
	_ = l.Close()
	<-next
}

func TestIdleConnectionsAreClosed(t *testing.T) {
	l := listen(t, Limits{Idle: 100 * time.Millisecond})
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	c := dial(t, l)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle connection: read %v, want EOF", err)
	}
}

// PerAddr: a network listener serves at most that many connections from
// one remote address at once; one more is closed as it comes (its reader
// sees the end at once), and another address is still served. When one
// of the first closes, the address may connect again.
func TestPerAddrBoundsOneClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, Limits{MaxConns: 10, PerAddr: 2})
	t.Cleanup(func() { _ = l.Close() })
	accepted := acceptAll(l)
	dialFrom := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	closedAtOnce := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	next := func(what string) net.Conn {
		select {
		case c := <-accepted:
			t.Cleanup(func() { _ = c.Close() })
			return c
		case <-time.After(5 * time.Second):
			t.Fatalf("%s was not served", what)
			return nil
		}
	}
	dialFrom("127.0.0.1")
	first := next("the first connection")
	dialFrom("127.0.0.1")
	next("the second connection")
	if third := dialFrom("127.0.0.1"); !closedAtOnce(third) {
		t.Error("a third connection from one address was not closed")
	}
	dialFrom("127.0.0.2")
	next("another address")
	_ = first.Close()
	if again := dialFrom("127.0.0.1"); closedAtOnce(again) {
		t.Error("the address was refused after one of its connections closed")
	}
	next("the address again")
}
