package controllers

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/report"
)

// maxRoundHistory bounds status.rounds.
const maxRoundHistory = 10

// reconcileRound starts the first round, or a new one when spec.revision
// changed: the current round's summary goes to the front of status.rounds
// (at most maxRoundHistory) and the round's counters start again.
func (r *HarnessSuiteReconciler) reconcileRound(p *suitePass) {
	st := &p.suite.Status
	rev := p.suite.Spec.Revision.String()
	if st.Round > 0 && st.Revision == rev {
		return
	}
	if st.Round > 0 {
		sum := harnessv1.RoundSummary{Round: st.Round, Revision: st.Revision, StartTime: st.StartTime,
			CompletionTime: st.CompletionTime, Counts: st.Counts, PassRate: st.PassRate}
		if len(st.Fixtures) > 0 {
			sum.FixtureHashes = map[string]string{}
			for _, f := range st.Fixtures {
				// The hash the round's runs were created with: the latest
				// when it changed mid-round.
				h := f.RoundHash
				if f.ChangedInRound {
					h = f.Hash
				}
				sum.FixtureHashes[f.Name] = h
			}
		}
		st.Rounds = append([]harnessv1.RoundSummary{sum}, st.Rounds...)
		if len(st.Rounds) > maxRoundHistory {
			st.Rounds = st.Rounds[:maxRoundHistory]
		}
		p.event(corev1.EventTypeNormal, "RoundSuperseded", "Supersede",
			fmt.Sprintf("round %d (revision %q) ended at %s with pass rate %s; revision %q starts round %d",
				st.Round, st.Revision, st.Progress, orDash(st.PassRate), rev, st.Round+1))
	}
	st.Round++
	st.Revision = rev
	st.StartTime = p.now.DeepCopy()
	st.CompletionTime = nil
	st.Fixtures = nil
	st.Cells = nil
	st.Counts = harnessv1.SuiteCounts{}
	st.PassRate = ""
	p.event(corev1.EventTypeNormal, "RoundStarted", "Start", fmt.Sprintf("round %d started (revision %q)", st.Round, rev))
}

// cellTally counts one agent × fixture cell.
type cellTally struct {
	rewards                           []float64
	passed, failed, errored, finished int32
	hashes                            []string
	// Usage of the finished runs: sums of those with figures.
	input, output, cache int64
	counted, uncounted   int32
	partly               int32 // counted, with answers uncounted
}

