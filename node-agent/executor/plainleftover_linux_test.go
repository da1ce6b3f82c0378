package executor

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// TestPlainRunLeavesNothingRunningAsItsUID: the plain fallback bounds no
// process tree. An agent's process that left the group (setsid) and the
// run dir and its environment (cd /, env -i) outlived the run as the run's
// uid, which the pool then gave the next run: it read that run's
// credential from /proc/*/environ. Whatever runs as the run's uid when it
// ends is killed before the id is given back.
func TestPlainRunLeavesNothingRunningAsItsUID(t *testing.T) {
	root := rootRunRoot(t, "hf-plain-left-")
	const uid = 60377
	ids, err := sandbox.NewIDPool(sandbox.IDRange{First: uid, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Sources: inlineSources{}, RunRoot: root, IDs: ids, InitBinary: sandboxInitBinary(t), Sandbox: sandbox.Options{Bwrap: "/nonexistent/bwrap"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	t.Cleanup(func() { _, _ = sandbox.KillUIDs(sandbox.IDRange{First: uid, Count: 1}) })
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "plain-left", Namespace: "tenant", UID: types.UID("uid-plain-left")},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec,
				Command: []string{"sh", "-c", "( cd / && exec env -i setsid sh -c 'trap \"\" TERM HUP; exec sleep 100377' & ); sleep 1; echo detached"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: nothing\nmcp:\n  transport: None\n"}}},
			Isolation: harnessv1.IsolationSpec{Policy: harnessv1.IsolationAllowFallback},
		},
		Status: harnessv1.HarnessRunStatus{Attempt: 1},
	}
	st := e.Execute(context.Background(), run).Status
	if st.Sandbox == nil || st.Sandbox.Mode != string(sandbox.ModePlain) || st.Agent == nil || !strings.Contains(st.Agent.OutputTail, "detached") {
		t.Fatalf("the run did not run its agent in the plain fallback: %s %s: %s (%+v)", st.Phase, st.Reason, st.Message, st.Sandbox)
	}
	// The kernel may take a moment to reap what was killed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processesOf(t, uid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running as the run's uid %d once the run ended: %v", uid, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processesOf lists the command lines of the processes whose real uid is uid.
func processesOf(t *testing.T, uid int) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
				out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
			}
		}
	}
	return out
}
