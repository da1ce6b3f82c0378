package adapters

import (
	"slices"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func TestOracleRunsTheFixturesSolution(t *testing.T) {
	inv, err := Oracle{}.Prepare(Input{
		Agent:       harnessv1.AgentSpec{Adapter: harnessv1.AdapterOracle, ExtraArgs: []string{"--fast"}},
		Prompt:      "fix it",
		Solution:    "/run/x/fixture/solution/solve.sh",
		SolutionEnv: map[string]string{"B": "2", "A": "1"},
		Credentials: []Credential{{Env: "TOKEN", Value: []byte("s3cret")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/run/x/fixture/solution/solve.sh", "--fast"}; !slices.Equal(inv.Argv, want) {
		t.Errorf("argv = %q, want %q", inv.Argv, want)
	}
	for _, want := range []string{"HARNESSFACTS_PROMPT=fix it", "A=1", "B=2", "TOKEN=s3cret"} {
		if !slices.Contains(inv.Env, want) {
			t.Errorf("env %q lacks %q", inv.Env, want)
		}
	}
	if i, j := slices.Index(inv.Env, "A=1"), slices.Index(inv.Env, "B=2"); i > j {
		t.Errorf("solution.env is not in a stable order: %q", inv.Env)
	}
	if strings.Contains(strings.Join(inv.Argv, " "), "s3cret") {
		t.Error("a credential is on the command line")
	}
	if _, err := (Oracle{}).Prepare(Input{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterOracle}}); err == nil || !strings.Contains(err.Error(), "solution") {
		t.Errorf("an oracle without a solution: %v, want an error naming the solution", err)
	}
	if _, ok := Default()[harnessv1.AdapterOracle]; !ok {
		t.Error("the default registry has no oracle: no node would offer it")
	}
}
