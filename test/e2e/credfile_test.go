//go:build linux

package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// A login file placed as the CLI's own (Codex's CODEX_HOME/auth.json, the
// CodexAuth credential file), whose refresh token the agent prints on its
// own as `jq -r .tokens.refresh_token` does, to stdout, stderr and an
// artifact: the token reaches neither the output tail, status, Events nor
// the evidence. The agent is a hostile stand-in for Codex's CLI, since only
// the codex adapter places that file.
func TestALoginFilesRefreshTokenPrintedAloneIsRedacted(t *testing.T) {
	ns := newNamespace(t, "e2e-login-file")
	const refresh = "rt-loginFile-Vb5Tq2Zr8Kd3"
	authJSON := `{"OPENAI_API_KEY":null,"tokens":{"id_token":"idt-Lx4Pw9Hs2Mq7","access_token":"at-Fn6Yc1Jr8Gz3","refresh_token":"` + refresh + `","account_id":"acct-8c21d0"},"last_refresh":"2026-11-30T10:00:00Z"}`
	if err := k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "codex-login", Namespace: ns},
		Data: map[string][]byte{"auth.json": []byte(authJSON)}}); err != nil {
		t.Fatal(err)
	}
	agent := `f="$CODEX_HOME/auth.json"; test -f "$f" || { echo "no $f"; exit 3; }
echo "refresh: $(jq -r .tokens.refresh_token "$f")"
jq -r .tokens.refresh_token "$f" > token.txt
jq -r .tokens.access_token "$f" >&2
exit 4`
	labels := map[string]string{"harnessfacts.io/e2e": "login-file"}
	startBoundedNodeAgent(t, "login-file-node", labels, "--agent-clis", hostileCLI(t, "codex", "codex-cli 0.171.0", agent))
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "login-file", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex,
				Credentials: []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "codex-login", Key: "auth.json"}, File: harnessv1.CredentialFileCodexAuth}}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: print the refresh token\nartifacts: [token.txt]\n"}}},
			NodeSelector: labels,
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if got.Status.Agent == nil || got.Status.Agent.ExitCode == nil || *got.Status.Agent.ExitCode != 4 {
		t.Fatalf("the agent did not run as scripted: %+v %s", got.Status.Agent, got.Status.Message)
	}
	if !strings.Contains(got.Status.Agent.OutputTail, "refresh: [REDACTED") {
		t.Errorf("the output tail does not show the redacted refresh token:\n%s", got.Status.Agent.OutputTail)
	}
	if a := got.Status.Artifacts; len(a) != 1 || a[0].Rejected != "" || a[0].Size == 0 {
		t.Errorf("artifacts %+v, want token.txt collected", a)
	}
	statusYAML, _ := yamlOf(got.Status)
	haystacks := map[string]string{"status": statusYAML}
	events := eventsv1.EventList{Items: testenv.FinishedRunEvents(t, k8s, got)}
	for _, e := range events.Items {
		haystacks["Event "+e.Reason] += e.Note + "\n"
	}
	if got.Status.Evidence == nil {
		t.Fatalf("no evidence: %s", got.Status.Message)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: got.Status.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	for k, v := range cm.Data {
		haystacks["evidence "+k] = v
	}
	for k, v := range cm.BinaryData {
		haystacks["evidence "+k] = string(v)
	}
	for where, h := range haystacks {
		for _, f := range []string{refresh, "at-Fn6Yc1Jr8Gz3", "Vb5Tq2Zr8Kd3"} {
			if strings.Contains(h, f) {
				t.Errorf("a field of the login file (%q) reached %s:\n%s", f, where, h)
			}
		}
	}
}
