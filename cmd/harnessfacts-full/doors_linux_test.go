package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/nethost"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// localRun is one `harnessfacts run` of a fixture folder written from
// files (run.yaml among them) on a run root of its own. While it runs,
// every host process's command line is sampled; when the agent has touched
// "started" in its workspace, during is called with the run dir, and then
// "proceed" is written there for the agent to go on.
type localRun struct {
	status   harnessv1.HarnessRunStatus
	stdout   string
	stderr   string
	cmdlines []string
	runRoot  string
	evidence string
}

func runLocally(t *testing.T, files map[string]string, during func(runDir string)) *localRun {
	t.Helper()
	bin := harnessfactsBinary(t)
	base := openDir(t)
	fix := filepath.Join(base, "fix")
	for p, content := range files {
		p = filepath.Join(fix, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lr := &localRun{runRoot: filepath.Join(base, "runs"), evidence: filepath.Join(base, "evidence")}
	cmd := exec.Command(bin, "run", "-f", filepath.Join(fix, "run.yaml"), "--run-root", lr.runRoot, "--evidence", lr.evidence)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	seen := map[string]bool{}
	var mu sync.Mutex
	sample := func() {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && len(b) > 0 {
				mu.Lock()
				seen[string(b)] = true
				mu.Unlock()
			}
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stopSampling := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			sample()
			select {
			case <-stopSampling:
				return
			case <-time.After(15 * time.Millisecond):
			}
		}
	}()
	deadline := time.After(2 * time.Minute)
	started := false
	for !started {
		select {
		case <-exited:
			started = true // the agent may not wait (no "started"): nothing to do during the run
		case <-deadline:
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("the run did not start:\n%s\n%s", stdout.String(), stderr.String())
		case <-time.After(20 * time.Millisecond):
			m, _ := filepath.Glob(filepath.Join(lr.runRoot, fixture.RunDirPrefix+"*", "workspace", "started"))
			if len(m) == 1 {
				started = true
				runDir := filepath.Dir(filepath.Dir(m[0]))
				sample()
				if during != nil {
					during(runDir)
				}
				if err := os.WriteFile(filepath.Join(runDir, "workspace", "proceed"), nil, 0o644); err != nil {
					t.Error(err)
				}
			}
		}
	}
	select {
	case <-exited:
	case <-deadline:
		_ = cmd.Process.Kill()
		<-exited
	}
	close(stopSampling)
	wg.Wait()
	for c := range seen {
		lr.cmdlines = append(lr.cmdlines, c)
	}
	lr.stdout, lr.stderr = stdout.String(), stderr.String()
	var out struct {
		Status harnessv1.HarnessRunStatus `json:"status"`
	}
	if err := yaml.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("the printed status: %v\n%s\n%s", err, lr.stdout, lr.stderr)
	}
	lr.status = out.Status
	return lr
}

const waitForProceed = `touch started; while [ ! -e proceed ]; do sleep 0.05; done`

