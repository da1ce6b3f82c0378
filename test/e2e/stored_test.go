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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

// The controller stores a finished run's evidence in a real OCI registry
// (go-containerregistry's, on loopback); after the run and its evidence
// ConfigMap are deleted, `harnessfacts evidence verify REFERENCE --key`
// fetches it back without the cluster and verifies digests and signature.
// Evidence changed in the registry (re-pushed under a tag) fails.
func TestStoredEvidenceOutlivesTheRun(t *testing.T) {
	ns := newNamespace(t, "e2e-stored")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	run := helloRun(ns, harnessv1.MCPTransportHTTP)
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(run)
	st := waitTerminal(t, key).Status
	if st.Verdict != harnessv1.VerdictPass || st.Evidence == nil || st.Evidence.SignedBy == "" {
		t.Fatalf("verdict %s, evidence %+v: %s", st.Verdict, st.Evidence, st.Message)
	}
	var ref string
	deadline := time.Now().Add(time.Minute)
	for ref == "" {
		got := &harnessv1.HarnessRun{}
		if err := k8s.Get(context.Background(), key, got); err != nil {
			t.Fatal(err)
		}
		ref = got.Status.Evidence.StoredRef
		if ref == "" && time.Now().After(deadline) {
			t.Fatalf("the evidence was not stored: %+v", got.Status.Evidence)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.HasPrefix(ref, evidenceRepository+"@sha256:") {
		t.Fatalf("storedRef %q, want %s@sha256:...", ref, evidenceRepository)
	}

	// The run and its evidence ConfigMap go.
	if err := k8s.Delete(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: st.Evidence.ConfigMapName}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		err := k8s.Get(context.Background(), key, &harnessv1.HarnessRun{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run was not deleted: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	node := &harnessv1.HarnessNode{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: nodeName}, node); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	pub := filepath.Join(tmp, "node.pub")
	if err := os.WriteFile(pub, []byte(node.Status.EvidenceKey.PublicKey), 0o644); err != nil {
		t.Fatal(err)
	}
	// No cluster: a kubeconfig that does not exist.
	verify := func(ref string) (string, error) {
		cmd := exec.Command(binary, "evidence", "verify", ref, "--key", pub)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(tmp, "none"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := verify(ref)
	if err != nil || !strings.Contains(out, "verified "+ref+": "+st.Evidence.Digest) || !strings.Contains(out, "signature: good") {
		t.Fatalf("evidence verify %s: %v\n%s", ref, err, out)
	}
	if out, err := verify("oci://" + ref); err != nil {
		t.Fatalf("evidence verify oci://%s: %v\n%s", ref, err, out)
	}

	// A forger with push rights re-pushes it with one byte of output.log
	// changed: the reference by tag (written oci://, as a tag must be:
	// a bare name with a slash is a path) now fails, naming the part.
	files, err := evidence.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	files[evidence.OutputName][0] ^= 1
	img, err := evidence.Image(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := evidence.PushImage(context.Background(), evidenceRepository+":forged", img)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{forged, "oci://" + evidenceRepository + ":forged"} {
		if out, err := verify(r); err == nil || !strings.Contains(out, "DIFFERS output.log: digest") {
			t.Fatalf("forged evidence %s: %v\n%s", r, err, out)
		}
	}
}
