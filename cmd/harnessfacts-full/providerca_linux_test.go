package main

import (
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
)

// TestLocalRunTrustsTheProviderCAFile: a local run against a provider whose
// certificate a private CA signed (a company gateway, a test server) fails
// on that certificate with the system's roots, and passes with
// --provider-ca-file naming the CA, as a node-agent's flag of that name
// does: the real Claude Code in bwrap, through the run's model gateway,
// which counts the provider's figures and sends it the run's key. Before,
// `harnessfacts run` had no such flag, and a private provider over https
// could not be used without the CLI's own environment (SSL_CERT_FILE).
func TestLocalRunTrustsTheProviderCAFile(t *testing.T) {
	cliDir := adapters.InstalledCLIDir()
	if cliDir == "" {
		t.Fatal("no agent CLIs installed (make agent-clis)")
	}
	const key = "sk-ant-api03-provider-ca-test-0123456789abcdef"
	var answered atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("X-Api-Key") != key {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
			return
		}
		answered.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_ca","type":"message","role":"assistant","model":"claude-ca-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":101,"cache_creation_input_tokens":7,"cache_read_input_tokens":13,"output_tokens":1}}}`,
			`event: content_block_start` + "\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Done."}}`,
			`event: content_block_stop` + "\n" + `data: {"type":"content_block_stop","index":0}`,
			`event: message_delta` + "\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`,
			`event: message_stop` + "\n" + `data: {"type":"message_stop"}`,
		} {
			_, _ = io.WriteString(w, ev+"\n\n")
		}
	}))
	defer srv.Close()

	base := openDir(t)
	fix := filepath.Join(base, "fixtures", "say")
	ca := filepath.Join(base, "provider-ca.pem")
	files := map[string]string{
		filepath.Join(fix, "workspace", "a.txt"):          "hi\n",
		filepath.Join(fix, "fixture.yaml"):                "prompt: Say done.\nmcp: {transport: None}\nlimits: {episodeSeconds: 120, probeSeconds: 20}\n",
		filepath.Join(base, "secrets", "provider", "key"): key + "\n",
		ca: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})),
		filepath.Join(base, "run.yaml"): `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: say, namespace: default}
spec:
  agent:
    adapter: claude-code
    providerURL: ` + srv.URL + `
    credentials:
    - env: ANTHROPIC_API_KEY
      secretKeyRef: {name: provider, key: key}
  fixture: {configMapRef: {name: say}}
`,
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, extra := range [][]string{nil, {"--provider-ca-file", ca}} {
		answered.Store(0)
		cmd := exec.Command(harnessfactsBinary(t), append([]string{"run", "-q", "-f", filepath.Join(base, "run.yaml"),
			"--fixtures", filepath.Join(base, "fixtures"), "--secrets", filepath.Join(base, "secrets"), "--agent-clis", cliDir,
			"--run-root", filepath.Join(base, "runs"), "--evidence", filepath.Join(base, fmt.Sprint("ev", i)), "--evidence-key", ""}, extra...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		var printed struct {
			Status harnessv1.HarnessRunStatus `json:"status"`
		}
		if err := yaml.Unmarshal(out, &printed); err != nil {
			t.Fatalf("%v: the printed status: %v\n%s\n%s", extra, err, out, stderr.String())
		}
		st := printed.Status
		if extra == nil {
			if st.Reason != harnessv1.ReasonProviderCertificateInvalid || answered.Load() != 0 {
				t.Errorf("with the system's roots: reason %q (%s), %d answers; want %s and none", st.Reason, st.Message, answered.Load(), harnessv1.ReasonProviderCertificateInvalid)
			}
			continue
		}
		n := answered.Load()
		switch u := st.Usage; {
		case st.Verdict != harnessv1.VerdictPass:
			t.Errorf("with --provider-ca-file: verdict %q, reason %q: %s\n%s", st.Verdict, st.Reason, st.Message, stderr.String())
		case n == 0 || u == nil || u.Source != harnessv1.UsageFromGateway || u.Requests != n ||
			u.InputTokens != 101*n || u.CacheWriteTokens != 7*n || u.CacheReadTokens != 13*n || u.OutputTokens != 5*n:
			t.Errorf("with --provider-ca-file: usage %+v after %d answers, want the gateway's count of each answer's 101/7/13/5", u, n)
		}
		if strings.Contains(string(out), key) {
			t.Error("the printed status holds the run's key")
		}
	}
}
