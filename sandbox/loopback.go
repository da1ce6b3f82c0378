package sandbox

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// Loopback is a TCP address on the command's loopback that the caller
// serves: the run's MCP server, egress proxy and model gateway, each a
// unix socket outside that the caller relays to. The runner listens on
// Addr in the command's own network namespace (the caller's, where the
// network is shared) before the command starts, so the command finds it
// at once, and hands the listener to Serve, which runs until the listener
// is closed; Run closes it when the command has ended and waits for
// Serve to return.
//
// The listener is the runner's, never a process of the sandbox: nothing
// starts in the sandbox before the command, and nothing the command can
// signal or trace holds it. The AppContainer runner has no loopback of
// the command's to listen on from outside, and refuses a Spec with any.
type Loopback struct {
	// Addr is 127.0.0.1:PORT (an IPv4 loopback address and a port).
	Addr string
	// Serve serves l until it is closed.
	Serve func(l net.Listener)
}

func (l Loopback) check() (netip.AddrPort, error) {
	a, err := netip.ParseAddrPort(l.Addr)
	if err != nil {
		return a, fmt.Errorf("sandbox: loopback listener %q: %w", l.Addr, err)
	}
	if !a.Addr().Is4() || !a.Addr().IsLoopback() || a.Port() == 0 {
		return a, fmt.Errorf("sandbox: loopback listener %q: want an IPv4 loopback address and a port", l.Addr)
	}
	if l.Serve == nil {
		return a, fmt.Errorf("sandbox: loopback listener %q: nothing serves it", l.Addr)
	}
	return a, nil
}

// serving is what serve started: stop closes the listeners and waits for
// their Serve to return.
type serving struct {
	ls []net.Listener
	wg sync.WaitGroup
}

// serve starts each Serve on its listener (ls[i] is lb[i]'s).
func serve(lb []Loopback, ls []net.Listener) *serving {
	s := &serving{ls: ls}
	for i, l := range ls {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			lb[i].Serve(l)
		}()
	}
	return s
}

func (s *serving) stop() {
	if s == nil {
		return
	}
	for _, l := range s.ls {
		_ = l.Close()
	}
	s.wg.Wait()
}

// listenShared listens on lb's addresses in the caller's own network
// namespace (a shared network, the plain runner).
func listenShared(lb []Loopback) ([]net.Listener, error) {
	var ls []net.Listener
	for _, l := range lb {
		ln, err := net.Listen("tcp4", l.Addr)
		if err != nil {
			closeAll(ls)
			return nil, fmt.Errorf("sandbox: listening on %s: %w", l.Addr, err)
		}
		ls = append(ls, ln)
	}
	return ls, nil
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		_ = l.Close()
	}
}

// ServesLoopback says whether r listens on a Spec's Loopback itself: the
// plain runner, and the bwrap runner of a caller that may make and enter
// network namespaces (root). Where it does not (AppContainer; bwrap as
// another user), the caller bridges the loopback inside the sandbox.
func ServesLoopback(r Runner) bool {
	s, ok := r.(interface{ servesLoopback() bool })
	return ok && s.servesLoopback()
}

func (*PlainRunner) servesLoopback() bool { return true }
