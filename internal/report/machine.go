package report

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// jsonReport is the report's machine-readable form: stable lowerCamelCase
// keys, rates as fractions (0..1), durations in seconds.
type jsonReport struct {
	Suite     string                   `json:"suite"`
	Namespace string                   `json:"namespace"`
	Round     int32                    `json:"round"`
	Revision  string                   `json:"revision"`
	Progress  string                   `json:"progress"`
	Generated time.Time                `json:"generated"`
	Counts    harnessv1.SuiteCounts    `json:"counts"`
	PassRate  interval                 `json:"passRate"`
	Cells     []jsonCell               `json:"cells"`
	Rounds    []harnessv1.RoundSummary `json:"earlierRounds,omitempty"`
}

type interval struct {
	Rate float64 `json:"rate"`
	// Low and High bound the Wilson 95% interval.
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	// N is the number of judged runs (passed + failed).
	N int `json:"n"`
}

type jsonCell struct {
	Agent      string   `json:"agent"`
	Fixture    string   `json:"fixture"`
	Passed     int      `json:"passed"`
	Failed     int      `json:"failed"`
	Errored    int      `json:"errored"`
	Unfinished int      `json:"unfinished"`
	PassRate   interval `json:"passRate"`
	// Tokens sums the usage of the cell's finished runs that had figures.
	Tokens jsonTokens `json:"tokens"`
	// Reward summarizes the rewards of the cell's finished runs; absent
	// when none had one.
	Reward *jsonReward `json:"reward,omitempty"`
	Runs   []jsonRun   `json:"runs"`
}

type jsonReward struct {
	// N is the number of finished runs with a reward.
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	// Low and High bound the Student's t 95% interval of the mean, from
	// two rewards on.
	Low  *float64 `json:"low,omitempty"`
	High *float64 `json:"high,omitempty"`
}

type jsonTokens struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
	Cache  int64 `json:"cache"`
	// Counted runs had figures; Uncounted finished runs had none.
	Counted   int `json:"countedRuns"`
	Uncounted int `json:"uncountedRuns"`
	// PartlyCounted of the counted runs had answers without figures.
	PartlyCounted int `json:"partlyCountedRuns,omitempty"`
}

type jsonRun struct {
	Name              string  `json:"name"`
	Repeat            int     `json:"repeat"`
	Phase             string  `json:"phase"`
	Verdict           string  `json:"verdict,omitempty"`
	FailureClass      string  `json:"failureClass,omitempty"`
	Reason            string  `json:"reason,omitempty"`
	Node              string  `json:"node,omitempty"`
	DurationSeconds   float64 `json:"durationSeconds,omitempty"`
	EvidenceDigest    string  `json:"evidenceDigest,omitempty"`
	EvidenceConfigMap string  `json:"evidenceConfigMap,omitempty"`
	FixtureHash       string  `json:"fixtureHash,omitempty"`
	FixtureDigest     string  `json:"fixtureDigest,omitempty"`
	SignedBy          string  `json:"signedBy,omitempty"`
	StoredEvidence    string  `json:"storedEvidence,omitempty"`
	// Reward is status.reward, as a number.
	Reward *float64 `json:"reward,omitempty"`

	Usage *harnessv1.UsageStatus `json:"usage,omitempty"`
}

