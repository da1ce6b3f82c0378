// Package bounded bounds a channel an untrusted agent can open to the
// node-agent (the MCP sockets, the provider relay, the egress proxy), or a
// network client to a daemon's server (the live output, metrics, probes,
// the run source): how many connections it serves at once (and from one
// address), how many bytes cross it in all, and how long a connection may
// sit idle. The node-agent's memory is shared by
// every run on the node and lies outside each run's cgroup, so nothing an
// agent sends may make it grow without bound; connections beyond the bound
// wait in the kernel's listen backlog, not in the node-agent's memory.
package bounded

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound one channel. A zero field means no bound of that kind.
type Limits struct {
	// MaxConns bounds the connections served at once; Accept waits for one
	// to close before it takes the next. (golang.org/x/net/netutil's
	// LimitListener does the same but its connections hide CloseWrite,
	// which a relay needs to pass on an end of stream.)
	MaxConns int
	// MaxBytes bounds the bytes read and written over all the channel's
	// connections together. Once it is spent every connection is closed
	// and new ones are closed as soon as they are accepted.
	MaxBytes int64
	// Idle closes a connection on which nothing was read or written for
	// this long.
	Idle time.Duration
	// Node, when set, is a bound shared with other channels (every run's
	// egress proxy on the node): a connection takes one of its tokens too,
	// after one of MaxConns, and waits in the backlog while none is free.
	Node chan struct{}
	// PerAddr bounds the connections open at once from one remote IP
	// address (a network listener's): one more is closed as soon as it is
	// accepted, so that one client holding MaxConns does not shut every
	// other out.
	PerAddr int
}

// ErrBudget is returned by a connection's Read or Write once the channel's
// MaxBytes is spent.
var ErrBudget = errors.New("bounded: the channel's byte budget is spent")

// Listener is a net.Listener whose connections obey Limits.
type Listener struct {
	inner net.Listener
	lim   Limits
	sem   chan struct{} // one token per open connection; nil: no bound

	used      atomic.Int64
	accepted  atomic.Int64
	exhausted atomic.Bool

	mu     sync.Mutex
	conns  map[*conn]struct{}
	byAddr map[string]int // open connections per remote IP, with PerAddr
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

// Stats are what a Listener counted.
type Stats struct {
	// Conns counts the accepted connections.
	Conns int64
	// Bytes counts the bytes read and written.
	Bytes int64
	// Exhausted is true once MaxBytes was spent.
	Exhausted bool
}

// NewListener wraps l. Close the returned Listener (not l) to end it and
// every connection it accepted.
func NewListener(l net.Listener, lim Limits) *Listener {
	bl := &Listener{inner: l, lim: lim, conns: map[*conn]struct{}{}, byAddr: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	if lim.MaxConns > 0 {
		bl.sem = make(chan struct{}, lim.MaxConns)
	}
	if lim.Idle > 0 {
		go bl.reapIdle()
	} else {
		close(bl.done)
	}
	return bl
}

// Accept returns the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if l.sem != nil {
			select {
			case l.sem <- struct{}{}:
			case <-l.stop:
				return nil, net.ErrClosed
			}
		}
		if l.lim.Node != nil {
			select {
			case l.lim.Node <- struct{}{}:
			case <-l.stop:
				if l.sem != nil {
					<-l.sem
				}
				return nil, net.ErrClosed
			}
		}
		c, err := l.inner.Accept()
		if err != nil {
			l.release()
			return nil, err
		}
		l.accepted.Add(1)
		if l.exhausted.Load() {
			_ = c.Close()
			l.release()
			continue
		}
		bc := &conn{Conn: c, l: l}
		if l.lim.PerAddr > 0 {
			bc.addr = remoteIP(c)
		}
		bc.touch()
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = c.Close()
			l.release()
			return nil, net.ErrClosed
		}
		if bc.addr != "" && l.byAddr[bc.addr] >= l.lim.PerAddr {
			l.mu.Unlock()
			_ = c.Close()
			l.release()
			continue
		}
		if bc.addr != "" {
			l.byAddr[bc.addr]++
		}
		l.conns[bc] = struct{}{}
		l.mu.Unlock()
		return bc, nil
	}
}

// Addr is the listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Close stops accepting and closes every open connection.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.stop)
	conns := l.conns
	l.conns = map[*conn]struct{}{}
	l.mu.Unlock()
	err := l.inner.Close()
	for c := range conns {
		_ = c.Close()
	}
	<-l.done
	return err
}

// Stats returns what the listener counted so far.
func (l *Listener) Stats() Stats {
	return Stats{Conns: l.accepted.Load(), Bytes: l.used.Load(), Exhausted: l.exhausted.Load()}
}

// spend counts n bytes and reports whether the budget still holds.
func (l *Listener) spend(n int) bool {
	used := l.used.Add(int64(n))
	if l.lim.MaxBytes <= 0 || used <= l.lim.MaxBytes {
		return true
	}
	if !l.exhausted.Swap(true) {
		// Close them all at once: a budget spent on one connection is
		// spent for the channel.
		l.mu.Lock()
		conns := l.conns
		l.conns = map[*conn]struct{}{}
		l.mu.Unlock()
		for c := range conns {
			_ = c.Close()
		}
	}
	return false
}

func (l *Listener) release() {
	if l.lim.Node != nil {
		<-l.lim.Node
	}
	if l.sem != nil {
		<-l.sem
	}
}

func (l *Listener) forget(c *conn) {
	l.mu.Lock()
	delete(l.conns, c)
	if c.addr != "" {
		if l.byAddr[c.addr]--; l.byAddr[c.addr] <= 0 {
			delete(l.byAddr, c.addr)
		}
	}
	l.mu.Unlock()
	l.release()
}

// remoteIP is the IP address a network connection comes from ("" for one
// without: a Unix socket's).
func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ""
}

// reapIdle closes the connections idle for longer than Limits.Idle. One
// ticker per listener, not a deadline per read: a relayed connection is
// idle only when neither direction moves (a model's answer may stream for
// minutes after its request was sent).
func (l *Listener) reapIdle() {
	defer close(l.done)
	t := time.NewTicker(max(l.lim.Idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case now := <-t.C:
			var idle []*conn
			l.mu.Lock()
			for c := range l.conns {
				if now.Sub(time.Unix(0, c.last.Load())) > l.lim.Idle {
					idle = append(idle, c)
				}
			}
			l.mu.Unlock()
			for _, c := range idle {
				_ = c.Close()
			}
		}
	}
}

type conn struct {
	net.Conn
	l    *Listener
	addr string       // the remote IP counted against PerAddr, or ""
	last atomic.Int64 // unix nanoseconds of the last read or write
	once sync.Once
}

func (c *conn) touch() { c.last.Store(time.Now().UnixNano()) }

func (c *conn) Read(p []byte) (int, error) {
	if c.l.exhausted.Load() {
		return 0, ErrBudget
	}
	n, err := c.Conn.Read(p)
	c.touch()
	if !c.l.spend(n) {
		return n, ErrBudget
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	if c.l.exhausted.Load() {
		return 0, ErrBudget
	}
	n, err := c.Conn.Write(p)
	c.touch()
	if !c.l.spend(n) {
		return n, ErrBudget
	}
	return n, err
}

func (c *conn) Close() error {
	var err error
	c.once.Do(func() {
		c.l.forget(c)
		err = c.Conn.Close()
	})
	return err
}

// CloseWrite half-closes a connection that supports it (a relay passes on
// its client's end of stream).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
