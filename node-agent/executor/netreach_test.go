package executor

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
)

// silentProvider accepts connections on loopback and never reads, answers
// or closes them: a model server thinking for as long as it likes, or one
// that hangs. release closes what it holds.
type silentProvider struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	got   chan struct{}
}

func newSilentProvider(t *testing.T) *silentProvider {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProvider{ln: ln, got: make(chan struct{}, 64)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			p.got <- struct{}{}
		}
	}()
	t.Cleanup(p.release)
	return p
}

func (p *silentProvider) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *silentProvider) release() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestProviderBridgeStopsWhileTheProviderIsSilent: the agent's connection
// through the bridge is gone (its sandbox ended), the provider still holds
// its own end open without a word. Stopping the bridge ends both: before,
// stop waited for the provider to answer or close, however long.
func TestProviderBridgeStopsWhileTheProviderIsSilent(t *testing.T) {
	p := newSilentProvider(t)
	sock := filepath.Join(t.TempDir(), "provider.sock")
	b, err := startProviderBridge(sock, fmt.Sprintf("http://127.0.0.1:%d/v1", p.port()), &egress.Inside{}, socketOwner{uid: os.Getuid(), gid: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the bridge never reached the provider")
	}
	_ = c.Close()
	stopped := make(chan struct{})
	go func() { b.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		p.release()
		<-stopped
		t.Fatal("the bridge's stop waited on a silent provider")
	}
}

// TestRunEndsWhileItsLoopbackProviderIsSilent: a run whose providerURL is a
// model server on the node's loopback that holds the agent's connection and
// never answers. The agent gives up (curl -m 1) and exits; the run ends
// then, with its verdict. Before, the run's cleanup waited on the
// provider's connection for good, and the run never reached a terminal
// phase. Real bwrap.
func TestRunEndsWhileItsLoopbackProviderIsSilent(t *testing.T) {
	root := rootRunRoot(t, "hf-silent-")
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the agent uses curl")
	}
	p := newSilentProvider(t)
	e, err := New(Options{Sources: inlineSources{}, RunRoot: root, InitBinary: sandboxInitBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	url := fmt.Sprintf("http://127.0.0.1:%d", p.port())
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "silent", Namespace: "tenant", UID: types.UID("uid-silent")},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, ProviderURL: url,
				Command: []string{"sh", "-c", "curl -s -m 1 -X POST -d '{}' " + url + "/v1/messages; echo curl=$?"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: nothing\nmcp:\n  transport: None\n"}}},
			Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly},
		},
		Status: harnessv1.HarnessRunStatus{Attempt: 1},
	}
	done := make(chan *harnessv1.HarnessRunStatus, 1)
	go func() { done <- &e.Execute(context.Background(), run).Status }()
	var st *harnessv1.HarnessRunStatus
	select {
	case st = <-done:
	case <-time.After(60 * time.Second):
		p.release()
		st = <-done
		t.Fatalf("the run did not end while its provider held the agent's connection (it ended only when the provider let go: %s %s)", st.Phase, st.Reason)
	}
	if st.Phase != harnessv1.RunSucceeded {
		t.Fatalf("phase %s %s: %s", st.Phase, st.Reason, st.Message)
	}
	select {
	case <-p.got:
	default:
		t.Fatalf("the agent's request never reached the provider: %s", st.Agent.OutputTail)
	}
}