// JSON writes the report as JSON, for CI jobs and dashboards.
func (r *Report) JSON(w io.Writer) error {
	out := jsonReport{Suite: r.Suite, Namespace: r.Namespace, Round: r.Round, Revision: r.Revision, Progress: r.Progress,
		Generated: r.Generated.UTC(), Counts: r.Counts, Rounds: r.Rounds, Cells: []jsonCell{}}
	judged := 0
	for _, c := range r.Cells {
		jc := jsonCell{Agent: c.Agent, Fixture: c.Fixture, Passed: c.Passed, Failed: c.Failed, Errored: c.Errored,
			Unfinished: c.Unfinished, PassRate: interval{Rate: c.Rate, Low: c.Lo, High: c.Hi, N: c.N()}, Runs: []jsonRun{},
			Tokens: jsonTokens{Input: c.InputTokens, Output: c.OutputTokens, Cache: c.CacheTokens, Counted: c.Counted, Uncounted: c.Uncounted, PartlyCounted: c.PartlyCounted}}
		judged += c.N()
		if c.RewardN > 0 {
			jc.Reward = &jsonReward{N: c.RewardN, Mean: c.RewardMean}
			if c.HasRewardInterval() {
				lo, hi := c.RewardLo, c.RewardHi
				jc.Reward.Low, jc.Reward.High = &lo, &hi
			}
		}
		for _, run := range c.Runs {
			jr := jsonRun{Name: run.Name, Repeat: run.Repeat, Phase: run.Phase, Verdict: run.Verdict,
				FailureClass: run.Class, Reason: run.Reason, Node: run.Node, DurationSeconds: run.Duration.Seconds(),
				EvidenceDigest: run.Digest, EvidenceConfigMap: run.EvidenceConfigMap, FixtureHash: run.FixtureHash, FixtureDigest: run.FixtureDigest,
				SignedBy: run.SignedBy, StoredEvidence: run.StoredRef, Usage: run.Usage}
			if x, ok := run.rewardValue(); ok {
				jr.Reward = &x
			}
			jc.Runs = append(jc.Runs, jr)
		}
		out.Cells = append(out.Cells, jc)
	}
	out.PassRate = interval{Rate: r.Rate, Low: r.Lo, High: r.Hi, N: judged}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// The JUnit XML schema CI systems read (Jenkins, GitLab, GitHub actions
// reporters): one testsuite per agent × fixture cell, one testcase per run.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     float64      `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       float64         `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr,omitempty"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name       string          `xml:"name,attr"`
	Classname  string          `xml:"classname,attr"`
	Time       float64         `xml:"time,attr"`
	Failure    *junitProblem   `xml:"failure,omitempty"`
	Error      *junitProblem   `xml:"error,omitempty"`
	Skipped    *junitProblem   `xml:"skipped,omitempty"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr,omitempty"`
	Type    string `xml:"type,attr,omitempty"`
}

// JUnit writes the report as JUnit XML: a run with verdict Pass passes, Fail
// is a failure, Error (the harness could not judge the agent) an error, an
// unfinished run is skipped. Each testcase carries the run's evidence digest.
func (r *Report) JUnit(w io.Writer) error {
	all := junitSuites{Name: fmt.Sprintf("HarnessSuite %s/%s round %d", r.Namespace, r.Suite, r.Round)}
	for _, c := range r.Cells {
		s := junitSuite{Name: c.Agent + " × " + c.Fixture, Timestamp: r.Generated.UTC().Format(time.RFC3339),
			Properties: []junitProperty{{Name: "agent", Value: c.Agent}, {Name: "fixture", Value: c.Fixture}}}
		if c.RewardN > 0 {
			s.Properties = append(s.Properties, junitProperty{Name: "rewardN", Value: strconv.Itoa(c.RewardN)},
				junitProperty{Name: "rewardMean", Value: FormatReward(c.RewardMean)})
			if c.HasRewardInterval() {
				s.Properties = append(s.Properties, junitProperty{Name: "rewardInterval", Value: "[" + FormatReward(c.RewardLo) + ", " + FormatReward(c.RewardHi) + "]"})
			}
		}
		for _, run := range c.Runs {
			tc := junitCase{Name: run.Name, Classname: c.Agent + "." + c.Fixture, Time: run.Duration.Seconds()}
			if run.Digest != "" {
				tc.Properties = append(tc.Properties, junitProperty{Name: "evidence", Value: run.Digest})
			}
			if x, ok := run.rewardValue(); ok {
				tc.Properties = append(tc.Properties, junitProperty{Name: "reward", Value: FormatReward(x)})
			}
			why := run.Reason
			if run.Class != "" {
				why += " (" + run.Class + ")"
			}
			switch {
			case run.Verdict == string(harnessv1.VerdictPass):
			case run.Verdict == string(harnessv1.VerdictFail):
				tc.Failure = &junitProblem{Message: why, Type: run.Class}
				s.Failures++
			case run.Phase == string(harnessv1.RunSucceeded) || run.Phase == string(harnessv1.RunFailed):
				tc.Error = &junitProblem{Message: why, Type: run.Class}
				s.Errors++
			default:
				tc.Skipped = &junitProblem{Message: "not finished: phase " + run.Phase}
				s.Skipped++
			}
			s.Tests++
			s.Time += tc.Time
			s.Cases = append(s.Cases, tc)
		}
		all.Tests += s.Tests
		all.Failures += s.Failures
		all.Errors += s.Errors
		all.Skipped += s.Skipped
		all.Time += s.Time
		all.Suites = append(all.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(all); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
