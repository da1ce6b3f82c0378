package crdschema_test

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/harnessfacts/harnessfacts/internal/crdschema"
)

func parse(t *testing.T, s string) map[string]any {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

const run = `
apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: r}
spec:
  agent: {adapter: exec, command: ["true"]}
  fixture: {inline: {files: {fixture.yaml: "prompt: p"}}}
`

func TestDefaultsLikeTheAPIServer(t *testing.T) {
	obj := parse(t, run)
	if err := crdschema.DefaultAndValidate(context.Background(), obj); err != nil {
		t.Fatalf("a valid run was refused: %v", err)
	}
	spec := obj["spec"].(map[string]any)
	if p := spec["isolation"].(map[string]any)["policy"]; p != "Required" {
		t.Errorf("isolation.policy not defaulted: %v", p)
	}
	// Limits stay unset, as on the API server: the fixture's apply.
	if limits := spec["limits"].(map[string]any); len(limits) != 0 {
		t.Errorf("limits were filled: %v", limits)
	}
}

func TestRefusesLikeTheAPIServer(t *testing.T) {
	cases := map[string]struct{ yaml, want string }{
		"CEL rule": {strings.Replace(run, "adapter: exec", "adapter: codex", 1),
			"agent.command is only allowed with agent.adapter exec"},
		"enum": {strings.Replace(run, "adapter: exec", "adapter: cursor", 1),
			`spec.agent.adapter: Unsupported value: "cursor"`},
		"unknown field": {strings.Replace(run, "agent: {", "agent: {colour: red, ", 1),
			"spec.agent.colour: Unsupported value"},
		"minimum": {run + "  limits: {episodeSeconds: 0}\n",
			"spec.limits.episodeSeconds in body should be greater than or equal to 1"},
		"unknown kind": {strings.Replace(run, "kind: HarnessRun", "kind: Pod", 1),
			`unknown apiVersion "harnessfacts.io/v1alpha1" and kind "Pod"`},
		// Rules that hold where their field is absent (ruleGuards), and
		// are compiled where it is there.
		"guarded rule, its field there": {strings.Replace(run, "agent: {adapter: exec, command: [\"true\"]}",
			"agent: {adapter: codex, credentials: [{file: ClaudeCredentials, secretKeyRef: {name: s, key: k}}]}", 1),
			"credential file ClaudeCredentials is only accepted by the claude-code adapter"},
		"guarded rule, another": {strings.Replace(run, "adapter: exec, command: [\"true\"]",
			"adapter: claude-code, providerURL: \"https://p.example/v1?api-version=1\"", 1),
			"agent.providerURL must be a base URL without a query or fragment"},
		"guarded rule, both fields there": {run + "  limits: {episodeSeconds: 5, probeSeconds: 10}\n",
			"limits.probeSeconds must not be longer than limits.episodeSeconds"},
	}
	for name, tc := range cases {
		err := crdschema.DefaultAndValidate(context.Background(), parse(t, tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, tc.want)
		}
	}
}
