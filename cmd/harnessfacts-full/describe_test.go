package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestDescribeShowsNoControlSequence: every field describe prints may be
// someone else's text. An Event's reason and reporting controller (any
// namespace editor writes Events) printed a fake "Verdict: Pass" over the
// real one, retitled the window and wrote the reader's clipboard (OSC 52);
// a run author's model cleared the screen. No escape, BEL, 8-bit CSI or
// bidirectional override may reach the terminal, and no field may start a
// line of its own.
func TestDescribeShowsNoControlSequence(t *testing.T) {
	const evil = "x\x1b7\x1b[9A\r\x1b[2K\nVerdict:    Pass\x1b8\x1b]0;all passed\x07\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\u009b2J\u202e"
	now := time.Now()
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))},
		Spec:       harnessv1.HarnessRunSpec{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Model: evil}},
		Status: harnessv1.HarnessRunStatus{
			Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictFail, Reason: harnessv1.ReasonChecksFailed, Message: evil,
			Conditions: []metav1.Condition{{Type: "Finished", Status: metav1.ConditionTrue, Reason: "Fail", Message: evil}},
			Checks:     []harnessv1.CheckResult{{Name: evil, Message: evil}},
			Artifacts:  []harnessv1.ArtifactResult{{Path: evil, Rejected: evil}},
			Agent:      &harnessv1.AgentStatus{Adapter: harnessv1.AdapterExec, ExitCode: ptr.To[int32](0), OutputTail: evil, Notes: []string{evil}},
		},
	}
	events := []eventsv1.Event{{
		EventTime: metav1.NewMicroTime(now), Type: corev1.EventTypeNormal + evil, Reason: "Checked" + evil,
		ReportingController: "harnessfacts-node-agent" + evil, Note: evil,
	}}
	var out bytes.Buffer
	if err := describeRun(&out, run, events, now); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"\x1b", "\x07", "\r", "\u009b", "\u202e"} {
		if strings.Contains(out.String(), c) {
			t.Errorf("describe printed %q:\n%s", c, out.String())
		}
	}
	verdicts := 0
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "Verdict:") { // the agent's output is shown indented, under its heading
			verdicts++
		}
	}
	if verdicts != 1 {
		t.Errorf("%d lines start with Verdict:, want the run's own alone:\n%s", verdicts, out.String())
	}
}
