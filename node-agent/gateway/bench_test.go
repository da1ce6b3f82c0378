package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

// benchBody is a small streamed Anthropic reply, usage included, as a
// provider stand-in sends it.
const benchBody = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":1037,\"cache_read_input_tokens\":311,\"output_tokens\":1}}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":53}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

// BenchmarkGatewayAddedLatency: one small streamed model request, on an
// open connection, directly to a provider stand-in over TLS on loopback,
// and through the gateway's whole path without bwrap (a loopback TCP
// listener relayed to the gateway's unix socket, as sandbox-init does in
// the sandbox; the gateway; its TLS connection to the same stand-in). Both
// run in the same process, so the ratio and the difference of the p50s are
// the gateway's cost; the goal is under 1 ms at p50.
//
//	go test -run - -bench GatewayAddedLatency ./node-agent/gateway/
func BenchmarkGatewayAddedLatency(b *testing.B) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, benchBody)
	}))
	defer up.Close()
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())

	g, err := New(Options{Upstream: up.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: pool})
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(b.TempDir(), "gateway.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := Serve(g, ln)
	relayLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		sandboxinit.Relay(relayLn, func() (net.Conn, error) { return net.Dial("unix", sock) })
	}()
	// The relay waits for its connections: the clients' idle ones are
	// closed first.
	var clients []*http.Client
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
		srv.Close()
		_ = relayLn.Close()
		<-relayed
	}()

	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 4}}
	viaGateway := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	clients = append(clients, direct, viaGateway)
	body := `{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
	do := func(c *http.Client, base string) time.Duration {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", "placeholder")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n != int64(len(benchBody)) {
			b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
		}
		return time.Since(start)
	}
	gwURL := "http://" + relayLn.Addr().String()
	// Warm both: connections open, TLS session made.
	do(direct, up.URL)
	do(viaGateway, gwURL)

	var d, gw []time.Duration
	b.ResetTimer()
	for range b.N {
		d = append(d, do(direct, up.URL))
		gw = append(gw, do(viaGateway, gwURL))
	}
	b.StopTimer()
	p50 := func(s []time.Duration) time.Duration { slices.Sort(s); return s[len(s)/2] }
	pd, pg := p50(d), p50(gw)
	b.ReportMetric(float64(pd.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(pg.Microseconds()), "gateway-p50-µs")
	b.ReportMetric(float64(pg-pd)/float64(time.Microsecond), "added-p50-µs")
	b.ReportMetric(float64(pg)/float64(pd), "ratio")
	if c := g.Tally().Counts(); c.Input != 1037*int64(b.N+1) || c.Output != 53*int64(b.N+1) {
		b.Errorf("the gateway counted %+v over %d requests", c, b.N+1)
	}
}
