package controllers

import (
	"fmt"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestBoundSuitesMakesTheBusiestNamespaceMakeRoom: a policy's status keeps
// at most MaxPolicySuitesSpent suites in all; past it, the namespace that
// keeps the most loses its least recently charged ones, and a namespace
// with a few suites keeps them all, whoever charged last.
func TestBoundSuitesMakesTheBusiestNamespaceMakeRoom(t *testing.T) {
	fill := func(ns string, n int) harnessv1.NamespaceSpend {
		e := harnessv1.NamespaceSpend{Namespace: ns}
		for i := range n {
			e.Suites = append(e.Suites, harnessv1.SuiteSpend{Suite: fmt.Sprintf("%s-%04d", ns, i), Round: 1, Tokens: 1})
		}
		return e
	}
	// Four namespaces of a tenant that labels runs by the thousand, and a
	// small one that charges a new suite last.
	spent := []harnessv1.NamespaceSpend{fill("a", MaxSuitesSpent), fill("b", MaxSuitesSpent), fill("small", 2),
		fill("c", MaxSuitesSpent), fill("d", MaxSuitesSpent)}
	spent[2].Suites = chargeSuite(spent[2].Suites, "small-new", 1, 5)
	boundSuites(spent)
	total := 0
	for _, ns := range spent {
		total += len(ns.Suites)
	}
	if total != MaxPolicySuitesSpent {
		t.Fatalf("%d suites kept, want %d", total, MaxPolicySuitesSpent)
	}
	if got := len(spent[2].Suites); got != 3 || spent[2].Suites[2].Suite != "small-new" {
		t.Errorf("the small namespace keeps %d suites (%v), want its 3", got, spent[2].Suites)
	}
	// Each of the busiest in turn: a, b and c lose their oldest, d none.
	for i, want := range map[int]string{0: "a-0001", 1: "b-0001", 3: "c-0001", 4: "d-0000"} {
		if got := spent[i].Suites[0].Suite; got != want {
			t.Errorf("namespace %s keeps %d suites from %s, want from %s", spent[i].Namespace, len(spent[i].Suites), got, want)
		}
	}
	// Under the bound nothing moves.
	few := []harnessv1.NamespaceSpend{fill("x", 3), fill("y", 1)}
	boundSuites(few)
	if len(few[0].Suites) != 3 || len(few[1].Suites) != 1 {
		t.Errorf("under the bound: %d and %d suites", len(few[0].Suites), len(few[1].Suites))
	}
}