// summarize sums the current round's runs up into the status: counts,
// cells, progress, pass rate, completion and conditions. created names the
// runs of the plan that exist or were just created.
func (r *HarnessSuiteReconciler) summarize(p *suitePass, plan []plannedRun, fixtures []suiteFixture, runs []*harnessv1.HarnessRun, created map[string]bool, problem string) {
	suite := p.suite
	st := &suite.Status
	round := strconv.Itoa(int(st.Round))

	type cellKey struct{ agent, fixture string }
	planned := make(map[string]plannedRun, len(plan))
	for _, pr := range plan {
		planned[pr.name] = pr
	}
	counts := harnessv1.SuiteCounts{Total: int32(len(plan))}
	tallies := map[cellKey]*cellTally{}
	for _, run := range runs {
		pr, ok := planned[run.Name]
		if run.Labels[harnessv1.LabelSuiteRound] != round || !ok {
			continue
		}
		// The plan's cell, not the run's labels: whoever may update
		// the run may relabel it into another agent's cell.
		k := cellKey{suite.Spec.Agents[pr.agent].Name, pr.fixture.name}
		t := tallies[k]
		if t == nil {
			t = &cellTally{}
			tallies[k] = t
		}
		if h := run.Annotations[harnessv1.AnnotationFixtureHash]; h != "" && !contains(t.hashes, h) && len(t.hashes) < 4 {
			t.hashes = append(t.hashes, h)
		}
		switch phase := run.Status.Phase; {
		case phase.Terminal():
			counts.Finished++
			t.finished++
			if v, err := strconv.ParseFloat(run.Status.Reward, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
				t.rewards = append(t.rewards, v)
			}
			if u := run.Status.Usage; u != nil && u.Source != harnessv1.UsageNone {
				t.input += u.InputTokens
				t.output += u.OutputTokens
				t.cache += u.CacheReadTokens + u.CacheWriteTokens
				t.counted++
				if u.UncountedResponses > 0 {
					t.partly++
				}
			} else {
				t.uncounted++
			}
			switch run.Status.Verdict {
			case harnessv1.VerdictPass:
				counts.Passed++
				t.passed++
			case harnessv1.VerdictFail:
				counts.Failed++
				t.failed++
			default:
				counts.Errored++
				t.errored++
			}
		case phase == harnessv1.RunRunning:
			counts.Running++
		default:
			counts.Pending++
		}
	}
	for _, pr := range plan {
		if created[pr.name] {
			counts.Created++
		}
	}

	repeats := max(suite.Spec.Repeats, 1)
	cells := make([]harnessv1.SuiteCell, 0, len(suite.Spec.Agents)*len(fixtures))
	for _, a := range suite.Spec.Agents {
		for _, f := range fixtures {
			t := tallies[cellKey{a.Name, f.name}]
			if t == nil {
				t = &cellTally{}
			}
			sort.Strings(t.hashes)
			mean, interval := rewardSummary(t.rewards)
			cells = append(cells, harnessv1.SuiteCell{Agent: a.Name, Fixture: f.name, N: t.passed + t.failed,
				Passed: t.passed, Failed: t.failed, Errored: t.errored, Unfinished: repeats - t.finished,
				PassRate: passRate(t.passed, t.failed), FixtureHashes: t.hashes,
				InputTokens: t.input, OutputTokens: t.output, CacheTokens: t.cache, CountedRuns: t.counted, UncountedRuns: t.uncounted, PartlyCountedRuns: t.partly,
				RewardN: int32(len(t.rewards)), RewardMean: mean, RewardInterval: interval})
		}
	}
	st.Counts = counts
	st.Cells = cells
	st.Progress = fmt.Sprintf("%d/%d", counts.Finished, counts.Total)
	st.PassRate = passRate(counts.Passed, counts.Failed)

	complete := problem == "" && counts.Total > 0 && counts.Finished == counts.Total
	if complete && st.CompletionTime == nil {
		st.CompletionTime = p.now.DeepCopy()
		p.event(corev1.EventTypeNormal, harnessv1.SuiteReasonRoundComplete, "Complete",
			fmt.Sprintf("round %d complete: %d runs, %d passed, %d failed, %d errored; pass rate %s",
				st.Round, counts.Total, counts.Passed, counts.Failed, counts.Errored, orDash(st.PassRate)))
	}
	if !complete {
		st.CompletionTime = nil
	}
	r.setConditions(p, complete, problem)
}

func (r *HarnessSuiteReconciler) setConditions(p *suitePass, complete bool, problem string) {
	st := &p.suite.Status
	c := st.Counts
	if p.suite.Spec.Suspend {
		p.setCondition(harnessv1.SuiteConditionSuspended, metav1.ConditionTrue, harnessv1.SuiteReasonSuspended,
			fmt.Sprintf("spec.suspend is true: no run is created; %d unfinished runs go on", c.Pending+c.Running))
	} else {
		p.setCondition(harnessv1.SuiteConditionSuspended, metav1.ConditionFalse, harnessv1.SuiteReasonResumed, "spec.suspend is false")
	}
	if complete {
		msg := fmt.Sprintf("round %d: all %d runs finished; %d passed, %d failed, %d errored", st.Round, c.Total, c.Passed, c.Failed, c.Errored)
		p.setCondition(harnessv1.SuiteConditionComplete, metav1.ConditionTrue, harnessv1.SuiteReasonRoundComplete, msg)
		p.setCondition(harnessv1.SuiteConditionProgressing, metav1.ConditionFalse, harnessv1.SuiteReasonRoundComplete, msg)
	} else {
		msg := fmt.Sprintf("round %d: %d of %d runs finished, %d running, %d pending, %d not created yet",
			st.Round, c.Finished, c.Total, c.Running, c.Pending, c.Total-c.Created)
		p.setCondition(harnessv1.SuiteConditionComplete, metav1.ConditionFalse, harnessv1.SuiteReasonRoundInProgress, msg)
		switch {
		case problem != "":
			p.setCondition(harnessv1.SuiteConditionProgressing, metav1.ConditionFalse, harnessv1.SuiteReasonFixturesNotFound, problem)
		case p.refused != "":
			p.setCondition(harnessv1.SuiteConditionProgressing, metav1.ConditionFalse, harnessv1.SuiteReasonRunsRefused, truncateMessage(p.refused))
		case p.suite.Spec.Suspend:
			p.setCondition(harnessv1.SuiteConditionProgressing, metav1.ConditionFalse, harnessv1.SuiteReasonSuspended, msg)
		default:
			p.setCondition(harnessv1.SuiteConditionProgressing, metav1.ConditionTrue, harnessv1.SuiteReasonRoundInProgress, msg)
		}
	}
	r.setKstatusConditions(p, problem)
	var changed []string
	for _, f := range st.Fixtures {
		if f.ChangedInRound {
			changed = append(changed, f.Name)
		}
	}
	if len(changed) > 0 {
		msg := fmt.Sprintf("the content of %s changed during round %d: runs created since use the new content (their %s annotation says which); change spec.revision for a clean round",
			strings.Join(changed, ", "), st.Round, harnessv1.AnnotationFixtureHash)
		was := findCondition(p.orig.Status.Conditions, harnessv1.SuiteConditionFixtureChanged)
		if was == nil || was.Status != metav1.ConditionTrue || was.Message != msg {
			p.event(corev1.EventTypeWarning, harnessv1.SuiteReasonFixtureChanged, "Observe", msg)
		}
		p.setCondition(harnessv1.SuiteConditionFixtureChanged, metav1.ConditionTrue, harnessv1.SuiteReasonFixtureChanged, msg)
	} else {
		p.setCondition(harnessv1.SuiteConditionFixtureChanged, metav1.ConditionFalse, harnessv1.SuiteReasonFixturesUnchanged,
			fmt.Sprintf("no fixture changed during round %d", st.Round))
	}
}

