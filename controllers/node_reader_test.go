package controllers

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// One judgement of a node answers both questions: can it take a run
// (dispatch) and was it lost (node loss, deadlines). The envtest node-loss
// and dispatch tests show the same through the API server.
func TestJudgeNode(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	readyNode := func(mut func(*harnessv1.HarnessNode)) *harnessv1.HarnessNode {
		n := &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		n.Spec.Slots = 2
		n.Status.LeaseNamespace = "leases"
		n.Status.Conditions = []metav1.Condition{{Type: harnessv1.ConditionNodeReady, Status: metav1.ConditionTrue}}
		if mut != nil {
			mut(n)
		}
		return n
	}
	lease := func(renewedAgo time.Duration, seconds *int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "leases", Name: "n1"},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-renewedAgo)}, LeaseDurationSeconds: seconds}}
	}
	cases := []struct {
		name      string
		node      *harnessv1.HarnessNode
		lease     *coordinationv1.Lease
		wantReady bool
		wantLost  bool
		wantWhy   string
	}{
		{name: "ready, fresh Lease", node: readyNode(nil), lease: lease(5*time.Second, ptr.To[int32](10)), wantReady: true},
		{name: "default Lease duration", node: readyNode(nil), lease: lease(30*time.Second, nil), wantReady: true},
		{name: "expired Lease", node: readyNode(nil), lease: lease(11*time.Second, ptr.To[int32](10)),
			wantLost: true, wantWhy: "its heartbeat Lease leases/n1 expired at 2026-01-01T11:59:59Z"},
		{name: "expired default Lease", node: readyNode(nil), lease: lease(41*time.Second, nil), wantLost: true,
			wantWhy: "its heartbeat Lease leases/n1 expired at 2026-01-01T11:59:59Z"},
		{name: "no Lease", node: readyNode(nil), wantLost: true, wantWhy: "it has no heartbeat Lease"},
		{name: "gone", wantLost: true, wantWhy: "its HarnessNode was deleted"},
		// Alive but unwilling: not lost, not ready.
		{name: "cordoned", node: readyNode(func(n *harnessv1.HarnessNode) { n.Spec.Unschedulable = true }), lease: lease(0, nil)},
		{name: "no slots", node: readyNode(func(n *harnessv1.HarnessNode) { n.Spec.Slots = 0 }), lease: lease(0, nil)},
		{name: "node-agent not Ready", node: readyNode(func(n *harnessv1.HarnessNode) { n.Status.Conditions[0].Status = metav1.ConditionFalse }), lease: lease(0, nil)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeNode("n1", tc.node, tc.lease, 40*time.Second)
			if got := v.at(now).ready; got != tc.wantReady {
				t.Errorf("ready = %v, want %v", got, tc.wantReady)
			}
			h := v.health(now)
			if h.lost != tc.wantLost || h.why != tc.wantWhy {
				t.Errorf("lost = %v (%q), want %v (%q)", h.lost, h.why, tc.wantLost, tc.wantWhy)
			}
			if h.lost == h.fresh {
				t.Errorf("lost = %v and fresh = %v: a node is exactly one", h.lost, h.fresh)
			}
			if tc.wantReady && h.lost {
				t.Error("a ready node was judged lost")
			}
		})
	}
}
