package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// plannedRun is one run of the current round's matrix.
type plannedRun struct {
	name    string
	agent   int // index in spec.agents
	fixture suiteFixture
	repeat  int32
}

// planRuns expands the matrix of the current round in creation order:
// repeat by repeat, and within a repeat agent by agent, fixture by fixture,
// so a round cut short (suspended, or superseded) covers every cell evenly.
func planRuns(suite *harnessv1.HarnessSuite, fixtures []suiteFixture) []plannedRun {
	repeats := max(suite.Spec.Repeats, 1)
	plan := make([]plannedRun, 0, int(repeats)*len(suite.Spec.Agents)*len(fixtures))
	for rep := range repeats {
		for a := range suite.Spec.Agents {
			for _, f := range fixtures {
				plan = append(plan, plannedRun{
					name:    SuiteRunName(suite, suite.Status.Round, suite.Spec.Agents[a].Name, f.name, rep),
					agent:   a,
					fixture: f,
					repeat:  rep,
				})
			}
		}
	}
	return plan
}

// SuiteRunName is the deterministic name of a suite's run: the suite's name
// (at most 52 characters, by the schema) and 10 hex digits of a hash of the
// suite's UID, the round, the agent, the fixture and the repeat: at most 63
// characters, the same in every reconcile, different across rounds and
// across a suite deleted and created again under the same name.
func SuiteRunName(suite *harnessv1.HarnessSuite, round int32, agent, fixture string, repeat int32) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%s\x00%s\x00%d", suite.UID, round, agent, fixture, repeat))
	prefix := suite.Name
	if len(prefix) > 52 {
		prefix = prefix[:52]
	}
	return prefix + "-" + hex.EncodeToString(h[:5])
}

// buildRun is the HarnessRun of a planned run: the template, the agent, the
// fixture by ConfigMap, the suite's labels and the fixture hash, owned by
// the suite.
func buildRun(suite *harnessv1.HarnessSuite, pr plannedRun, scheme *runtime.Scheme) (*harnessv1.HarnessRun, error) {
	t := suite.Spec.Template
	agent := suite.Spec.Agents[pr.agent]
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{
			Name:      pr.name,
			Namespace: suite.Namespace,
			Labels: map[string]string{
				harnessv1.LabelSuite:      suite.Name,
				harnessv1.LabelSuiteRound: strconv.Itoa(int(suite.Status.Round)),
				harnessv1.LabelSuiteAgent: agent.Name,
			},
			Annotations: map[string]string{
				harnessv1.AnnotationSuiteRepeat: strconv.Itoa(int(pr.repeat)),
				harnessv1.AnnotationFixtureHash: pr.fixture.hash,
			},
		},
		Spec: harnessv1.HarnessRunSpec{
			Agent: *agent.Agent.DeepCopy(),
			Fixture: harnessv1.FixtureSource{
				ConfigMapRef: &harnessv1.ConfigMapFixture{Name: pr.fixture.name},
				Prompt:       t.Prompt,
			},
			MCP:          t.MCP.DeepCopy(),
			NodeSelector: t.NodeSelector,
			Retries:      t.Retries,
		},
	}
	if len(validation.IsValidLabelValue(pr.fixture.name)) == 0 {
		run.Labels[harnessv1.LabelSuiteFixture] = pr.fixture.name
	}
	if t.Network != nil {
		run.Spec.Network = *t.Network.DeepCopy()
	}
	if t.Isolation != nil {
		run.Spec.Isolation = *t.Isolation.DeepCopy()
	}
	if t.Limits != nil {
		run.Spec.Limits = *t.Limits.DeepCopy()
	}
	if err := controllerutil.SetControllerReference(suite, run, scheme); err != nil {
		return nil, fmt.Errorf("owning run %s: %w", pr.name, err)
	}
	return run, nil
}

