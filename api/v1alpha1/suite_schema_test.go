package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// validSuite is a small suite a user would write: two agents over the
// fixtures a label selects, three times each.
const validSuite = `
apiVersion: harnessfacts.io/v1alpha1
kind: HarnessSuite
metadata:
  namespace: default
spec:
  agents:
  - name: codex
    agent:
      adapter: codex
      model: gpt-5
  - name: script
    agent:
      adapter: exec
      command: [sh, ../fixture/agent.sh]
  fixtures:
    selector:
      matchLabels:
        suite: smoke
  repeats: 3
`

func suite(t *testing.T, name string, edit func(obj map[string]any)) *unstructured.Unstructured {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(validSuite), &obj); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(obj)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetName(name)
	return u
}

func TestRejectsBadSuites(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"no agents", func(o map[string]any) { set(o, "spec.agents", []any{}) },
			"spec.agents: Invalid value: 0: spec.agents in body should have at least 1 items"},
		{"agents missing", func(o map[string]any) { del(o, "spec.agents") },
			"spec.agents: Required value"},
		{"no fixtures", func(o map[string]any) { set(o, "spec.fixtures", map[string]any{}) },
			"set exactly one of fixtures.selector and fixtures.names"},
		{"empty fixture names", func(o map[string]any) { set(o, "spec.fixtures", map[string]any{"names": []any{}}) },
			"spec.fixtures.names in body should have at least 1 items"},
		{"selector and names", func(o map[string]any) { set(o, "spec.fixtures.names", []any{"fixture-hello"}) },
			"set exactly one of fixtures.selector and fixtures.names"},
		{"empty selector", func(o map[string]any) { set(o, "spec.fixtures.selector", map[string]any{}) },
			"fixtures.selector must not be empty"},
		{"unknown adapter", func(o map[string]any) {
			set(o, "spec.agents", []any{map[string]any{"name": "cursor", "agent": map[string]any{"adapter": "cursor"}}})
		}, `spec.agents[0].agent.adapter: Unsupported value: "cursor"`},
		{"exec without command", func(o map[string]any) {
			set(o, "spec.agents", []any{map[string]any{"name": "x", "agent": map[string]any{"adapter": "exec"}}})
		}, "agent.command is required when agent.adapter is exec"},
		{"agent without a name", func(o map[string]any) {
			set(o, "spec.agents", []any{map[string]any{"agent": map[string]any{"adapter": "codex"}}})
		}, "spec.agents[0].name: Required value"},
		{"agent name not a label", func(o map[string]any) {
			set(o, "spec.agents", []any{map[string]any{"name": "Codex 5", "agent": map[string]any{"adapter": "codex"}}})
		}, "spec.agents[0].name in body should match"},
		{"same agent name twice", func(o map[string]any) {
			a := map[string]any{"name": "codex", "agent": map[string]any{"adapter": "codex"}}
			set(o, "spec.agents", []any{a, a})
		}, `spec.agents[1]: Duplicate value: {"name":"codex"}`},
		{"parallelism 0", func(o map[string]any) { set(o, "spec.parallelism", int64(0)) },
			"spec.parallelism: Invalid value: 0: spec.parallelism in body should be greater than or equal to 1"},
		{"repeats 0", func(o map[string]any) { set(o, "spec.repeats", int64(0)) },
			"spec.repeats in body should be greater than or equal to 1"},
		{"too many runs", func(o map[string]any) {
			set(o, "spec.fixtures", map[string]any{"names": []any{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}})
			set(o, "spec.repeats", int64(1000))
			a := []any{}
			for _, n := range []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10"} {
				a = append(a, map[string]any{"name": n, "agent": map[string]any{"adapter": "codex"}})
			}
			set(o, "spec.agents", a)
		}, "a round may have at most 100000 runs"},
		{"template with a bad limit", func(o map[string]any) { set(o, "spec.template.limits.episodeSeconds", int64(0)) },
			"spec.template.limits.episodeSeconds in body should be greater than or equal to 1"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := suite(t, "bad-suite-"+strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"), tc.edit)
			err := k8s.Create(ctx, obj)
			if err == nil {
				_ = k8s.Delete(ctx, obj)
				t.Fatalf("the API server accepted the suite; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestSuiteDefaults(t *testing.T) {
	ctx := context.Background()
	obj := suite(t, "defaults", func(o map[string]any) {
		del(o, "spec.repeats")
		set(o, "spec.revision", "abc123")
	})
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	got := &harnessv1.HarnessSuite{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	want := struct {
		Repeats, Parallelism int32
		Revision             string
	}{1, 10, "abc123"}
	gotv := struct {
		Repeats, Parallelism int32
		Revision             string
	}{got.Spec.Repeats, got.Spec.Parallelism, got.Spec.Revision.String()}
	if diff := cmp.Diff(want, gotv); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}

	// A numeric revision is accepted as well, and shows as its decimal.
	num := suite(t, "numeric-revision", func(o map[string]any) { set(o, "spec.revision", int64(7)) })
	if err := k8s.Create(ctx, num); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, num) })
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(num), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Revision.String() != "7" {
		t.Errorf("revision %q, want 7", got.Spec.Revision.String())
	}
}

// TestSuiteMatrixChangesWithTheRevision: a round runs one matrix, so the
// agents, fixtures, repeats and template change only with the revision;
// parallelism and suspend change freely.
func TestSuiteMatrixChangesWithTheRevision(t *testing.T) {
	ctx := context.Background()
	obj := suite(t, "one-matrix", func(o map[string]any) { set(o, "spec.revision", "a") })
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	update := func(edit func(o map[string]any)) error {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(obj.GroupVersionKind())
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			t.Fatal(err)
		}
		edit(cur.Object)
		return k8s.Update(ctx, cur)
	}
	const msg = "spec.agents, spec.fixtures, spec.repeats and spec.template change only together with spec.revision"
	for name, edit := range map[string]func(map[string]any){
		"agents": func(o map[string]any) {
			set(o, "spec.agents", []any{map[string]any{"name": "x", "agent": map[string]any{"adapter": "gemini"}}})
		},
		"fixtures": func(o map[string]any) { set(o, "spec.fixtures.selector.matchLabels.suite", "other") },
		"repeats":  func(o map[string]any) { set(o, "spec.repeats", int64(9)) },
		"template": func(o map[string]any) { set(o, "spec.template.retries", int64(2)) },
	} {
		if err := update(edit); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("changing %s alone: error %v, want %q", name, err, msg)
		}
	}
	for name, edit := range map[string]func(map[string]any){
		"parallelism and suspend": func(o map[string]any) { set(o, "spec.parallelism", int64(3)); set(o, "spec.suspend", true) },
		"agents with the revision": func(o map[string]any) {
			set(o, "spec.revision", "b")
			set(o, "spec.agents", []any{map[string]any{"name": "x", "agent": map[string]any{"adapter": "gemini"}}})
		},
		"repeats with a numeric revision": func(o map[string]any) { set(o, "spec.revision", int64(3)); set(o, "spec.repeats", int64(2)) },
	} {
		if err := update(edit); err != nil {
			t.Errorf("changing %s: %v", name, err)
		}
	}
}