// setKstatusConditions sets Reconciling and Stalled, the conditions kstatus
// (and with it Flux, Argo CD's health and kubectl wait users) understands:
// Stalled when the suite cannot go on without a change (missing fixtures,
// refused runs), else Reconciling while Progressing is True.
func (r *HarnessSuiteReconciler) setKstatusConditions(p *suitePass, problem string) {
	switch {
	case problem != "":
		p.setCondition(harnessv1.SuiteConditionStalled, metav1.ConditionTrue, harnessv1.SuiteReasonFixturesNotFound, problem)
	case p.refused != "":
		p.setCondition(harnessv1.SuiteConditionStalled, metav1.ConditionTrue, harnessv1.SuiteReasonRunsRefused, truncateMessage(p.refused))
	default:
		p.setCondition(harnessv1.SuiteConditionStalled, metav1.ConditionFalse, harnessv1.SuiteReasonNotStalled, "nothing stops the suite")
	}
	progressing := findCondition(p.suite.Status.Conditions, harnessv1.SuiteConditionProgressing)
	stalled := problem != "" || p.refused != ""
	if progressing != nil && progressing.Status == metav1.ConditionTrue && !stalled {
		p.setCondition(harnessv1.SuiteConditionReconciling, metav1.ConditionTrue, progressing.Reason, progressing.Message)
		return
	}
	reason, msg := harnessv1.SuiteReasonRoundComplete, "the round is complete"
	if progressing != nil {
		reason, msg = progressing.Reason, progressing.Message
	}
	if stalled {
		reason, msg = harnessv1.SuiteConditionStalled, "the suite is stalled: see condition Stalled"
	}
	p.setCondition(harnessv1.SuiteConditionReconciling, metav1.ConditionFalse, reason, msg)
}

// truncateMessage keeps a condition message within the API's 32 KiB.
func truncateMessage(s string) string {
	const limit = 4096
	if len(s) <= limit {
		return s
	}
	return strings.ToValidUTF8(s[:limit], "") + "…"
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// passRate is passed / (passed + failed) as a percentage with one decimal,
// empty when no run was judged.
func passRate(passed, failed int32) string {
	n := passed + failed
	if n == 0 {
		return ""
	}
	return strconv.FormatFloat(100*float64(passed)/float64(n), 'f', 1, 64) + "%"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// rewardSummary is the mean of a cell's rewards and its 95% confidence
// interval (Student's t, report.MeanInterval95: the report computes the
// same), "" when there is none (no reward; one reward has no interval).
func rewardSummary(v []float64) (mean, interval string) {
	if len(v) == 0 {
		return "", ""
	}
	m, lo, hi, ok := report.MeanInterval95(v)
	if !ok {
		return report.FormatReward(m), ""
	}
	return report.FormatReward(m), fmt.Sprintf("[%s, %s]", report.FormatReward(lo), report.FormatReward(hi))
}
