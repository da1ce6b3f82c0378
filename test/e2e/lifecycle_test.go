//go:build linux

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// startNodeAgentOn starts the node-agent binary for node, with one slot, its
// own run root and the label harnessfacts.io/e2e=node (so that only runs
// selecting it land there), and deletes its HarnessNode after the test. It
// returns the process and a channel that gets its exit once (and is then
// given nil again, so that the cleanup never blocks).
func startNodeAgentOn(t *testing.T, node, runs string, extra ...string) (*exec.Cmd, chan error) {
	t.Helper()
	// Registered first, so it runs after the node-agent is killed: a
	// HarnessNode left with a fresh Lease would take later tests' runs.
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	controllerFlags, err := secretPath.Flags(context.Background(), node, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"node-agent", "--kubeconfig", kubeconfig, "--node-name", node,
		"--lease-namespace", leaseNS, "--lease-duration", "8s", "--slots", "1", "--run-root", runs,
		"--node-labels", "harnessfacts.io/e2e=" + node, "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		// The host's fs.file-max stays as it is (TestNodeAgentRaisesTheFileTable
		// turns this off, and gives the table back after).
		"--protect-kernel-defaults"}, extra...)
	cmd := exec.Command(nodeAgentBinary, append(args, controllerFlags...)...)
	logs := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		exited <- nil
		if t.Failed() {
			t.Logf("node-agent %s logs:\n%s", node, logs.String())
		}
	})
	return cmd, exited
}

// sleepingRun is a run for node whose agent sleeps for two minutes; marker
// names its process.
func sleepingRun(ns, name, node, marker string) *harnessv1.HarnessRun {
	return &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec,
				Command: []string{"sh", "-c", "sleep 120; : " + marker}},
			Fixture:      harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: wait\n"}}},
			NodeSelector: map[string]string{"harnessfacts.io/e2e": node},
		},
	}
}

// createAndWaitAgent creates run and waits until it is Running with its
// agent's process (named by marker) alive.
func createAndWaitAgent(t *testing.T, run *harnessv1.HarnessRun, marker string) types.NamespacedName {
	t.Helper()
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(run)
	waitFor(t, time.Minute, "the agent running", func() bool {
		got := &harnessv1.HarnessRun{}
		return k8s.Get(context.Background(), key, got) == nil && got.Status.Phase == harnessv1.RunRunning && len(processesWith(marker)) > 0
	})
	return key
}

// TestDeletedHarnessNodeIsRegisteredAgain: an operator deletes the
// HarnessNode of a node whose node-agent runs an attempt (`kubectl delete
// hfnode`). The run ends NodeLost, its agent is stopped and its run dir
// removed; the node-agent, alive, registers the HarnessNode again at its
// next heartbeat (every 2s here) and the node takes the next run.
func TestDeletedHarnessNodeIsRegisteredAgain(t *testing.T) {
	ns := newNamespace(t, "e2e-hnode-again")
	const node = "hnode-again-node"
	runs := filepath.Join(openDir(t), "runs")
	startNodeAgentOn(t, node, runs)
	const marker = "harnessfacts-e2e-hnode-again"
	key := createAndWaitAgent(t, sleepingRun(ns, "on-deleted-node", node, marker), marker)
	first := &harnessv1.HarnessNode{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, first); err != nil {
		t.Fatal(err)
	}

	if err := k8s.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	deletedAt := time.Now()
	st := waitTerminal(t, key).Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonNodeLost {
		t.Errorf("the run on the deleted HarnessNode ended %s/%s: %s; want Failed/NodeLost", st.Phase, st.Reason, st.Message)
	}
	waitFor(t, 15*time.Second, "the agent stopped", func() bool { return len(processesWith(marker)) == 0 })
	waitFor(t, 15*time.Second, "the run dir removed", func() bool { e, _ := os.ReadDir(runs); return len(e) == 0 })

	// A heartbeat is every 2s; 15s leaves room for a loaded machine. The
	// node-agent creates the HarnessNode, then writes its status (the
	// labels) in a second request: the test waits for both.
	again := &harnessv1.HarnessNode{}
	waitFor(t, 15*time.Second, "the HarnessNode registered again, its status written", func() bool {
		err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, again)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil && again.Status.Labels != nil
	})
	t.Logf("the HarnessNode came back %v after its deletion", time.Since(deletedAt).Round(100*time.Millisecond))
	if again.UID == first.UID || again.Spec.Slots != 1 || again.Status.Labels["harnessfacts.io/e2e"] != node {
		t.Errorf("the HarnessNode registered again: uid %s (was %s), slots %d, labels %v; want a new one with 1 slot and its labels",
			again.UID, first.UID, again.Spec.Slots, again.Status.Labels)
	}

	next := sleepingRun(ns, "after-delete", node, marker+"-next")
	next.Spec.Agent.Command = []string{"true"}
	if err := k8s.Create(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	if st := waitTerminal(t, client.ObjectKeyFromObject(next)).Status; st.Phase != harnessv1.RunSucceeded || st.NodeName != node {
		t.Errorf("the next run on the node registered again ended %s/%s on %q: %s; want Succeeded on %s",
			st.Phase, st.Reason, st.NodeName, st.Message, node)
	}
}

