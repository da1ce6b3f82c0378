package controllers

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// ownRuns keeps, of the runs that name the suite as their controller, those
// the suite would have made: a suite's run names are known in advance to
// whoever can read the suite (its UID, round, agent, fixture and repeat),
// and anyone who may create HarnessRuns in the namespace may create one
// under such a name, with the suite as its owner and its labels, before the
// suite does. Its verdict (an exec adapter running `true` passes) would
// then be counted as the suite agent's. A run counts only when what decides
// what it ran — its agent, fixture, MCP, network, isolation and environment,
// all immutable — is what the plan makes for its name (with the API's
// defaults), and its cell is the plan's, never its labels (which anyone
// who may update the run can change). The others are returned by name.
func ownRuns(suite *harnessv1.HarnessSuite, plan []plannedRun, runs []*harnessv1.HarnessRun, scheme *runtime.Scheme) ([]*harnessv1.HarnessRun, []string) {
	planned := make(map[string]plannedRun, len(plan))
	for _, pr := range plan {
		planned[pr.name] = pr
	}
	own := make([]*harnessv1.HarnessRun, 0, len(runs))
	var foreign []string
	for _, run := range runs {
		pr, ok := planned[run.Name]
		if !ok {
			// Not of this round's plan: not counted either way
			// (earlier rounds' runs are deleted by their UID).
			own = append(own, run)
			continue
		}
		want, err := buildRun(suite, pr, scheme)
		if err != nil || !sameWork(&want.Spec, run) {
			foreign = append(foreign, run.Name)
			continue
		}
		own = append(own, run)
	}
	return own, foreign
}

// sameWork compares the parts of a run's spec that decide what runs and
// how it is judged with want, each with the defaults the API server fills
// in. Of a run from the controller's cache, what the cache does not keep
// (the agent's command line, the prompt, inline files) is compared by its
// digest.
func sameWork(want *harnessv1.HarnessRunSpec, run *harnessv1.HarnessRun) bool {
	got, ok := run.Annotations[CachedRunWorkAnnotation]
	if !ok {
		got = uncachedWork(&run.Spec) // read whole
	}
	if got != uncachedWork(want) {
		return false
	}
	w, g := want.DeepCopy(), run.Spec.DeepCopy()
	for _, s := range []*harnessv1.HarnessRunSpec{w, g} {
		stripUncached(s)
		if s.Network.Egress == "" {
			s.Network.Egress = harnessv1.EgressProviderOnly
		}
		if s.Network.ProviderTools == "" {
			s.Network.ProviderTools = harnessv1.ProviderToolsRefused
		}
		if s.Isolation.Policy == "" {
			s.Isolation.Policy = harnessv1.IsolationRequired
		}
	}
	return equality.Semantic.DeepEqual(w.Agent, g.Agent) &&
		equality.Semantic.DeepEqual(w.Fixture, g.Fixture) &&
		equality.Semantic.DeepEqual(w.MCP, g.MCP) &&
		equality.Semantic.DeepEqual(w.Network, g.Network) &&
		equality.Semantic.DeepEqual(w.Isolation, g.Isolation) &&
		equality.Semantic.DeepEqual(w.Environment, g.Environment)
}

// foreignRunsMessage says why the suite cannot finish while such runs hold
// its runs' names.
func foreignRunsMessage(names []string) string {
	shown := names
	if len(shown) > 5 {
		shown = shown[:5]
	}
	more := ""
	if len(names) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(names)-len(shown))
	}
	return fmt.Sprintf("%d run(s) under the names of this round's runs, with the suite as their owner, were not made by the suite (their agent, fixture, MCP, network, isolation or environment differ from the suite's): %s%s; they are not counted, and the suite cannot create its own under those names until they are deleted",
		len(names), strings.Join(shown, ", "), more)
}
