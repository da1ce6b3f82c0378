// Package report turns a HarnessSuite and the runs of its current round into
// a report: pass rate per agent × fixture cell with a Wilson 95% confidence
// interval, and each run with its evidence digest. It writes a
// self-contained HTML page (inline CSS and SVG, no external asset) and a
// Markdown summary for CI logs.
package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Z95 is the normal quantile of a two-sided 95% interval.
const Z95 = 1.959963984540054

// Wilson is the Wilson score interval of passed successes in n trials at
// normal quantile z: unlike the normal approximation it stays within [0, 1]
// and is honest for small n and rates near 0 or 1. With n = 0 it is [0, 1].
func Wilson(passed, n int, z float64) (lo, hi float64) {
	if n <= 0 {
		return 0, 1
	}
	nf := float64(n)
	p := float64(passed) / nf
	z2 := z * z
	den := 1 + z2/nf
	center := (p + z2/(2*nf)) / den
	half := z * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / den
	return math.Max(0, center-half), math.Min(1, center+half)
}

// Run is one run of the report.
type Run struct {
	Name    string
	Agent   string
	Fixture string
	Repeat  int
	Phase   string
	Verdict string
	// Class is the failure class, when the run failed.
	Class  string
	Reason string
	Node   string
	// Duration is from start to completion, when both are known.
	Duration time.Duration
	// Digest is status.evidence.digest; EvidenceConfigMap holds the evidence.
	Digest            string
	EvidenceConfigMap string
	// FixtureHash is the fixture content hash the suite created the run with;
	// FixtureDigest the tree hash of what the node-agent really ran.
	FixtureHash   string
	FixtureDigest string
	// SignedBy is the node key that signed the receipt; StoredRef where the
	// evidence is kept beyond the run.
	SignedBy, StoredRef string
	// Usage is status.usage (nil before the run ends).
	Usage *harnessv1.UsageStatus
	// Reward is status.reward as the node-agent wrote it (the mean of its
	// checks' rewards, a Harbor-style verifier's), empty when it has none.
	Reward string
	// Trajectory is the run's conversation from its evidence, for the HTML
	// page (nil when not read); TrajectoryNote says why there is none.
	Trajectory     *Trajectory
	TrajectoryNote string
}

// Cell is one agent × fixture cell.
type Cell struct {
	Agent, Fixture                      string
	Passed, Failed, Errored, Unfinished int
	// Rate is Passed / N; Lo and Hi its Wilson 95% interval.
	Rate, Lo, Hi float64
	Runs         []Run
	// InputTokens, OutputTokens and CacheTokens (reads and writes) sum the
	// status.usage of the cell's finished runs; Counted is how many of
	// them had figures (source Gateway or AgentOutput), Uncounted how many
	// had none, so that a sum over part of the runs says so.
	InputTokens, OutputTokens, CacheTokens int64
	Counted, Uncounted                     int
	// PartlyCounted are the counted runs with answers the gateway read no
	// figures from: the sums are a lower bound.
	PartlyCounted int
	// RewardN counts the cell's finished runs with a reward; RewardMean is
	// their mean, RewardLo and RewardHi its Student's t 95% interval (only
	// from two rewards on: HasRewardInterval).
	RewardN                        int
	RewardMean, RewardLo, RewardHi float64
	rewards                        []float64
}

// HasRewardInterval says whether the cell has enough rewards (two) for an
// interval.
func (c Cell) HasRewardInterval() bool { return c.RewardN >= 2 }

