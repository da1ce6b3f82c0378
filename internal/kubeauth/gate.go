package kubeauth

import (
	"net"
	"sync"
)

// Gate bounds the reviews a server asks the API server for at once, in all
// and for one remote address. A server that reviews every caller's token
// before it knows anything else of the caller asks one TokenReview per
// request: a client sending made-up tokens had the run source and a
// node-agent's metrics ask thousands a second, charged to their service
// accounts' share of the API server (the same as their reconciles and
// heartbeats). A request past a bound is answered at once (503), unasked.
type Gate struct {
	// Max is the reviews in flight at once; PerAddr those of one address.
	Max, PerAddr int

	mu     sync.Mutex
	all    int
	byAddr map[string]int
}

// Enter takes a place for a review of a request from remoteAddr (as
// http.Request.RemoteAddr has it) and returns what gives it back, or false
// when no place is free. A nil Gate is never full.
func (g *Gate) Enter(remoteAddr string) (release func(), ok bool) {
	if g == nil {
		return func() {}, true
	}
	addr, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		addr = remoteAddr
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byAddr == nil {
		g.byAddr = map[string]int{}
	}
	if (g.Max > 0 && g.all >= g.Max) || (g.PerAddr > 0 && g.byAddr[addr] >= g.PerAddr) {
		return nil, false
	}
	g.all++
	g.byAddr[addr]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.all--
			if g.byAddr[addr]--; g.byAddr[addr] <= 0 {
				delete(g.byAddr, addr)
			}
		})
	}, true
}

// MetricsGate is the bound of a metrics endpoint's reviews: a scraper's
// token is reviewed once and then answered from the cache, so a few at
// once are plenty.
func MetricsGate() *Gate { return &Gate{Max: 8, PerAddr: 4} }
