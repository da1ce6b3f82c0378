package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// PendingSpend is the pending reason of a run whose namespace, or suite
// round, has used a HarnessPolicy's token budget.
const PendingSpend = "Spend"

// Spend rules (HarnessPolicy spec.spend) are kept here:
//
//   - a run's tokens are status.usage's total (input, output, cache);
//   - when a run has ended, its tokens (or what they grew by since) are
//     charged to status.spent of every policy with a spend rule that selects
//     its namespace, under the namespace and under the run's suite round, and
//     status.chargedTokens of the run says how many were charged (written by
//     the same pass; a charge whose run write then fails is charged again:
//     a budget may count a run twice, never not at all);
//   - before binding a run, a namespace's (round's) spending is what the
//     policy charged it plus the uncharged tokens of its runs present now;
//     at or over the budget, the run waits in Pending (reason Spend). A run
//     author cannot write status, so cannot unmark a charge; deleting an
//     ended, charged run gives nothing back;
//   - a run deleted before it was charged (its author may strip the
//     finalizer) is charged from its last status as the delete event shows
//     it (chargeDeleted). What a controller that was down at that moment
//     never saw is not charged.

// runTokens are the tokens of a run not charged yet.
func runTokens(run *harnessv1.HarnessRun) int64 {
	return max(0, run.Status.Usage.TotalTokens()-run.Status.ChargedTokens)
}

// suiteRound is the run's suite and round, from its labels ("" when it
// belongs to no suite).
func suiteRound(run *harnessv1.HarnessRun) (string, int32) {
	suite := run.Labels[harnessv1.LabelSuite]
	if suite == "" {
		return "", 0
	}
	round, err := strconv.ParseInt(run.Labels[harnessv1.LabelSuiteRound], 10, 32)
	if err != nil {
		return "", 0
	}
	return suite, int32(round)
}

// hasSpend says whether a policy has a spend rule.
func hasSpend(p *harnessv1.HarnessPolicy) bool {
	s := p.Spec.Spend
	return s != nil && (s.NamespaceTokens != nil || s.SuiteTokens != nil)
}

// chargeSpend charges an ended run's uncharged tokens to the spend rules
// of the policies over its namespace, and records the charge in the run's
// status for the pass's status write. It reports whether it charged.
func (r *HarnessRunReconciler) chargeSpend(ctx context.Context, p *pass) (bool, error) {
	run := p.run
	delta := runTokens(run)
	if delta == 0 {
		return false, nil
	}
	policies, err := r.namespacePolicies(ctx, run.Namespace)
	if err != nil {
		return false, err
	}
	charged := false
	for _, pol := range policies {
		if !hasSpend(pol) {
			continue
		}
		if err := r.charge(ctx, pol.Name, run, delta); err != nil {
			return false, err
		}
		charged = true
	}
	if !charged {
		// No budget governs the namespace: nothing to charge, and the
		// run's tokens count as uncharged should a rule come.
		return false, nil
	}
	p.run.Status.ChargedTokens = run.Status.Usage.TotalTokens()
	return true, nil
}

// chargeDeleted charges a deleted run's uncharged tokens, as its last
// status says them, to the policies over its namespace. A failure is
// logged: the run is gone, and nothing would retry it.
func (r *HarnessRunReconciler) chargeDeleted(run *harnessv1.HarnessRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logger := log.FromContext(ctx).WithValues("run", client.ObjectKeyFromObject(run))
	policies, err := r.namespacePolicies(ctx, run.Namespace)
	if err != nil {
		logger.Error(err, "a deleted run's tokens could not be charged to its namespace's spend")
		return
	}
	for _, pol := range policies {
		if !hasSpend(pol) {
			continue
		}
		if err := r.charge(ctx, pol.Name, run, runTokens(run)); err != nil {
			logger.Error(err, "a deleted run's tokens could not be charged to its namespace's spend")
		}
	}
}