// dialAs connects to the unix socket path as host uid/gid (node, run as
// that user) and says CONNECTED or REFUSED <code>.
func dialAs(t *testing.T, path string, uid, gid int) string {
	t.Helper()
	prog := fmt.Sprintf(`require("net").connect({path: %q}).on("connect", () => { console.log("CONNECTED"); process.exit(0) }).on("error", e => { console.log("REFUSED " + e.code); process.exit(0) })`, path)
	cmd := exec.Command("node", "-e", prog)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node as uid %d: %v\n%s", uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A run's sockets are its agent's alone: 0600 in a 0700 folder, both owned
// by the run's uid, so another host uid cannot connect to them (to call the
// run's get_token or use its egress proxy), while the run's own uid can. No
// socket path, and not the prompt, is on any command line during the run:
// the HTTP bridges are the runner's, outside the sandbox, and mcp-stdio gets
// its socket in the environment.
func TestLocalRunSocketsAreTheRunsAlone(t *testing.T) {
	prompt := "prompt-" + rand.Text() + " edit the file"
	for _, transport := range []string{"HTTP", "Stdio"} {
		t.Run(transport, func(t *testing.T) {
			agent := waitForProceed + `; echo agent-done`
			if transport == "Stdio" {
				// The stdio MCP server stays up while the test looks.
				agent = `set -- $(printf '%s' "$HARNESSFACTS_MCP_COMMAND" | tr -d '[]"' | tr ',' ' '); (` + waitForProceed + `) | "$@" >/dev/null; echo agent-done`
			}
			files := map[string]string{
				"fixture.yaml": fmt.Sprintf("prompt: %q\nmcp: {transport: %s}\n", prompt, transport),
				"workspace/a":  "x\n",
				"run.yaml": fmt.Sprintf(`apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: sockets}
spec:
  agent: {adapter: exec, command: [sh, -c, %q]}
  fixture: {configMapRef: {name: fix}}
  network: {egress: ProviderOnly}
`, agent),
			}
			var probed bool
			lr := runLocally(t, files, func(runDir string) {
				probed = true
				sockets := filepath.Join(runDir, "sockets")
				st, err := os.Stat(sockets)
				if err != nil {
					t.Fatal(err)
				}
				// The run's uid: as root, an id of the local runs' range
				// that no other local run holds.
				local, err := sandbox.ParseIDRange(sandbox.LocalIDRange)
				if err != nil {
					t.Fatal(err)
				}
				uid := int(st.Sys().(*syscall.Stat_t).Uid)
				if st.Mode().Perm() != 0o700 || uid < local.First || uid > local.Last() || int(st.Sys().(*syscall.Stat_t).Gid) != uid {
					t.Errorf("the sockets folder is %v owned by %d:%d, want 0700 owned by a uid and gid of %s", st.Mode().Perm(), uid, st.Sys().(*syscall.Stat_t).Gid, local)
				}
				socks, _ := filepath.Glob(filepath.Join(sockets, "*.sock"))
				if len(socks) < 2 {
					t.Fatalf("sockets %v: want the MCP server's and the egress proxy's", socks)
				}
				for _, s := range socks {
					st, err := os.Stat(s)
					if err != nil {
						t.Fatal(err)
					}
					if st.Mode().Perm() != 0o600 || int(st.Sys().(*syscall.Stat_t).Uid) != uid {
						t.Errorf("%s is %v owned by %d, want 0600 owned by %d", s, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid, uid)
					}
					// Another local run's uid, and nobody, which local runs
					// all were.
					for _, other := range []int{12345, sandbox.DefaultUID} {
						if got := dialAs(t, s, other, other); !strings.HasPrefix(got, "REFUSED EACCES") {
							t.Errorf("host uid %d connecting to %s: %s, want REFUSED EACCES", other, s, got)
						}
					}
					if got := dialAs(t, s, uid, uid); got != "CONNECTED" {
						t.Errorf("the run's uid connecting to %s: %s, want CONNECTED (the refusal above proves nothing)", s, got)
					}
				}
			})
			if !probed {
				t.Fatalf("the agent never started:\n%s\n%s", lr.stdout, lr.stderr)
			}
			if lr.status.Agent == nil || !strings.Contains(lr.status.Agent.OutputTail, "agent-done") {
				t.Errorf("the agent did not finish: %+v\n%s", lr.status.Agent, lr.stderr)
			}
			// The sampling saw what would carry a socket's path: the
			// agent's processes, mcp-stdio with Stdio.
			witness := "agent-done"
			if transport == "Stdio" {
				witness = "mcp-stdio"
			}
			var sawWitness bool
			for _, c := range lr.cmdlines {
				if strings.HasPrefix(c, "node\x00-e\x00require(\"net\")") {
					continue // this test's own probes
				}
				shown := strings.ReplaceAll(c, "\x00", " ")
				if strings.Contains(c, witness) {
					sawWitness = true
				}
				if strings.Contains(c, lr.runRoot) && strings.Contains(c, "/sockets/") {
					t.Errorf("a run socket's path is on a command line: %q", shown)
				}
				if strings.Contains(c, prompt) {
					t.Errorf("the prompt is on a command line: %q", shown)
				}
			}
			if !sawWitness {
				t.Errorf("the sampling never saw %s: it proves nothing", witness)
			}
		})
	}
}

// An Unrestricted run reaches a host outside this machine's network
// namespace through its own user-mode network stack, and none of the
// node-agent's loopback listeners (here a stand-in for its metrics, health
// and the MCP servers of other runs), neither by 127.0.0.1 nor by the
// stack's gateway.
func TestLocalUnrestrictedRunReachesOutsideNotLoopback(t *testing.T) {
	outside := nethost.Outside(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	loopback := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "node-agent metrics")
	})}
	go func() { _ = loopback.Serve(ln) }()
	defer loopback.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	agent := fmt.Sprintf(`curl -sS --max-time 10 http://%s/; echo
for a in 127.0.0.1 10.0.2.2; do if curl -sS --max-time 5 http://$a:%d/ >/dev/null 2>&1; then echo "REACHED $a"; else echo "refused $a"; fi; done`, outside, port)
	lr := runLocally(t, map[string]string{
		"fixture.yaml": "prompt: fetch\n",
		"workspace/a":  "x\n",
		"run.yaml": fmt.Sprintf(`apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: unrestricted}
spec:
  agent: {adapter: exec, command: [sh, -c, %q]}
  fixture: {configMapRef: {name: fix}}
  network: {egress: Unrestricted}
`, agent),
	}, nil)
	tail := ""
	if lr.status.Agent != nil {
		tail = lr.status.Agent.OutputTail
	}
	if !strings.Contains(tail, "hello from the outside") {
		t.Errorf("the Unrestricted run did not reach the outside host %s:\n%s\n%s", outside, tail, lr.stderr)
	}
	if strings.Contains(tail, "REACHED") || strings.Count(tail, "refused") != 2 || hits.Load() != 0 {
		t.Errorf("the Unrestricted run reached the node's loopback (%d requests):\n%s", hits.Load(), tail)
	}
}

