//go:build linux

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

// A run on the real API server produces a receipt signed with the node's
// key, which the node publishes; `harnessfacts evidence verify --key`
// passes on the cluster and on an exported folder, and one flipped byte of
// an artifact, of the signed statement or of the signature, a wrong key
// and a missing signature each fail with a message that says which.
func TestSignedReceiptVerifiesAndTamperingFails(t *testing.T) {
	ns := newNamespace(t, "e2e-signed")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	run := helloRun(ns, harnessv1.MCPTransportHTTP)
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	st := waitTerminal(t, client.ObjectKeyFromObject(run)).Status
	if st.Verdict != harnessv1.VerdictPass || st.Evidence == nil {
		t.Fatalf("verdict %s, evidence %+v: %s\n%s", st.Verdict, st.Evidence, st.Message, tailOf(st))
	}

	// The node publishes its public key; the run's status names it.
	node := &harnessv1.HarnessNode{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: nodeName}, node); err != nil {
		t.Fatal(err)
	}
	nk := node.Status.EvidenceKey
	if nk == nil || nk.Algorithm != evidence.Algorithm || !strings.HasPrefix(nk.PublicKey, "-----BEGIN PUBLIC KEY-----") {
		t.Fatalf("HarnessNode status.evidenceKey = %+v", nk)
	}
	if st.Evidence.SignedBy != nk.KeyID {
		t.Fatalf("status.evidence.signedBy %q, the node's key is %q", st.Evidence.SignedBy, nk.KeyID)
	}
	// The private key stays the node-agent's: mode 0600, in a folder only
	// its owner enters.
	if info, err := os.Stat(evidenceKeyFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, %v", info, err)
	}
	tmp := t.TempDir()
	pub := filepath.Join(tmp, "node.pub")
	if err := os.WriteFile(pub, []byte(nk.PublicKey), 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := evidence.LoadOrCreateKey(filepath.Join(tmp, "other", "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	otherPub := filepath.Join(tmp, "other.pub")
	if err := os.WriteFile(otherPub, []byte(other.Public().PEM), 0o644); err != nil {
		t.Fatal(err)
	}
	trusted := filepath.Join(tmp, "trusted-keys.pem")
	if err := os.WriteFile(trusted, []byte("# the operator's trusted node keys\n"+other.Public().PEM+nk.PublicKey), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	hf := func(args ...string) (string, error) {
		out, err := exec.Command(binary, args...).CombinedOutput()
		return string(out), err
	}

	// On the cluster.
	if out, err := hf("evidence", "verify", "--kubeconfig", kubeconfig, "-n", ns, run.Name, "--key", pub); err != nil ||
		!strings.Contains(out, "signature: good, by trusted key "+nk.KeyID) {
		t.Fatalf("evidence verify --key: %v\n%s", err, out)
	}
	// Offline, from an exported folder, against the key or a trusted list.
	exported := filepath.Join(tmp, "exported")
	if out, err := hf("evidence", "export", "--kubeconfig", kubeconfig, "-n", ns, run.Name, exported); err != nil {
		t.Fatalf("evidence export: %v\n%s", err, out)
	}
	requirePins(t, exported, st)
	for _, flags := range [][]string{{"--key", pub}, {"--trusted-keys", trusted}} {
		if out, err := hf(append([]string{"evidence", "verify", exported}, flags...)...); err != nil || !strings.Contains(out, "signature: good") {
			t.Fatalf("evidence verify %v of the export: %v\n%s", flags, err, out)
		}
	}

	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		key    string
		want   string
	}{
		{name: "an artifact byte", tamper: func(t *testing.T, dir string) {
			flip(t, filepath.Join(dir, "artifacts", "greeting.txt"), func(b []byte) { b[0] ^= 1 })
		}, want: "DIFFERS artifacts/greeting.txt: sha256"},
		{name: "a statement byte", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, func(env map[string]any) {
				payload, _ := base64.StdEncoding.DecodeString(env["payload"].(string))
				i := strings.Index(string(payload), `"greeting.txt"`)
				payload[i+1] ^= 1
				env["payload"] = base64.StdEncoding.EncodeToString(payload)
			})
		}, want: "DIFFERS receipt.dsse.json (statement): its predicate differs from receipt.json"},
		{name: "a signature byte", tamper: func(t *testing.T, dir string) {
			editEnvelope(t, dir, func(env map[string]any) {
				s := env["signatures"].([]any)[0].(map[string]any)
				sig, _ := base64.StdEncoding.DecodeString(s["sig"].(string))
				sig[len(sig)-1] ^= 1
				s["sig"] = base64.StdEncoding.EncodeToString(sig)
			})
		}, want: "DIFFERS receipt.dsse.json (signature): does not verify with key " + nk.KeyID},
		{name: "a wrong key", key: otherPub, want: "DIFFERS receipt.dsse.json (signature): signed by key " + nk.KeyID + ", which is not among the trusted keys"},
		{name: "a missing signature", tamper: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, evidence.EnvelopeName)); err != nil {
				t.Fatal(err)
			}
		}, want: "DIFFERS receipt.dsse.json: missing: the evidence is not signed"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(tmp, "case-"+string(rune('a'+i)))
			if out, err := exec.Command("cp", "-r", exported, dir).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v\n%s", err, out)
			}
			if tc.tamper != nil {
				tc.tamper(t, dir)
			}
			key := pub
			if tc.key != "" {
				key = tc.key
			}
			out, err := hf("evidence", "verify", dir, "--key", key)
			if err == nil {
				t.Fatalf("tampered evidence verified:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("output does not say %q:\n%s", tc.want, out)
			}
		})
	}

	// Whoever can write the evidence ConfigMap, without the key, cannot
	// make a changed artifact verify on the cluster either.
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: st.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["artifact-00"] = "hello, forger\n"
	if err := k8s.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	if out, err := hf("evidence", "verify", "--kubeconfig", kubeconfig, "-n", ns, run.Name, "--key", pub); err == nil ||
		!strings.Contains(out, "DIFFERS artifact-00: sha256") {
		t.Fatalf("a forged artifact on the cluster: %v\n%s", err, out)
	}
}

