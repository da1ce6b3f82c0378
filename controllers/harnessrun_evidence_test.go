package controllers_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/runsource"
	"github.com/harnessfacts/harnessfacts/test/oci"
)

// The store gate checks the signature, not only the digest: receipt.dsse.json
// is outside status.evidence.digest, so a run author who swaps the node's
// signature for one of their own key over the same statement (or adds one to
// an unsigned run's evidence) before the controller reads the ConfigMap must
// not get that copy stored for good. Evidence signed by the node's published
// key or by the operator's key (its Secret) is stored; the swapped and the
// added envelopes are refused with an EvidenceNotStored Event naming the
// signature, and storedRef stays empty. A real API server and a real OCI
// registry on loopback.
func TestStoreGateChecksTheSignature(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	reg, err := oci.StartRegistry("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	keyDir := t.TempDir()
	newKey := func(name string) *evidence.Key {
		k, err := evidence.LoadOrCreateKey(filepath.Join(keyDir, name, "evidence-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	nodeKey, opKey, mine := newKey("node"), newKey("operator"), newKey("mine")
	opPEM, err := os.ReadFile(filepath.Join(keyDir, "operator", "evidence-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "operator-key"},
		Data: map[string][]byte{runsource.SigningKeyDataKey: opPEM}})

	startController(t, ns, controllers.Options{EvidenceRepository: reg.Host + "/evidence", EvidenceReader: k8s,
		EvidenceSigningKeySecret: &types.NamespacedName{Namespace: ns, Name: "operator-key"}}, nil)
	nodeName := "signer-" + ns
	node := startNode(t, ns, fakenode.Options{Name: nodeName, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterExec: "sh"}, Slots: 4, RunFor: -1})
	// The node-agent publishes its key on its HarnessNode.
	hn := &harnessv1.HarnessNode{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: nodeName}, hn); err != nil {
		t.Fatal(err)
	}
	base := hn.DeepCopy()
	hn.Status.EvidenceKey = &harnessv1.EvidenceKey{KeyID: nodeKey.Public().ID, Algorithm: evidence.Algorithm, PublicKey: nodeKey.Public().PEM}
	if err := k8s.Status().Patch(ctx, hn, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}

	// finish ends a run as the node-agent does: the evidence ConfigMap
	// (which edit may change before the controller reads it), then the
	// status naming it, its digest and signer, then the terminal phase.
	finish := func(name string, signer *evidence.Key, edit func(*evidence.Bundle, map[string]string)) {
		t.Helper()
		create(t, hftesting.MakeHarnessRun(name, ns).Adapter(harnessv1.AdapterExec).Obj())
		run := waitRun(t, ns, name, wait, "Running", phaseIs(harnessv1.RunRunning))
		now := time.Now()
		b, err := evidence.SealLog(evidence.Receipt{
			Run:  evidence.RunRef{Namespace: ns, Name: name, UID: string(run.UID), Attempt: run.Status.Attempt},
			Node: nodeName, Agent: evidence.Agent{Adapter: harnessv1.AdapterExec},
			Timings: evidence.Timings{Started: now, Finished: now},
		}, evidence.BytesLog("done\n"), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		signedBy := ""
		if signer != nil {
			if err := b.Sign(ctx, signer); err != nil {
				t.Fatal(err)
			}
			signedBy = signer.Public().ID
		}
		data, bin := b.ConfigMapData()
		if edit != nil {
			edit(b, data)
		}
		cmName := name + "-evidence-1"
		create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cmName}, Data: data, BinaryData: bin})
		base := run.DeepCopy()
		run.Status.Evidence = &harnessv1.EvidenceStatus{ConfigMapName: cmName, Digest: b.Digest, SignedBy: signedBy}
		if err := k8s.Status().Patch(ctx, run, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		if err := node.Finish(ctx, client.ObjectKeyFromObject(run), fakenode.Pass); err != nil {
			t.Fatal(err)
		}
	}
	// resign replaces the node's envelope with one by the run author's key
	// over the same statement.
	resign := func(_ *evidence.Bundle, data map[string]string) {
		var e dsse.Envelope
		if err := json.Unmarshal([]byte(data[evidence.EnvelopeName]), &e); err != nil {
			t.Fatal(err)
		}
		stmt, err := base64.StdEncoding.DecodeString(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		signer, err := dsse.NewEnvelopeSigner(mine)
		if err != nil {
			t.Fatal(err)
		}
		forged, err := signer.SignPayload(ctx, evidence.PayloadType, stmt)
		if err != nil {
			t.Fatal(err)
		}
		fj, err := json.Marshal(forged)
		if err != nil {
			t.Fatal(err)
		}
		data[evidence.EnvelopeName] = string(fj)
	}
	// addSignature signs an unsigned run's evidence with the run author's
	// key, as the node-agent would have signed it.
	addSignature := func(b *evidence.Bundle, data map[string]string) {
		if err := b.Sign(ctx, mine); err != nil {
			t.Fatal(err)
		}
		signed, _ := b.ConfigMapData()
		data[evidence.EnvelopeName] = signed[evidence.EnvelopeName]
	}
	finish("by-node", nodeKey, nil)
	finish("by-operator", opKey, nil)
	finish("swapped", nodeKey, resign)
	finish("added", nil, addSignature)

	for _, name := range []string{"by-node", "by-operator"} {
		waitRun(t, ns, name, wait, "stored", func(r *harnessv1.HarnessRun) bool {
			return r.Status.Evidence != nil && strings.HasPrefix(r.Status.Evidence.StoredRef, reg.Host+"/evidence@sha256:")
		})
	}
	for name, want := range map[string]string{
		"swapped": "receipt.dsse.json (signature): signed by key " + mine.Public().ID + ", which is not among the trusted keys (" + nodeKey.Public().ID + ")",
		"added":   "carries a signature (receipt.dsse.json), but the run's evidence is unsigned",
	} {
		eventually(t, wait, func() error {
			for _, e := range runEvents(t, ns, name) {
				if e.Reason == controllers.ReasonEvidenceNotStored && strings.Contains(e.Note, want) {
					return nil
				}
			}
			return fmt.Errorf("run %s: no %s Event saying %q: %v", name, controllers.ReasonEvidenceNotStored, want, eventReasons(runEvents(t, ns, name)))
		})
		if ref := getRun(t, ns, name).Status.Evidence.StoredRef; ref != "" {
			t.Errorf("run %s: evidence with a signature not by status.evidence.signedBy was stored as %s", name, ref)
		}
	}
}
