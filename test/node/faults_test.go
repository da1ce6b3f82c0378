//go:build node

package node

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func sleeperRun(name string, seconds string, retries int) string {
	return `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: ` + name + `, namespace: default}
spec:
  retries: ` + itoa(retries) + `
  agent:
    adapter: exec
    command: [sh, -c, "sleep ` + seconds + `; echo done > done.txt"]
  fixture:
    inline:
      files:
        fixture.yaml: "prompt: wait\nartifacts: [done.txt]\n"
  limits: {episodeSeconds: 120, probeSeconds: 30}
`
}

func itoa(i int) string { return strconv.Itoa(i) }

func waitRunning(t *testing.T, name string) *harnessv1.HarnessRun {
	t.Helper()
	var run *harnessv1.HarnessRun
	eventually(t, 2*time.Minute, name+" Running", func() (bool, string) {
		run = getRun(t, name)
		return run.Status.Phase == harnessv1.RunRunning, string(run.Status.Phase) + " " + run.Status.Message
	})
	return run
}

// The node-agent pod is killed while its run's agent runs: the agent dies
// with it (bwrap --die-with-parent), the DaemonSet's new pod reports the
// orphaned attempt, the controller retries it once (spec.retries: 1) and
// attempt 2 passes; attempt 1 is never executed again, and the new pod
// removed the old attempt's run dir and cgroup.
func faultDeletePod(t *testing.T) {
	applyRun(t, sleeperRun("killed", "20", 1))
	waitRunning(t, "killed")
	pod, uid := nodeAgentPod(t)
	time.Sleep(3 * time.Second) // the agent is inside bwrap now
	k(t, "delete", "pod", "-n", ns, pod, "--grace-period=0", "--force", "--wait=false")
	eventually(t, 3*time.Minute, "a new node-agent pod", func() (bool, string) {
		out, _ := kubectlErr("get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=node-agent", "-o", "jsonpath={range .items[*]}{.metadata.uid}={.status.phase} {end}")
		for _, f := range strings.Fields(out) {
			if u, phase, _ := strings.Cut(f, "="); u != uid && phase == "Running" {
				return true, out
			}
		}
		return false, out
	})
	run := waitRun(t, "killed", 4*time.Minute)
	if run.Status.Verdict != harnessv1.VerdictPass || run.Status.Attempt != 2 {
		t.Fatalf("killed: verdict %s attempt %d reason %s: %s", run.Status.Verdict, run.Status.Attempt, run.Status.Reason, run.Status.Message)
	}
	requirePass(t, run)
	// Attempt 1 ended for one of the two reasons the protocol has for a
	// node-agent that vanished mid-attempt, and was retried once; each
	// attempt started once. Which reason depends on a race the protocol
	// allows: the new pod reports the orphaned attempt (NodeAgentRestarted)
	// if it starts before the old pod's Lease expires, else the controller
	// sees the Lease expire first (NodeLost).
	node := nodeEnv["HARNESSFACTS_NODE_NAME"]
	ev := k(t, "get", "events", "-n", "default", "--field-selector", "involvedObject.name=killed,involvedObject.uid="+string(run.UID), "-o", "jsonpath={range .items[*]}{.reason}:{.action}:{.message}|{end}")
	restarted := strings.Contains(ev, "Retrying:Retry:the node-agent on "+node+" restarted during the attempt")
	lost := strings.Contains(ev, "Retrying:Retry:node "+node+" was lost: its heartbeat Lease") && strings.Contains(ev, "expired")
	if strings.Count(ev, ":Start:") != 2 || strings.Count(ev, "Retrying:Retry:") != 1 || restarted == lost {
		t.Fatalf("killed: events %q, want two starts (one per attempt) and one retry, because the node-agent restarted or its Lease expired", ev)
	}
	t.Logf("killed: %s", ev)
	waitRollout(t)
	eventually(t, time.Minute, "the old attempt's leftovers removed", func() (bool, string) {
		left := hostLeftovers(t)
		// the running node-agent itself is expected
		var other []string
		for _, l := range left {
			if !strings.Contains(l, "harnessfacts-node-agent node-agent") {
				other = append(other, l)
			}
		}
		return len(other) == 0, strings.Join(other, "; ")
	})
}

