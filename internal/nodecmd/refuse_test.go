package nodecmd

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// A node where no sandbox passes preflight (here: a bwrap that does not
// exist) refuses: the error says why, and the HarnessNode (on a real API server) says
// the same in Ready=False, reason SandboxUnavailable. The real-node test (test/node)
// shows it through a real kubelet, in a user-namespaced pod on cgroup v1.
func TestRefuseWithoutSandbox(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	err = refuseWithoutSandbox(context.Background(), c, "node-a", 3, sandbox.Options{Bwrap: "/nonexistent/bwrap"})
	if err == nil || !strings.Contains(err.Error(), "refuses to run agents on node node-a") || !strings.Contains(err.Error(), "bwrap") {
		t.Fatalf("refuseWithoutSandbox: %v", err)
	}
	hn := &harnessv1.HarnessNode{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "node-a"}, hn); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(hn.Status.Conditions, harnessv1.ConditionNodeReady)
	if ready == nil || ready.Status != "False" || ready.Reason != harnessv1.ReasonSandboxUnavailable || ready.Message != err.Error() {
		t.Fatalf("HarnessNode Ready condition %+v", ready)
	}
	if hn.Spec.Slots != 3 || len(hn.Status.SandboxModes) == 0 {
		t.Fatalf("HarnessNode %+v", hn)
	}
}
