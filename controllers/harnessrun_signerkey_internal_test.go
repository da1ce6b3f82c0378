package controllers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/runsource"
)

// Which key the store gate checks a run's envelope against, by what it
// reads: the published key of the run's HarnessNode (bound to that node),
// else the operator's, also when the HarnessNode is gone since the run
// ended. (The envtest TestStoreGateChecksTheSignature covers the gate
// against the API server; a node deleted between a run's end and the
// gate's read is a race from outside, so its case is held here.)
func TestSignerKeyFallsThroughToTheOperatorsKey(t *testing.T) {
	dir := t.TempDir()
	key := func(name string) (*evidence.Key, []byte) {
		p := filepath.Join(dir, name, "evidence-key.pem")
		k, err := evidence.LoadOrCreateKey(p)
		if err != nil {
			t.Fatal(err)
		}
		pem, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return k, pem
	}
	nodeKey, _ := key("node")
	opKey, opPEM := key("operator")
	other, _ := key("other")
	scheme := runtime.NewScheme()
	if err := harnessv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "op-key"},
		Data: map[string][]byte{runsource.SigningKeyDataKey: opPEM}}
	node := &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	node.Status.EvidenceKey = &harnessv1.EvidenceKey{KeyID: nodeKey.Public().ID, Algorithm: evidence.Algorithm, PublicKey: nodeKey.Public().PEM}
	ref := &types.NamespacedName{Namespace: "ops", Name: "op-key"}

	cases := []struct {
		name      string
		objs      []client.Object
		operator  *types.NamespacedName
		signedBy  string
		wantID    string
		wantNode  string
		wantError string
	}{
		{name: "the node's key", objs: []client.Object{node, secret}, operator: ref, signedBy: nodeKey.Public().ID, wantID: nodeKey.Public().ID, wantNode: "n1"},
		{name: "the operator's key, the node there", objs: []client.Object{node, secret}, operator: ref, signedBy: opKey.Public().ID, wantID: opKey.Public().ID},
		{name: "the operator's key, the node gone", objs: []client.Object{secret}, operator: ref, signedBy: opKey.Public().ID, wantID: opKey.Public().ID},
		{name: "the node gone, no operator's key", objs: []client.Object{secret}, signedBy: nodeKey.Public().ID, wantError: "HarnessNode n1 is gone"},
		{name: "the node gone, another key", objs: []client.Object{secret}, operator: ref, signedBy: other.Public().ID, wantError: "HarnessNode n1 is gone; the operator's key is " + opKey.Public().ID},
		{name: "neither", objs: []client.Object{node, secret}, operator: ref, signedBy: other.Public().ID, wantError: "HarnessNode n1 publishes " + nodeKey.Public().ID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objs...).Build()
			r := &HarnessRunReconciler{opts: Options{EvidenceReader: reader, EvidenceSigningKeySecret: tc.operator}}
			run := &harnessv1.HarnessRun{}
			run.Status.NodeName = "n1"
			run.Status.Evidence = &harnessv1.EvidenceStatus{SignedBy: tc.signedBy}
			got, err := r.signerKey(context.Background(), run)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("signerKey: %v, %v; want an error saying %q", got, err, tc.wantError)
				}
				return
			}
			if err != nil || got.ID != tc.wantID || got.Node != tc.wantNode {
				t.Fatalf("signerKey: %+v, %v; want key %s bound to node %q", got, err, tc.wantID, tc.wantNode)
			}
		})
	}
}
