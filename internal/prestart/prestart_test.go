package prestart

import (
	"testing"

	"github.com/harnessfacts/harnessfacts/sandbox"
)

func sandboxDefaults() sandbox.Options { return sandbox.Options{} }

func TestBegunOnlyForARunWithTheDefaultSandbox(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"harnessfacts", "run", "-f", "run.yaml"}, true},
		{[]string{"harnessfacts", "run", "-f", "run.yaml", "--follow"}, true},
		{[]string{"harnessfacts", "run", "-f", "run.yaml", "--bwrap", "/opt/bwrap"}, false},
		{[]string{"harnessfacts", "run", "--bwrap=/opt/bwrap", "-f", "run.yaml"}, false},
		{[]string{"harnessfacts", "run", "--help"}, false},
		{[]string{"harnessfacts", "run", "-h"}, false},
		{[]string{"harnessfacts", "version"}, false},
		{[]string{"harnessfacts"}, false},
		{[]string{"harnessfacts.test", "-test.run", "run"}, false},
	} {
		if got := forRun(c.args); got != c.want {
			t.Errorf("forRun(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// A test binary's init begins nothing: its arguments are not a run's.
func TestNothingBegunInATest(t *testing.T) {
	if early.done != nil {
		t.Fatal("a preflight was begun at a test's init")
	}
	if _, ok := Preflight(sandboxDefaults()); ok {
		t.Fatal("Preflight gave verdicts where none was begun")
	}
	Wait() // returns at once
}
