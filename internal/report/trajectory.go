package report

import (
	"fmt"
	"strings"

	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/node-agent/trajectory"
)

// maxShownText bounds each text the page shows of a trajectory: the whole
// is in the evidence's trajectory.json.
const maxShownText = 4000

// Trajectory is a run's trajectory as the HTML report shows it: every text
// made inert (termsafe: control sequences and bidirectional overrides
// visible) and cut to maxShownText; html/template escapes the rest.
type Trajectory struct {
	// Format is the ATIF version; Note why a part is missing or says
	// what ATIF's notes say.
	Format, Note string
	Steps        []TrajectoryStep
}

// TrajectoryStep is one step of a Trajectory.
type TrajectoryStep struct {
	ID                                int
	Source, Model, Message, Reasoning string
	Calls                             []TrajectoryCall
	// Results are observation results not tied to a call of the step.
	Results []string
}

// TrajectoryCall is a tool call with its result(s).
type TrajectoryCall struct {
	Name, Arguments string
	Results         []string
}

// TrajectoryOf reads trajectory.json for the page: it must be valid ATIF.
func TrajectoryOf(data []byte) (*Trajectory, error) {
	t, err := trajectory.Parse(data)
	if err != nil {
		return nil, err
	}
	v := &Trajectory{Format: t.SchemaVersion, Note: shown(t.Notes)}
	for _, s := range t.Steps {
		sv := TrajectoryStep{ID: s.StepID, Source: s.Source, Model: shown(s.ModelName), Message: shown(s.Message), Reasoning: shown(s.ReasoningContent)}
		tied := map[string]bool{}
		for _, c := range s.ToolCalls {
			cv := TrajectoryCall{Name: shown(c.FunctionName), Arguments: shown(string(c.Arguments))}
			if s.Observation != nil {
				for _, r := range s.Observation.Results {
					if r.SourceCallID == c.ToolCallID {
						cv.Results = append(cv.Results, shown(r.Content))
						tied[c.ToolCallID] = true
					}
				}
			}
			sv.Calls = append(sv.Calls, cv)
		}
		if s.Observation != nil {
			for _, r := range s.Observation.Results {
				if r.SourceCallID == "" || !tied[r.SourceCallID] {
					sv.Results = append(sv.Results, shown(r.Content))
				}
			}
		}
		v.Steps = append(v.Steps, sv)
	}
	return v, nil
}

// shown is s made inert for a page and cut to maxShownText.
func shown(s string) string {
	s = termsafe.String(s)
	if len(s) > maxShownText {
		cut := s[:maxShownText]
		for len(cut) > 0 && !isBoundary(s, len(cut)) {
			cut = cut[:len(cut)-1]
		}
		s = cut + fmt.Sprintf(" [… %d more bytes in trajectory.json]", len(s)-len(cut))
	}
	return strings.TrimRight(s, "\n")
}

// isBoundary: s[:i] ends on a whole UTF-8 character.
func isBoundary(s string, i int) bool { return i >= len(s) || s[i]&0xC0 != 0x80 }