// requirePins checks the reproducibility pins of the signed receipt: the
// CLI binary by path and digest (sh here: the exec adapter's command), the
// spec and fixture digests and the sandbox in force, as status says, and
// status.usage.
func requirePins(t *testing.T, dir string, st harnessv1.HarnessRunStatus) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, evidence.ReceiptName))
	if err != nil {
		t.Fatal(err)
	}
	var r evidence.Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	if sh, err = filepath.EvalSymlinks(sh); err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	if r.Agent.CLIPath != sh || r.Agent.CLIDigest != evidence.Sum(content) || st.Agent == nil || st.Agent.CLIDigest != r.Agent.CLIDigest {
		t.Errorf("CLI pinned as %s %s (status %+v), want %s %s", r.Agent.CLIPath, r.Agent.CLIDigest, st.Agent, sh, evidence.Sum(content))
	}
	if r.SpecDigest != st.Evidence.SpecDigest || r.FixtureDigest != st.Evidence.FixtureDigest || r.Sandbox.Mode != "bwrap" ||
		r.Sandbox.Seccomp == "" || r.Node != nodeName || r.HarnessVersion == "" {
		t.Errorf("receipt pins spec %s fixture %s sandbox %+v node %s version %q; status %+v", r.SpecDigest, r.FixtureDigest, r.Sandbox, r.Node, r.HarnessVersion, st.Evidence)
	}
	if r.Usage == nil || st.Usage == nil || !reflect.DeepEqual(*r.Usage, *st.Usage) {
		t.Errorf("receipt usage %+v, status usage %+v", r.Usage, st.Usage)
	}
}

func flip(t *testing.T, path string, f func([]byte)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func editEnvelope(t *testing.T, dir string, f func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, evidence.EnvelopeName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]any
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	f(env)
	if b, err = json.Marshal(env); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The agent, inside its sandbox, tries to read the node's signing key (by
// its path, and by listing its folder) and keeps what it got as an
// artifact: it gets nothing, and the evidence, signed, says so.
func TestAgentCannotReadTheSigningKey(t *testing.T) {
	ns := newNamespace(t, "e2e-steal-key")
	dir := filepath.Dir(evidenceKeyFile)
	script := "{ cat " + evidenceKeyFile + "; ls -la " + dir + "; cat " + dir + "/*; } > stolen.txt 2>&1; exit 0"
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "steal-key", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "-c", script}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: steal the key\nartifacts:\n- stolen.txt\n"}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	st := waitTerminal(t, client.ObjectKeyFromObject(run)).Status
	if st.Evidence == nil || st.Evidence.SignedBy == "" || st.Evidence.ConfigMapName == "" {
		t.Fatalf("evidence %+v: %s", st.Evidence, st.Message)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: st.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	stolen, ok := cm.Data["artifact-00"]
	if !ok || stolen == "" {
		t.Fatalf("the agent's attempt was not collected: %v", cm.Data)
	}
	key, err := os.ReadFile(evidenceKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Split(strings.TrimSpace(string(key)), "\n")[1] // a line of the key's base64
	if strings.Contains(stolen, "PRIVATE KEY") || strings.Contains(stolen, body) || strings.Contains(stolen, "-rw-------") {
		t.Fatalf("the agent read the signing key or its folder:\n%s", stolen)
	}
	t.Logf("what the agent got:\n%s", stolen)
}
