//go:build linux

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// A run whose status message outgrows the schema (64 failing checks with
// long names make "64 of 64 checks failed: …" over 8 KiB; each check prints
// multi-byte text) still reaches its terminal phase on the real API server,
// its message cut and marked.
func TestAHugeStatusMessageStillEndsTheRun(t *testing.T) {
	ns := newNamespace(t, "e2e-huge-status")
	var manifest strings.Builder
	manifest.WriteString("prompt: fail every check\nlimits:\n  probeSeconds: 30\nchecks:\n")
	for i := range 64 {
		fmt.Fprintf(&manifest, "- name: %s-%02d\n  shell: \"printf '%%.0sé' $(seq 3000); exit 1\"\n", strings.Repeat("check-with-a-long-name", 5), i)
	}
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "huge-status", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": manifest.String()}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if got.Status.Verdict != harnessv1.VerdictFail || got.Status.Reason != harnessv1.ReasonChecksFailed {
		t.Errorf("verdict %s, reason %s: want Fail, ChecksFailed", got.Status.Verdict, got.Status.Reason)
	}
	if n := utf8.RuneCountInString(got.Status.Message); n > harnessv1.MaxMessageLength || !strings.HasSuffix(got.Status.Message, "[truncated]") {
		t.Errorf("status.message is %d characters and ends %q: want at most %d, marked as cut", n, got.Status.Message[max(0, len(got.Status.Message)-40):], harnessv1.MaxMessageLength)
	}
	if len(got.Status.Checks) != 64 {
		t.Errorf("%d check results, want 64", len(got.Status.Checks))
	}
	waitNoRunDirs(t)
}
