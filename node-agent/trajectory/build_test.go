package trajectory

import (
	"strconv"
	"testing"
)

// Add holds the first MaxHeldSteps/2 steps and the last ones; At finds a
// held step by its place and nil for one left out; Seal numbers the kept
// steps by their places in the run.
func TestAddHoldsFirstAndLastSteps(t *testing.T) {
	var tr Trajectory
	tr.SessionID, tr.Agent = "s", Agent{Name: "a", Version: "1"}
	const n = 5 * MaxHeldSteps
	for i := range n {
		if p := tr.Add(Step{Source: SourceSystem, Message: strconv.Itoa(i)}); p != i {
			t.Fatalf("place %d, want %d", p, i)
		}
	}
	if len(tr.Steps) > MaxHeldSteps || tr.Omitted()+len(tr.Steps) != n {
		t.Fatalf("%d steps held, %d omitted", len(tr.Steps), tr.Omitted())
	}
	for _, p := range []int{0, MaxHeldSteps/2 - 1, n - MaxHeldSteps/4, n - 1} {
		if s := tr.At(p); s == nil || s.Message != strconv.Itoa(p) || s.StepID != p+1 {
			t.Errorf("At(%d) = %+v", p, s)
		}
	}
	if s := tr.At(MaxHeldSteps / 2); s != nil {
		t.Errorf("At(%d) = %+v, a step left out", MaxHeldSteps/2, s)
	}
	out, _, err := Seal(&tr, func(b []byte) []byte { return b }, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	last := got.Steps[len(got.Steps)-1]
	if got.FinalMetrics.TotalSteps != n || last.Message != strconv.Itoa(n-1) || last.Extra["original_step_id"] != float64(n) || got.Steps[0].Extra["original_step_id"] != float64(1) {
		t.Errorf("sealed: total %d, last step %+v", got.FinalMetrics.TotalSteps, last)
	}
}

// Join holds a text to MaxHeldText, and Seal says texts were held short.
func TestJoinHoldsTextToBound(t *testing.T) {
	var s Step
	for range 3 * MaxHeldText / 10 {
		s.Join(&s.Message, "\n", "ééééé")
	}
	if len(s.Message) > MaxHeldText || !s.overflow {
		t.Fatalf("text of %d bytes held", len(s.Message))
	}
	tr := Trajectory{SessionID: "s", Agent: Agent{Name: "a", Version: "1"}, Steps: []Step{s}}
	tr.Steps[0].Source = SourceAgent
	out, _, err := Seal(&tr, func(b []byte) []byte { return b }, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := Parse(out)
	if got == nil || got.Notes == "" {
		t.Fatalf("no note of the texts held short: %s", out[:200])
	}
}