// charge adds delta tokens of run to policy name's status.spent.
func (r *HarnessRunReconciler) charge(ctx context.Context, name string, run *harnessv1.HarnessRun, delta int64) error {
	suite, round := suiteRound(run)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pol := &harnessv1.HarnessPolicy{}
		if err := r.client.Get(ctx, types.NamespacedName{Name: name}, pol); err != nil {
			return err
		}
		i := spentIndex(pol, run.Namespace)
		if i < 0 {
			pol.Status.Spent = append(pol.Status.Spent, harnessv1.NamespaceSpend{Namespace: run.Namespace})
			i = len(pol.Status.Spent) - 1
		}
		ns := &pol.Status.Spent[i]
		ns.Tokens += delta
		if suite != "" {
			ns.Suites = chargeSuite(ns.Suites, suite, round, delta)
			boundSuites(pol.Status.Spent)
		}
		if err := r.client.Status().Update(ctx, pol); err != nil {
			return err
		}
		r.chargedPolicies.wrote(pol)
		return nil
	})
	if err != nil {
		return fmt.Errorf("charging %d tokens of HarnessRun %s/%s to HarnessPolicy %s: %w", delta, run.Namespace, run.Name, name, err)
	}
	return nil
}

// MaxSuitesSpent is how many suites a namespace's entry of a policy's
// status.spent keeps (the CRD's bound on spent[].suites).
const MaxSuitesSpent = 1000

// chargeSuite adds delta tokens of round of suite to suites, and returns
// them, the suite charged last. The list is kept in the order of the
// charges, least recent first, and at most MaxSuitesSpent long: a new suite
// when it is full takes the place of the least recently charged one. A run
// author labels their runs with suite names as they like, so they can fill
// the list; were a full list refused, the status write and so the charge
// would fail, and the run, its finalizer stripped and deleted, would never
// be charged to the namespace. The suite dropped is one whose round has
// had no charge for the longest: spend.suiteTokens keeps an honest suite
// within its round, and such a suite's round is most likely over.
func chargeSuite(suites []harnessv1.SuiteSpend, suite string, round int32, delta int64) []harnessv1.SuiteSpend {
	cur := harnessv1.SuiteSpend{Suite: suite, Round: round, Tokens: delta}
	if j := slices.IndexFunc(suites, func(s harnessv1.SuiteSpend) bool { return s.Suite == suite }); j >= 0 {
		switch old := suites[j]; {
		case old.Round > round:
			// A run of an earlier round than the one counted is the
			// namespace's only.
			return suites
		case old.Round == round:
			cur.Tokens += old.Tokens
		}
		// else a new round starts at 0: the earlier one's tokens stay in
		// the namespace's.
		suites = slices.Delete(suites, j, j+1)
	}
	if len(suites) >= MaxSuitesSpent {
		suites = slices.Delete(suites, 0, len(suites)-MaxSuitesSpent+1)
	}
	return append(suites, cur)
}

// MaxPolicySuitesSpent is how many suites a policy's status.spent keeps
// in all its namespaces together: 1,000 in each of a dozen namespaces
// would take the policy past the size of an object etcd stores, and every
// charge to it, any namespace's, would fail (about 110 bytes a suite: 4,000
// are under half a MiB).
const MaxPolicySuitesSpent = 4000

// boundSuites keeps the suites of spent within MaxPolicySuitesSpent: past
// it, the namespace that keeps the most suites loses its least recently
// charged one (the first listed at the lowest index, among equals), so that
// the namespaces that label runs by the thousand make room, not the others.
func boundSuites(spent []harnessv1.NamespaceSpend) {
	total := 0
	for _, ns := range spent {
		total += len(ns.Suites)
	}
	for ; total > MaxPolicySuitesSpent; total-- {
		most := 0
		for i := range spent {
			if len(spent[i].Suites) > len(spent[most].Suites) {
				most = i
			}
		}
		spent[most].Suites = slices.Delete(spent[most].Suites, 0, 1)
	}
}