// sandboxInitBinary builds harnessfacts-sandbox-init (static, as in the
// node image) into a folder the run's uid can traverse.
func sandboxInitBinary(t *testing.T) string {
	t.Helper()
	bin, err := os.MkdirTemp("", "hf-init-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	initBin := filepath.Join(bin, "harnessfacts-sandbox-init")
	build := exec.Command("go", "build", "-o", initBin, "github.com/harnessfacts/harnessfacts/cmd/harnessfacts-sandbox-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return initBin
}

// TestEgressRefusesTheNodesOwnAddress: a run author lists the node's own
// address in allowHosts, where a server of the node listens on all its
// addresses (a kubelet, an exporter, a host-network pod's port). The
// address is not in any inside range (this machine's is a documentation
// address; a cloud node's may be public), so before, the agent reached the
// server through the egress proxy; now the proxy refuses it as the node's
// own (a name resolving to it too: TestProxyRefusesTheInside). Real bwrap.
func TestEgressRefusesTheNodesOwnAddress(t *testing.T) {
	root := rootRunRoot(t, "hf-nodeaddr-")
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the agent uses curl")
	}
	own := nodeAddrs(nil)
	if len(own) == 0 {
		t.Skip("this machine has no address outside the inside ranges (loopback, private, ...) to try")
	}
	ip := own[0]
	var hits atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "the node's own service")
	}), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", ":0") // every address of the node
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	target := net.JoinHostPort(ip.String(), fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	e, err := New(Options{Sources: inlineSources{}, RunRoot: root, InitBinary: sandboxInitBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeaddr", Namespace: "tenant", UID: types.UID("uid-nodeaddr")},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec,
				Command: []string{"sh", "-c", "curl -s -m 10 http://" + target + "/ -w ' %{http_code}\\n'"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: nothing\nmcp:\n  transport: None\n"}}},
			Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly, AllowHosts: []string{target}},
		},
		Status: harnessv1.HarnessRunStatus{Attempt: 1},
	}
	st := e.Execute(context.Background(), run).Status
	tail := ""
	if st.Agent != nil {
		tail = st.Agent.OutputTail
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the agent reached the node's own address %s %d times:\n%s", ip, n, tail)
	}
	if !strings.Contains(tail, "a node's own address") || !strings.Contains(tail, " 403") {
		t.Errorf("the agent's output does not show the proxy's refusal naming the node's own address:\n%s", tail)
	}
	if st.Network == nil || st.Network.Denied != 1 {
		t.Errorf("network status %+v, want the request denied", st.Network)
	}
}

// TestNodeAgentWithoutLoopbackProvidersRefusesThem: in a pod, the
// node-agent's loopback is its own and its sidecars' (a service mesh's
// admin API on 127.0.0.1:15000 took POST /quitquitquit from a run's agent
// through the loopback provider bridge). A node-agent told to reach no
// loopback provider (--loopback-providers=false, the chart's default)
// refuses such a run before its fixture is copied, saying why, and no
// request reaches the listener.
func TestNodeAgentWithoutLoopbackProvidersRefusesThem(t *testing.T) {
	root := rootRunRoot(t, "hf-noloop-")
	p := newSilentProvider(t)
	e, err := New(Options{Sources: inlineSources{}, RunRoot: root, InitBinary: sandboxInitBinary(t), NoLoopbackProviders: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	for _, url := range []string{fmt.Sprintf("http://127.0.0.1:%d", p.port()), fmt.Sprintf("http://localhost:%d/v1", p.port())} {
		run := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: "noloop", Namespace: "tenant", UID: types.UID("uid-noloop")},
			Spec: harnessv1.HarnessRunSpec{
				Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, ProviderURL: url,
					Command: []string{"sh", "-c", "curl -s -m 1 -X POST -d '{}' " + url + "/quitquitquit"}},
				Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
					"fixture.yaml": "prompt: nothing\nmcp:\n  transport: None\n"}}},
				Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly},
			},
			Status: harnessv1.HarnessRunStatus{Attempt: 1},
		}
		st := e.Execute(context.Background(), run).Status
		if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonPolicyViolation || !strings.Contains(st.Message, "--loopback-providers=false") {
			t.Errorf("%s: %s %s: %s, want Failed, PolicyViolation, naming --loopback-providers", url, st.Phase, st.Reason, st.Message)
		}
	}
	select {
	case <-p.got:
		t.Error("a request reached the loopback listener")
	default:
	}
}
