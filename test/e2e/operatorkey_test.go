//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/runsource"
)

// An operator's signing key, kept in a Secret the controller names
// (--evidence-signing-key-secret), signs a run's receipt instead of the
// node's own key: the node-agent gets it through the run source while the
// run is active (it holds no right to read Secrets). `evidence verify
// --key` passes with the operator's public key and fails with the node's.
// A configured Secret that is missing leaves the run without evidence and
// says why, rather than sign with another key unnoticed.
func TestOperatorKeySignsInsteadOfTheNodes(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	keyFile := filepath.Join(tmp, "op", "evidence-key.pem")
	op, err := evidence.LoadOrCreateKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: operatorKeySecret, Namespace: leaseNS},
		Data: map[string][]byte{runsource.SigningKeyDataKey: pemBytes}}
	if err := k8s.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, sec) })
	secretPath.SetSigningKeySecret(&types.NamespacedName{Namespace: leaseNS, Name: sec.Name})
	t.Cleanup(func() { secretPath.SetSigningKeySecret(nil) })

	ns := newNamespace(t, "e2e-opkey")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	run := helloRun(ns, harnessv1.MCPTransportHTTP)
	if err := k8s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	st := waitTerminal(t, client.ObjectKeyFromObject(run)).Status
	if st.Verdict != harnessv1.VerdictPass || st.Evidence == nil {
		t.Fatalf("verdict %s, evidence %+v: %s", st.Verdict, st.Evidence, st.Message)
	}
	node := &harnessv1.HarnessNode{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: nodeName}, node); err != nil {
		t.Fatal(err)
	}
	if st.Evidence.SignedBy != op.Public().ID || node.Status.EvidenceKey == nil || st.Evidence.SignedBy == node.Status.EvidenceKey.KeyID {
		t.Fatalf("signed by %q; the operator's key is %q, the node's %+v", st.Evidence.SignedBy, op.Public().ID, node.Status.EvidenceKey)
	}
	opPub, nodePub := filepath.Join(tmp, "op.pub"), filepath.Join(tmp, "node.pub")
	for p, k := range map[string]string{opPub: op.Public().PEM, nodePub: node.Status.EvidenceKey.PublicKey} {
		if err := os.WriteFile(p, []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	verify := func(key string) (string, error) {
		out, err := exec.Command(binary, "evidence", "verify", run.Name, "-n", ns, "--kubeconfig", kubeconfig, "--key", key).CombinedOutput()
		return string(out), err
	}
	if out, err := verify(opPub); err != nil || !strings.Contains(out, "signature: good, by trusted key "+op.Public().ID) {
		t.Fatalf("verify with the operator's key: %v\n%s", err, out)
	}
	if out, err := verify(nodePub); err == nil || !strings.Contains(out, "not among the trusted keys") {
		t.Errorf("verify with the node's key: %v\n%s", err, out)
	}
	// The controller's store gate checks the signature with the key
	// signedBy names, the operator's here, and stores the evidence.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got := &harnessv1.HarnessRun{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(run), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Evidence.StoredRef != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator-signed evidence was not stored: %+v", got.Status.Evidence)
		}
	}

	// The Secret named but gone: no evidence, and the run says why.
	secretPath.SetSigningKeySecret(&types.NamespacedName{Namespace: leaseNS, Name: "no-such-key"})
	run2 := helloRun(ns, harnessv1.MCPTransportHTTP)
	run2.Name = "hello-nokey"
	if err := k8s.Create(ctx, run2); err != nil {
		t.Fatal(err)
	}
	st = waitTerminal(t, client.ObjectKeyFromObject(run2)).Status
	if st.Evidence != nil && st.Evidence.Digest != "" || !strings.Contains(st.Message, "the operator's evidence signing key") || !strings.Contains(st.Message, "no-such-key") {
		t.Errorf("with the operator's Secret missing: evidence %+v, message %q", st.Evidence, st.Message)
	}
}

// operatorKeySecret names the operator's signing key Secret in leaseNS.
const operatorKeySecret = "operator-evidence-key"
