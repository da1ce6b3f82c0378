package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

// benchPath is the agent's way to a "provider" (a local server) with egress
// ProviderOnly, without bwrap: a TCP listener on loopback relaying to the
// proxy's unix socket (what sandbox-init does inside the sandbox), the proxy,
// and its connection to the server. Direct is a plain loopback connection to
// the same server, for comparison in the same run.
type benchPath struct {
	server string // "host:port" of the provider stand-in
	bulk   string // "host:port" of a server that streams bytes forever
	relay  string // the sandbox side: 127.0.0.1:PORT relayed to the socket
}

func newBenchPath(b *testing.B) *benchPath {
	b.Helper()
	srvLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(srvLn) }()
	b.Cleanup(func() { _ = srv.Close() })

	bulkLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bulkLn.Close() })
	go func() {
		chunk := make([]byte, 256<<10)
		for {
			c, err := bulkLn.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()

	allow, err := NewAllowList(srvLn.Addr().String(), bulkLn.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	p := New(Options{Allow: allow})
	sock := filepath.Join(b.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = p.Serve(ln) }()
	relayLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		sandboxinit.Relay(relayLn, func() (net.Conn, error) { return net.Dial("unix", sock) })
	}()
	b.Cleanup(func() {
		_ = relayLn.Close()
		_ = p.Close()
		<-served
		<-relayed
	})
	return &benchPath{server: srvLn.Addr().String(), bulk: bulkLn.Addr().String(), relay: relayLn.Addr().String()}
}

// open connects to target, directly or through a CONNECT tunnel.
func (bp *benchPath) open(target string, proxied bool) (net.Conn, *bufio.Reader, error) {
	if !proxied {
		c, err := net.Dial("tcp", target)
		if err != nil {
			return nil, nil, err
		}
		return c, bufio.NewReader(c), nil
	}
	c, err := net.Dial("tcp", bp.relay)
	if err != nil {
		return nil, nil, err
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("CONNECT: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		_ = c.Close()
		return nil, nil, fmt.Errorf("CONNECT: %s", res.Status)
	}
	return c, br, nil
}

func get(c net.Conn, br *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: provider\r\n\r\n"); err != nil {
		return err
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return err
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	if len(d) == 0 {
		return
	}
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkRequest is one small HTTP request and its response: on a new
// connection each time (for the proxy: relay, CONNECT, dial), and on a
// connection kept open (for the proxy: an open tunnel, the usual case of a
// CLI streaming from its provider).
func BenchmarkRequest(b *testing.B) {
	for _, proxied := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "proxy"}[proxied]
		b.Run("new-connection/"+name, func(b *testing.B) {
			bp := newBenchPath(b)
			d := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				c, br, err := bp.open(bp.server, proxied)
				if err != nil {
					b.Fatal(err)
				}
				if err := get(c, br); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
				_ = c.Close()
			}
			b.StopTimer()
			reportPercentiles(b, d)
		})
		b.Run("kept-connection/"+name, func(b *testing.B) {
			bp := newBenchPath(b)
			c, br, err := bp.open(bp.server, proxied)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			d := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if err := get(c, br); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
			}
			b.StopTimer()
			reportPercentiles(b, d)
		})
	}
}

// BenchmarkThroughput reads 1 MiB per op from a server that streams bytes,
// directly or through the tunnel.
func BenchmarkThroughput(b *testing.B) {
	for _, proxied := range []bool{false, true} {
		b.Run(map[bool]string{false: "direct", true: "proxy"}[proxied], func(b *testing.B) {
			bp := newBenchPath(b)
			c, br, err := bp.open(bp.bulk, proxied)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			b.SetBytes(1 << 20)
			b.ResetTimer()
			for range b.N {
				if _, err := io.CopyN(io.Discard, br, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
