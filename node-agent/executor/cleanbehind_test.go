package executor

import (
	"context"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestCleanBehindIsDoneWhenWaitCleanedReturns: an executor that cleans up
// behind (the node-agent's, Options.CleanBehind) returns the outcome with
// its cleanup under way, and once WaitCleaned returns the run dir is gone,
// with the credential copy in it; one that does not has cleaned before
// Execute returns. Real bwrap, a credential planted.
func TestCleanBehindIsDoneWhenWaitCleanedReturns(t *testing.T) {
	for _, behind := range []bool{true, false} {
		root := rootRunRoot(t, "hf-behind-")
		e, err := New(Options{Sources: secretSources{}, RunRoot: root, InitBinary: "/bin/true", CleanBehind: behind})
		if err != nil {
			t.Fatal(err)
		}
		out := e.Execute(context.Background(), &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: "behind", Namespace: "tenant", UID: types.UID("uid-behind")},
			Spec: harnessv1.HarnessRunSpec{
				Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"},
					Credentials: []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "creds", Key: "token"}, Env: "TOKEN"}}},
				Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: nothing\n"}}},
				Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressNone},
			},
			Status: harnessv1.HarnessRunStatus{Attempt: 1},
		})
		if st := out.Status; st.Verdict != harnessv1.VerdictPass {
			t.Fatalf("behind %v: %s %s %s: %s", behind, st.Phase, st.Verdict, st.Reason, st.Message)
		}
		if (out.Cleaned != nil) != behind {
			t.Errorf("behind %v: the outcome's Cleaned is %v", behind, out.Cleaned)
		}
		out.WaitCleaned()
		// Nothing else ran beside it: the run dir is removed at once, not
		// left for a starting sandbox (graveyard).
		if entries, _ := os.ReadDir(root); len(entries) != 0 {
			t.Errorf("behind %v: left in the run root once cleaned: %v", behind, entries)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