// A helm upgrade that changes the node-agent's pod template replaces the
// pod while two runs execute, neither with a retry: the old pod stops
// claiming, lets the 10-second run finish as attempt 1, hands back the one
// longer than its shutdown grace (70 s; 50 s of grace) once the 35 s it may
// run are up, and exits within its grace period; the controller schedules
// the handed-back run again without using a retry, and it passes as
// attempt 2 on the new pod. The CRDs are upgraded in place, keeping every
// run.
func faultUpgrade(t *testing.T) {
	uids := map[string]types.UID{}
	for _, n := range []string{"harnessruns.harnessfacts.io", "harnessnodes.harnessfacts.io", "harnesssuites.harnessfacts.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: n}, crd); err != nil {
			t.Fatal(err)
		}
		uids[n] = crd.UID
	}
	applyRun(t, sleeperRun("upgraded", "10", 0))
	applyRun(t, sleeperRun("handed-back", "70", 0))
	waitRunning(t, "upgraded")
	waitRunning(t, "handed-back")
	oldPod, _ := nodeAgentPod(t)
	start := time.Now()
	install(t, true, map[string]any{"podAnnotations": map[string]string{"harnessfacts.io/test-upgrade": time.Now().Format(time.RFC3339Nano)}})
	out, _ := kubectlErr("get", "pod", "-n", ns, oldPod, "-o", "name")
	if strings.TrimSpace(out) != "" {
		t.Fatalf("the old node-agent pod %s still exists after the upgrade", oldPod)
	}
	t.Logf("upgrade replaced the node-agent pod in %s", time.Since(start).Round(time.Second))
	run := waitRun(t, "upgraded", 3*time.Minute)
	if run.Status.Verdict != harnessv1.VerdictPass || run.Status.Attempt != 1 {
		t.Fatalf("upgraded: verdict %s attempt %d reason %s: %s", run.Status.Verdict, run.Status.Attempt, run.Status.Reason, run.Status.Message)
	}
	// The long run: handed back (once per node-agent pod replaced: once,
	// unless the upgrade replaced it twice), each attempt started once,
	// no retry used, and passed on the new pod.
	long := waitRun(t, "handed-back", 5*time.Minute)
	ev := k(t, "get", "events", "-n", "default", "--field-selector", "involvedObject.name=handed-back,involvedObject.uid="+string(long.UID),
		"-o", "jsonpath={range .items[*]}{.reason}:{.action}:{.message}|{end}")
	t.Logf("handed-back: attempt %d, handedBack %d: %s", long.Status.Attempt, long.Status.HandedBack, ev)
	if long.Status.Verdict != harnessv1.VerdictPass || long.Status.HandedBack < 1 || long.Status.Attempt != long.Status.HandedBack+1 {
		t.Fatalf("handed-back: verdict %s attempt %d handedBack %d reason %s: %s; want Pass on attempt handedBack+1",
			long.Status.Verdict, long.Status.Attempt, long.Status.HandedBack, long.Status.Reason, long.Status.Message)
	}
	requirePass(t, long)
	// The node-agent's own HandBack Event is sent as it exits and may be
	// lost with it; the controller's Reschedule Event and the status are
	// the record.
	n := int(long.Status.HandedBack)
	if strings.Count(ev, ":Start:") != n+1 || strings.Count(ev, "HandedBack:Reschedule:") != n ||
		strings.Contains(ev, "Retrying") || strings.Contains(ev, "NodeAgentRestarted") {
		t.Fatalf("handed-back: events %q; want %d starts and %d reschedules by the controller after hand-backs, no retry", ev, n+1, n)
	}
	for n, uid := range uids {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: n}, crd); err != nil {
			t.Fatal(err)
		}
		if crd.UID != uid {
			t.Fatalf("CRD %s was replaced (uid %s -> %s), not upgraded in place", n, uid, crd.UID)
		}
	}
	getRun(t, "hello-exec") // runs from before the upgrade are still there
}