// TestCancelWhileDrainingStopsTheAgent: the node-agent gets SIGTERM (its
// pod replaced by a helm upgrade) while an agent runs, and the run is
// cancelled (`harnessfacts cancel`) while it drains. The draining
// node-agent, whose claim reconciler has stopped, still sees the cancel
// within about a second: it stops the agent and the run ends
// Failed/Cancelled with no failure class and its evidence written, as a
// cancel outside a drain does, long before the drain would hand it back
// (12s here).
func TestCancelWhileDrainingStopsTheAgent(t *testing.T) {
	ns := newNamespace(t, "e2e-drain-cancel")
	const node = "drain-cancel-node"
	runs := filepath.Join(openDir(t), "runs")
	// 18s: attempts may go on for 12s, then those left are handed back.
	agent, exited := startNodeAgentOn(t, node, runs, "--shutdown-grace", "18s")
	const marker = "harnessfacts-e2e-drain-cancel"
	key := createAndWaitAgent(t, sleepingRun(ns, "cancelled-while-draining", node, marker), marker)

	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the HarnessNode to say Draining", func() bool {
		hn := &harnessv1.HarnessNode{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, hn); err != nil {
			return false
		}
		c := meta.FindStatusCondition(hn.Status.Conditions, harnessv1.ConditionNodeReady)
		return c != nil && c.Reason == harnessv1.ReasonDraining
	})
	t.Logf("harnessfacts cancel: %s", cli(t, ns, false, "cancel", key.Name))
	cancelledAt := time.Now()
	waitFor(t, 5*time.Second, "the cancelled agent to be stopped", func() bool { return len(processesWith(marker)) == 0 })
	t.Logf("the agent was stopped %v after the cancel", time.Since(cancelledAt).Round(100*time.Millisecond))

	st := waitTerminal(t, key).Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonCancelled || st.FailureClass != "" || st.Attempt != 1 {
		t.Errorf("a run cancelled while its node-agent drained ended %s/%s class %q attempt %d: %s; want Failed/Cancelled, no failure class, attempt 1",
			st.Phase, st.Reason, st.FailureClass, st.Attempt, st.Message)
	}
	if st.Evidence == nil || st.Evidence.ConfigMapName == "" {
		t.Errorf("the cancelled run has no evidence: %+v", st.Evidence)
	}
	select {
	case <-exited:
		exited <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("the node-agent did not exit after SIGTERM")
	}
	if elapsed := time.Since(cancelledAt); elapsed > 10*time.Second {
		t.Errorf("the node-agent exited %v after the cancel: its drain waited for the hand-back", elapsed)
	}
	if entries, _ := os.ReadDir(runs); len(entries) > 0 {
		t.Errorf("run dirs left: %v", entries)
	}
}