func spentIndex(pol *harnessv1.HarnessPolicy, namespace string) int {
	for i := range pol.Status.Spent {
		if pol.Status.Spent[i].Namespace == namespace {
			return i
		}
	}
	return -1
}

// spendExhausted says, when a spend rule of policies leaves the run no
// budget, which one and how much was used, for the run's Pending message.
func (r *HarnessRunReconciler) spendExhausted(ctx context.Context, run *harnessv1.HarnessRun, policies []*harnessv1.HarnessPolicy) (string, error) {
	var governed []*harnessv1.HarnessPolicy
	for _, pol := range policies {
		if hasSpend(pol) {
			governed = append(governed, pol)
		}
	}
	if len(governed) == 0 {
		return "", nil
	}
	suite, round := suiteRound(run)
	// The uncharged tokens of the namespace's runs, and of the run's round.
	runs := &harnessv1.HarnessRunList{}
	if err := r.client.List(ctx, runs, client.InNamespace(run.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("listing the runs of namespace %s for its spend: %w", run.Namespace, err)
	}
	var nsLive, roundLive int64
	for i := range runs.Items {
		t := runTokens(&runs.Items[i])
		nsLive += t
		if s, n := suiteRound(&runs.Items[i]); suite != "" && s == suite && n == round {
			roundLive += t
		}
	}
	for _, pol := range governed {
		// The cache may not show this controller's last charge yet (a
		// run deleted, charged, and gone from the list above): the
		// charge as written counts.
		pol = r.chargedPolicies.latest(pol)
		var nsCharged, roundCharged int64
		if i := spentIndex(pol, run.Namespace); i >= 0 {
			nsCharged = pol.Status.Spent[i].Tokens
			for _, s := range pol.Status.Spent[i].Suites {
				if s.Suite == suite && s.Round == round {
					roundCharged = s.Tokens
				}
			}
		}
		sp := pol.Spec.Spend
		if b := sp.NamespaceTokens; b != nil && nsCharged+nsLive >= *b {
			return fmt.Sprintf("HarnessPolicy %s rule spend.namespaceTokens: namespace %s has used %d of its %d tokens (%d charged by ended runs, %d by runs present): the run waits until the budget is raised",
				pol.Name, run.Namespace, nsCharged+nsLive, *b, nsCharged, nsLive), nil
		}
		if b := sp.SuiteTokens; b != nil && suite != "" && roundCharged+roundLive >= *b {
			return fmt.Sprintf("HarnessPolicy %s rule spend.suiteTokens: round %d of suite %s has used %d of its %d tokens (%d charged by ended runs, %d by runs present): the run waits until the budget is raised",
				pol.Name, round, suite, roundCharged+roundLive, *b, roundCharged, roundLive), nil
		}
	}
	return "", nil
}

// chargedPolicies keeps the last status this controller wrote of each
// policy it charged, until the cache shows it or a newer one: between a
// deleted run's charge and the cache's copy of it, the run is gone from the
// namespace's list and its tokens in no status the cache shows, and a run
// created then would pass a spent budget.
type chargedPolicies struct {
	mu      sync.Mutex
	written map[string]*harnessv1.HarnessPolicy
}

func (c *chargedPolicies) wrote(pol *harnessv1.HarnessPolicy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.written == nil {
		c.written = map[string]*harnessv1.HarnessPolicy{}
	}
	c.written[pol.Name] = pol.DeepCopy()
}

// latest is pol, or the status this controller wrote of it when that is
// newer than pol's.
func (c *chargedPolicies) latest(pol *harnessv1.HarnessPolicy) *harnessv1.HarnessPolicy {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.written[pol.Name]
	if w == nil || w.UID != pol.UID {
		return pol
	}
	if n, err := resourceversion.CompareResourceVersion(w.ResourceVersion, pol.ResourceVersion); err == nil && n > 0 {
		return w
	}
	delete(c.written, pol.Name) // the cache has it, or newer
	return pol
}
