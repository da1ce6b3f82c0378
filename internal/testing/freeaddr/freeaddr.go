// Package freeaddr picks loopback addresses for the servers a test starts
// in other processes.
package freeaddr

import (
	"net"
	"testing"
)

// Loopback returns n distinct 127.0.0.1 addresses with a port free now.
// Each listener stays open until all n are picked: a port whose listener
// was closed may be handed out again at once, and two processes given one
// port cannot both listen on it (the controller took a port the
// node-agent was then refused).
func Loopback(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}