// createRuns creates the planned runs that do not exist yet, in plan order,
// while fewer than spec.parallelism runs of the suite are unfinished
// (counting the runs it created that the cache does not show yet). It
// creates nothing when the suite is suspended or may not go on. It returns
// the names of the runs of the plan that exist or are expected.
func (r *HarnessSuiteReconciler) createRuns(ctx context.Context, p *suitePass, plan []plannedRun, runs []*harnessv1.HarnessRun, mayCreate bool) (map[string]bool, error) {
	suite := p.suite
	key := client.ObjectKeyFromObject(suite)
	inCache := make(map[string]*harnessv1.HarnessRun, len(runs))
	active := 0
	for _, run := range runs {
		inCache[run.Name] = run
		if !run.Status.Phase.Terminal() {
			active++
		}
	}
	expected := r.pendingExpectations(key, func(name string) bool { _, ok := inCache[name]; return ok })
	active += len(expected)
	exists := make(map[string]bool, len(plan))
	for name := range expected {
		exists[name] = true
	}
	for name := range inCache {
		exists[name] = true
	}
	if !mayCreate || suite.Spec.Suspend {
		return exists, nil
	}
	room := int(suite.Spec.Parallelism) - active
	var todo []plannedRun
	for _, pr := range plan {
		if room <= 0 {
			break
		}
		if !exists[pr.name] {
			todo = append(todo, pr)
			room--
		}
	}
	if len(todo) == 0 {
		return exists, nil
	}

	var (
		mu   sync.Mutex
		errs []error
		g    errgroup.Group // every error is kept in errs, not only the first
	)
	create := func(pr plannedRun) {
		run, err := buildRun(suite, pr, r.client.Scheme())
		if err == nil {
			// Expected before the request: the watch may deliver the
			// run before Create returns.
			r.expect(key, pr.name)
			err = r.client.Create(ctx, run)
		}
		mu.Lock()
		switch {
		case err == nil:
			exists[pr.name] = true
		case apierrors.IsAlreadyExists(err):
			// Created by an earlier pass whose run the cache has
			// not shown within the expectation's lifetime.
			exists[pr.name] = true
			log.FromContext(ctx).V(1).Info("run already exists", "suite", key, "run", pr.name)
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
			// Certainly not created: it must not hold a slot.
			r.unexpect(key, pr.name)
			errs = append(errs, err)
			if p.refused == "" {
				p.refused = fmt.Sprintf("creating run %s was refused: %v", pr.name, err)
			}
		default:
			// The run may or may not exist: it stays expected
			// until the cache shows it or the expectation expires.
			exists[pr.name] = true
			errs = append(errs, err)
		}
		mu.Unlock()
	}
	g.SetLimit(r.opts.CreateWorkers)
	for _, pr := range todo {
		g.Go(func() error { create(pr); return nil })
	}
	_ = g.Wait()
	if len(errs) > 0 {
		log.FromContext(ctx).Error(errs[0], "creating runs", "suite", key, "failed", len(errs), "of", len(todo))
		return exists, fmt.Errorf("creating %d of %d runs of HarnessSuite %s: %w", len(errs), len(todo), key, errors.Join(errs...))
	}
	return exists, nil
}

func (r *HarnessSuiteReconciler) unexpect(key client.ObjectKey, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.expected[key], name)
}

// deleteEarlierRounds deletes the runs of the suite's earlier rounds the
// cache still shows: only runs the suite owns (runs comes from the owner
// index), each by its UID. A collection delete by label would also take
// runs the suite does not own that carry its label (a run author labels
// their own runs as they like), in effect letting a suite's author delete
// others' runs. Their summary is in status.rounds; a run still going is
// stopped through the cancel protocol (its finalizer keeps it until its
// node-agent let go).
func (r *HarnessSuiteReconciler) deleteEarlierRounds(ctx context.Context, p *suitePass, runs []*harnessv1.HarnessRun) error {
	round := strconv.Itoa(int(p.suite.Status.Round))
	var stale []*harnessv1.HarnessRun
	for _, run := range runs {
		if run.Labels[harnessv1.LabelSuiteRound] != round && run.DeletionTimestamp == nil && metav1.IsControlledBy(run, p.suite) {
			stale = append(stale, run)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	var (
		mu   sync.Mutex
		errs []error
		g    errgroup.Group // every error is kept in errs, not only the first
	)
	g.SetLimit(r.opts.CreateWorkers)
	for _, run := range stale {
		g.Go(func() error {
			// A copy: run is the cache's own (UnsafeDisableDeepCopy).
			del := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace}}
			err := r.client.Delete(ctx, del, client.Preconditions{UID: &run.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("deleting %d of the %d earlier rounds' runs of HarnessSuite %s/%s: %w", len(errs), len(stale), p.suite.Namespace, p.suite.Name, errors.Join(errs...))
	}
	return nil
}
