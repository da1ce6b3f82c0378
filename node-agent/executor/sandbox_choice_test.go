package executor

import (
	"context"
	"errors"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// TestRefuseFallback: a node-agent started with --refuse-fallback never runs
// an agent in the plain fallback, whatever the run's isolation policy says,
// and does not offer the plain mode in its HarnessNode.
func TestRefuseFallback(t *testing.T) {
	plain, _, err := sandbox.New(context.Background(), sandbox.PolicyAllowFallback, sandbox.Options{Bwrap: "/nonexistent/bwrap"})
	if err != nil || plain.Mode() != sandbox.ModePlain {
		t.Fatalf("the fallback runner without bwrap: %v, %v", plain, err)
	}
	noSandbox := errors.New("bwrap: not found")
	cases := []struct {
		name       string
		refuse     bool
		policy     harnessv1.IsolationPolicy
		sandboxed  bool // a sandbox works on the node
		wantMode   sandbox.Mode
		wantReason string // a failure's reason, with the flag named when refused
	}{
		{"fallback allowed and taken", false, harnessv1.IsolationAllowFallback, false, sandbox.ModePlain, ""},
		{"fallback refused by the node", true, harnessv1.IsolationAllowFallback, false, "", "--refuse-fallback"},
		{"required, no sandbox", true, harnessv1.IsolationRequired, false, "", "isolation policy is Required"},
		{"fallback asked, the sandbox works: sandboxed", true, harnessv1.IsolationAllowFallback, true, sandbox.ModeBwrap, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := &Executor{opts: Options{RefuseFallback: tc.refuse}, fallback: plain}
			if tc.sandboxed {
				e.required = bwrapStandIn{}
				e.fallback = bwrapStandIn{}
			} else {
				e.requiredErr = noSandbox
			}
			a := &attempt{e: e, run: &harnessv1.HarnessRun{Spec: harnessv1.HarnessRunSpec{Isolation: harnessv1.IsolationSpec{Policy: tc.policy}}}}
			err := a.chooseSandbox(context.Background())
			if tc.wantReason != "" {
				var f *Failure
				if !errors.As(err, &f) || f.Reason != harnessv1.ReasonSandboxUnavailable || !strings.Contains(f.Error(), tc.wantReason) {
					t.Fatalf("got %v, want SandboxUnavailable saying %q", err, tc.wantReason)
				}
				return
			}
			if err != nil || a.runner == nil || a.runner.Mode() != tc.wantMode {
				t.Fatalf("got runner %v, %v; want mode %s", a.runner, err, tc.wantMode)
			}
		})
	}

	e := &Executor{opts: Options{RefuseFallback: true, Sandbox: sandbox.Options{Bwrap: "/nonexistent/bwrap"}}}
	for _, m := range e.SandboxModes(context.Background()) {
		if m.Mode == string(sandbox.ModePlain) && (m.Available || !strings.Contains(m.Message, "--refuse-fallback")) {
			t.Errorf("the HarnessNode offers the plain mode on a node that refuses it: %+v", m)
		}
	}
}

// bwrapStandIn is a runner that says it is bwrap; chooseSandbox only picks.
type bwrapStandIn struct{ sandbox.Runner }

func (bwrapStandIn) Mode() sandbox.Mode { return sandbox.ModeBwrap }