// tQuantile975 are Student's t 0.975 quantiles for 1 to 30 degrees of
// freedom; beyond, the normal's 1.96 is within 2%.
var tQuantile975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// MeanInterval95 is the mean of v and its 95% confidence interval by
// Student's t: rewards are few (a handful of repeats per cell), where the
// normal approximation is too narrow. ok is false for fewer than two
// values (no interval; lo = hi = mean), and for none (mean 0).
func MeanInterval95(v []float64) (mean, lo, hi float64, ok bool) {
	n := len(v)
	if n == 0 {
		return 0, 0, 0, false
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	mean = sum / float64(n)
	if n < 2 {
		return mean, mean, mean, false
	}
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	t := 1.96
	if n-1 <= len(tQuantile975) {
		t = tQuantile975[n-2]
	}
	half := t * math.Sqrt(ss/float64(n-1)) / math.Sqrt(float64(n))
	return mean, mean - half, mean + half, true
}

// FormatReward writes a reward as the suite's status does (4 significant
// digits).
func FormatReward(x float64) string { return strconv.FormatFloat(x, 'g', 4, 64) }

// RewardText says a cell's reward for people: "–" without one, the mean
// with n, and the interval from two rewards on.
func (c Cell) RewardText() string {
	switch {
	case c.RewardN == 0:
		return "–"
	case !c.HasRewardInterval():
		return fmt.Sprintf("%s (n=1)", FormatReward(c.RewardMean))
	}
	return fmt.Sprintf("%s [%s, %s] (n=%d)", FormatReward(c.RewardMean), FormatReward(c.RewardLo), FormatReward(c.RewardHi), c.RewardN)
}

// N is the number of judged runs: passed + failed. Errored runs (the harness
// could not judge the agent) are left out, as in the suite's status.
func (c Cell) N() int { return c.Passed + c.Failed }

// Report is a suite's current round. Its counts are made from the runs
// themselves (the total from the suite's status), so they agree with the
// cells and the runs listed.
type Report struct {
	Suite, Namespace string
	Round            int32
	Revision         string
	Progress         string
	Generated        time.Time
	Counts           harnessv1.SuiteCounts
	// Rate, Lo and Hi are the whole round's pass rate and interval.
	Rate, Lo, Hi float64
	Cells        []Cell
	Rounds       []harnessv1.RoundSummary
}

// Build makes the report of suite's current round from its runs (those
// labelled with the suite and the round; others are ignored). Cells follow
// status.cells when the controller wrote them (spec.agents order, then
// fixture name), so that cells without a finished run appear too.
func Build(suite *harnessv1.HarnessSuite, runs []harnessv1.HarnessRun, now time.Time) *Report {
	r := &Report{Suite: suite.Name, Namespace: suite.Namespace, Round: suite.Status.Round, Revision: suite.Status.Revision,
		Generated: now, Counts: harnessv1.SuiteCounts{Total: suite.Status.Counts.Total}, Rounds: suite.Status.Rounds}
	type key struct{ agent, fixture string }
	index := map[key]int{}
	cellFor := func(k key) *Cell {
		i, ok := index[k]
		if !ok {
			i = len(r.Cells)
			index[k] = i
			r.Cells = append(r.Cells, Cell{Agent: k.agent, Fixture: k.fixture})
		}
		return &r.Cells[i]
	}
	for _, c := range suite.Status.Cells {
		cellFor(key{c.Agent, c.Fixture}).Unfinished = int(c.Unfinished)
	}
	round := strconv.Itoa(int(suite.Status.Round))
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b harnessv1.HarnessRun) int { return cmp.Compare(a.Name, b.Name) })
	passed, judged := 0, 0
	for i := range sorted {
		run := &sorted[i]
		if run.Labels[harnessv1.LabelSuite] != suite.Name || run.Labels[harnessv1.LabelSuiteRound] != round {
			continue
		}
		rr := runOf(run)
		c := cellFor(key{rr.Agent, rr.Fixture})
		c.Runs = append(c.Runs, rr)
		r.Counts.Created++
		switch {
		case run.Status.Phase == harnessv1.RunRunning:
			r.Counts.Running++
			continue
		case !run.Status.Phase.Terminal():
			r.Counts.Pending++
			continue
		}
		r.Counts.Finished++
		if x, ok := rr.rewardValue(); ok {
			c.rewards = append(c.rewards, x)
		}
		if u := run.Status.Usage; u != nil && u.Source != harnessv1.UsageNone {
			c.InputTokens += u.InputTokens
			c.OutputTokens += u.OutputTokens
			c.CacheTokens += u.CacheReadTokens + u.CacheWriteTokens
			c.Counted++
			if u.UncountedResponses > 0 {
				c.PartlyCounted++
			}
		} else {
			c.Uncounted++
		}
		switch run.Status.Verdict {
		case harnessv1.VerdictPass:
			c.Passed++
			r.Counts.Passed++
		case harnessv1.VerdictFail:
			c.Failed++
			r.Counts.Failed++
		default:
			c.Errored++
			r.Counts.Errored++
		}
	}
	for i := range r.Cells {
		c := &r.Cells[i]
		slices.SortStableFunc(c.Runs, func(a, b Run) int { return cmp.Compare(a.Repeat, b.Repeat) })
		if n := c.N(); n > 0 {
			c.Rate = float64(c.Passed) / float64(n)
		}
		c.Lo, c.Hi = Wilson(c.Passed, c.N(), Z95)
		c.RewardN = len(c.rewards)
		c.RewardMean, c.RewardLo, c.RewardHi, _ = MeanInterval95(c.rewards)
		passed += c.Passed
		judged += c.N()
	}
	if judged > 0 {
		r.Rate = float64(passed) / float64(judged)
	}
	r.Lo, r.Hi = Wilson(passed, judged, Z95)
	r.Progress = fmt.Sprintf("%d/%d", r.Counts.Finished, r.Counts.Total)
	return r
}