// An Unrestricted run whose providerURL is on this machine's loopback (a
// local model server, fake-provider) reaches it at that address in its own
// namespace, bridged as under ProviderOnly, and still no other loopback
// listener: its requests failed until its deadline, the sandbox's
// user-mode network never reaching the node's loopback.
func TestLocalUnrestrictedRunReachesItsLoopbackProvider(t *testing.T) {
	serve := func(what string, hits *atomic.Int32) int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits.Add(1)
			fmt.Fprint(w, what)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port
	}
	var providerHits, otherHits atomic.Int32
	provider := serve("the local model server", &providerHits)
	other := serve("node-agent metrics", &otherHits)
	agent := fmt.Sprintf(`curl -sS --max-time 10 "$HARNESSFACTS_PROVIDER_URL/v1/models"; echo
if curl -sS --max-time 5 http://127.0.0.1:%d/ >/dev/null 2>&1; then echo "REACHED other"; else echo "refused other"; fi`, other)
	lr := runLocally(t, map[string]string{
		"fixture.yaml": "prompt: ask\n",
		"workspace/a":  "x\n",
		"run.yaml": fmt.Sprintf(`apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: unrestricted-local-provider}
spec:
  agent: {adapter: exec, command: [sh, -c, %q], providerURL: "http://127.0.0.1:%d"}
  fixture: {configMapRef: {name: fix}}
  network: {egress: Unrestricted}
`, agent, provider),
	}, nil)
	tail := ""
	if lr.status.Agent != nil {
		tail = lr.status.Agent.OutputTail
	}
	if !strings.Contains(tail, "the local model server") || providerHits.Load() == 0 {
		t.Errorf("the Unrestricted run did not reach its loopback provider:\n%s\n%s", tail, lr.stderr)
	}
	if !strings.Contains(tail, "refused other") || otherHits.Load() != 0 {
		t.Errorf("the Unrestricted run reached another loopback listener (%d requests):\n%s", otherHits.Load(), tail)
	}
}

// The output tail in status is shown to people (kubectl describe prints it
// raw): terminal control sequences in it are inert text, while output.log
// in the evidence keeps the bytes that were hashed.
func TestLocalRunOutputTailNeutralisesTerminalSequences(t *testing.T) {
	agent := `printf 'before \033]52;c;ZXZpbA==\007 \033]8;;https://evil.example/\033\\link\033]8;;\033\\ \033[2K\033[1Aafter\n'`
	lr := runLocally(t, map[string]string{
		"fixture.yaml": "prompt: print\n",
		"workspace/a":  "x\n",
		"run.yaml": fmt.Sprintf(`apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: escapes}
spec:
  agent: {adapter: exec, command: [sh, -c, %q]}
  fixture: {configMapRef: {name: fix}}
`, agent),
	}, nil)
	if lr.status.Agent == nil {
		t.Fatalf("no agent status:\n%s\n%s", lr.stdout, lr.stderr)
	}
	tail := lr.status.Agent.OutputTail
	if strings.ContainsAny(tail, "\x1b\x07") {
		t.Errorf("the output tail keeps raw control characters: %q", tail)
	}
	for _, want := range []string{"^[]52;c;ZXZpbA==^G", "^[]8;;https://evil.example/^[\\link", "^[[2K^[[1Aafter"} {
		if !strings.Contains(tail, want) {
			t.Errorf("the output tail %q lacks %q", tail, want)
		}
	}
	log, err := os.ReadFile(filepath.Join(lr.evidence, "output.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte("\x1b]52;c;ZXZpbA==\x07")) {
		t.Errorf("output.log does not keep the agent's bytes: %q", log)
	}
	if out, err := exec.Command(harnessfactsBinary(t), "evidence", "verify", lr.evidence).CombinedOutput(); err != nil {
		t.Errorf("evidence verify: %v\n%s", err, out)
	}
}
