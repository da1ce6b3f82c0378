package trajectory

import "unicode/utf8"

// What an adapter holds of a trajectory while it reads the log, which the
// agent writes: a log of a few MiB made a million steps (136 bytes each
// before their texts) or one text rebuilt at every delta, and the
// node-agent held hundreds of MiB and spent minutes of a core. Seal never
// keeps more than MaxBytes, so none of these bounds takes away what it
// would have kept: fewer than MaxHeldSteps/4 steps fit in MaxBytes, and it
// cuts texts to maxText.
const (
	// MaxHeldSteps bounds the steps held: past it the first MaxHeldSteps/2
	// are kept and, of the later ones, the last (at least MaxHeldSteps/4).
	MaxHeldSteps = 16384
	// MaxHeldText bounds a text joined from parts.
	MaxHeldText = 64 << 10
	// MaxHeldCalls bounds the tool calls of one step, and its results.
	MaxHeldCalls = 1024
)

// held is what Add left out.
type held struct {
	// gap is where in Steps the omitted steps were; omitted how many.
	gap, omitted int
}

// Add appends s as the trajectory's next step (its StepID its place from
// 1) and returns its place, for At. Past MaxHeldSteps, the older half of
// the later steps is left out.
func (t *Trajectory) Add(s Step) int {
	place := len(t.Steps) + t.held.omitted
	s.StepID = place + 1
	if len(t.Steps) >= MaxHeldSteps {
		h := MaxHeldSteps / 2
		if t.held.omitted == 0 {
			t.held.gap = h
		}
		later := t.Steps[h:]
		drop := len(later) / 2
		n := copy(later, later[drop:])
		clear(later[n:])
		t.Steps = t.Steps[:h+n]
		t.held.omitted += drop
	}
	t.Steps = append(t.Steps, s)
	return place
}

// At is the step at place (as Add returned it), nil when it was left out.
func (t *Trajectory) At(place int) *Step {
	switch {
	case place < 0:
		return nil
	case t.held.omitted == 0 || place < t.held.gap:
		if place < len(t.Steps) {
			return &t.Steps[place]
		}
		return nil
	case place >= t.held.gap+t.held.omitted && place-t.held.omitted < len(t.Steps):
		return &t.Steps[place-t.held.omitted]
	}
	return nil
}

// Omitted is how many steps Add left out.
func (t *Trajectory) Omitted() int { return t.held.omitted }

// Join appends text to *dst (a text of s), after sep when *dst is not
// empty, up to MaxHeldText.
func (s *Step) Join(dst *string, sep, text string) {
	if text == "" {
		return
	}
	if *dst == "" {
		sep = ""
	}
	room := MaxHeldText - len(*dst)
	add := sep + text
	if len(add) > room {
		s.overflow = true
		if room <= 0 {
			return
		}
		add = add[:room]
		for len(add) > 0 && !utf8.ValidString(add) {
			add = add[:len(add)-1]
		}
	}
	*dst += add
}

// AddCall adds c to s's tool calls unless s has a call of its id or
// already MaxHeldCalls; it says whether c was added.
func (s *Step) AddCall(c ToolCall) bool {
	if s.Call(c.ToolCallID) != nil {
		return false
	}
	if len(s.ToolCalls) >= MaxHeldCalls {
		s.overflow = true
		return false
	}
	s.ToolCalls = append(s.ToolCalls, c)
	return true
}