func runOf(run *harnessv1.HarnessRun) Run {
	st := run.Status
	rr := Run{
		Name: run.Name, Agent: run.Labels[harnessv1.LabelSuiteAgent], Phase: string(st.Phase),
		Verdict: string(st.Verdict), Class: string(st.FailureClass), Reason: st.Reason, Node: st.NodeName,
		FixtureHash: run.Annotations[harnessv1.AnnotationFixtureHash], Reward: st.Reward,
	}
	if rr.Phase == "" {
		rr.Phase = string(harnessv1.RunPending)
	}
	if run.Spec.Fixture.ConfigMapRef != nil {
		rr.Fixture = run.Spec.Fixture.ConfigMapRef.Name
	}
	rr.Repeat, _ = strconv.Atoi(run.Annotations[harnessv1.AnnotationSuiteRepeat])
	if st.StartTime != nil && st.CompletionTime != nil {
		rr.Duration = st.CompletionTime.Sub(st.StartTime.Time)
	}
	if ev := st.Evidence; ev != nil {
		rr.Digest, rr.EvidenceConfigMap, rr.FixtureDigest = ev.Digest, ev.ConfigMapName, ev.FixtureDigest
		rr.SignedBy, rr.StoredRef = ev.SignedBy, ev.StoredRef
	}
	if st.Usage != nil {
		rr.Usage = st.Usage.DeepCopy()
	}
	return rr
}

// rewardValue is the run's reward as a number, when it has a finite one.
func (r Run) rewardValue() (float64, bool) {
	x, err := strconv.ParseFloat(r.Reward, 64)
	if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
		return 0, false
	}
	return x, true
}

// Tokens says a cell's token sums for people: "in / out / cache", with how
// many finished runs had none; "–" when none had figures.
func (c Cell) Tokens() string {
	if c.Counted == 0 {
		return "–"
	}
	s := fmt.Sprintf("%d / %d / %d", c.InputTokens, c.OutputTokens, c.CacheTokens)
	var notes []string
	if c.Uncounted > 0 {
		notes = append(notes, fmt.Sprintf("%d runs without figures", c.Uncounted))
	}
	if c.PartlyCounted > 0 {
		// Their figures are a lower bound, so the sums are too.
		notes = append(notes, fmt.Sprintf("%d runs with answers uncounted", c.PartlyCounted))
	}
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, ", ") + ")"
	}
	return s
}

// UsageLine says a run's usage for people: the models that answered (else
// the one asked for) and its tokens, with their source.
func (r Run) UsageLine() string {
	u := r.Usage
	if u == nil {
		return "–"
	}
	model := u.ModelRequested
	if len(u.Models) > 0 {
		model = strings.Join(u.Models, ", ")
	}
	if u.Source == harnessv1.UsageNone {
		return strings.TrimSpace(model + " (no usage figures)")
	}
	source := string(u.Source)
	if u.UncountedResponses > 0 {
		// The figures are a lower bound: say so where they are read.
		source += fmt.Sprintf("; %d answers uncounted", u.UncountedResponses)
	}
	return strings.TrimSpace(fmt.Sprintf("%s %d in / %d out / %d cache (%s)", model, u.InputTokens, u.OutputTokens,
		u.CacheReadTokens+u.CacheWriteTokens, source))
}
