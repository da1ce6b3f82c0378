//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	nodeagent "github.com/harnessfacts/harnessfacts/node-agent"
)

// TestNodeAgentDrainHandsBack: the node-agent binary gets SIGTERM (its pod
// replaced) while a run with no retries runs an agent longer than its
// shutdown grace. It stops claiming (its HarnessNode says Draining), stops
// the agent, removes the run dir with the credential copy in it, hands the
// attempt back without a verdict and exits; the controller schedules the
// run again without using a retry, and the next node-agent on the node
// runs attempt 2 to Pass. Each attempt started once, and never two at once.
func TestNodeAgentDrainHandsBack(t *testing.T) {
	ns := newNamespace(t, "e2e-drain")
	const node = "drain-node"
	runs := filepath.Join(openDir(t), "runs")
	// 6s: attempts may finish for 4s, then those left are handed back.
	start := func() (*exec.Cmd, chan error) { return startNodeAgentOn(t, node, runs, "--shutdown-grace", "6s") }
	first, firstExited := start()

	if err := k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keys", Namespace: ns},
		Data: map[string][]byte{"api": []byte("sk-drain-Zq81xV0pLmN7")}}); err != nil {
		t.Fatal(err)
	}
	const marker = "harnessfacts-e2e-drain-marker"
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "drained", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec,
				// Longer than the 4s the drain lets it run; passes when left alone.
				Command:     []string{"sh", "-c", "sleep 10; : " + marker + "; echo done > done.txt"},
				Credentials: []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "keys", Key: "api"}, Env: "DRAIN_KEY"}}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: wait\nartifacts: [done.txt]\n"}}},
			NodeSelector: map[string]string{"harnessfacts.io/e2e": node},
			// spec.retries 0: a hand-back that used a retry would fail it.
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(run)
	waitFor(t, time.Minute, "the agent running", func() bool {
		got := &harnessv1.HarnessRun{}
		return k8s.Get(context.Background(), key, got) == nil && got.Status.Phase == harnessv1.RunRunning && len(processesWith(marker)) > 0
	})

	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-firstExited:
		firstExited <- err
		if err != nil {
			t.Errorf("the drained node-agent exited with %v, want 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the node-agent did not exit after SIGTERM")
	}
	// What the drain left: the agent gone, no run dir (nor the credential
	// copy in it), the node Draining, the run waiting for attempt 2 with
	// no verdict and its retries untouched.
	if pids := processesWith(marker); len(pids) > 0 {
		t.Errorf("the handed-back attempt's agent survived the node-agent: %v", pids)
	}
	if entries, _ := os.ReadDir(runs); len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the handed-back attempt left %v in the run root", names)
	}
	hn := &harnessv1.HarnessNode{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, hn); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(hn.Status.Conditions, harnessv1.ConditionNodeReady); c == nil || c.Reason != harnessv1.ReasonDraining {
		t.Errorf("the drained node's Ready condition is %+v, want False, Draining", c)
	}
	waitFor(t, 30*time.Second, "the run handed back", func() bool {
		got := &harnessv1.HarnessRun{}
		return k8s.Get(context.Background(), key, got) == nil && got.Status.HandedBack == 1
	})
	got := &harnessv1.HarnessRun{}
	if err := k8s.Get(context.Background(), key, got); err != nil {
		t.Fatal(err)
	}
	// Pending (its reason soon Unschedulable: the only node it may use
	// drains) until the next node-agent registers the node again.
	if got.Status.Phase != harnessv1.RunPending || got.Status.Attempt != 2 || got.Status.Verdict != "" {
		t.Fatalf("after the hand-back: phase %s attempt %d verdict %q reason %s: %s; want Pending, attempt 2, no verdict",
			got.Status.Phase, got.Status.Attempt, got.Status.Verdict, got.Status.Reason, got.Status.Message)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: nodeagent.EvidenceName(&harnessv1.HarnessRun{
		ObjectMeta: run.ObjectMeta, Status: harnessv1.HarnessRunStatus{Attempt: 1}})}, cm); err == nil {
		t.Errorf("the handed-back attempt 1 has evidence %s", cm.Name)
	}

	start() // the DaemonSet's new pod
	final := waitTerminal(t, key)
	st := final.Status
	if st.Phase != harnessv1.RunSucceeded || st.Verdict != harnessv1.VerdictPass || st.Attempt != 2 || st.HandedBack != 1 {
		t.Fatalf("the handed-back run: %s %q attempt %d handedBack %d reason %s: %s; want Succeeded, Pass, attempt 2, handedBack 1",
			st.Phase, st.Verdict, st.Attempt, st.HandedBack, st.Reason, st.Message)
	}
	events := eventsv1.EventList{Items: testenv.FinishedRunEvents(t, k8s, final)}
	var seen []string
	for _, e := range events.Items {
		if e.Regarding.UID == got.UID {
			seen = append(seen, e.Reason+":"+e.Action)
		}
	}
	all := strings.Join(seen, ",")
	// The node-agent's own HandBack Event is sent as it exits and may be
	// lost with it; the controller's Reschedule is the record.
	if strings.Count(all, ":Start") != 2 || !strings.Contains(all, "HandedBack:Reschedule") || strings.Contains(all, "Retrying") {
		t.Errorf("events %v: want two starts and the controller's reschedule, no retry", seen)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
