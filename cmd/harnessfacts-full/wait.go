package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// waitFor is a parsed --for=condition=TYPE[=STATUS].
type waitFor struct {
	condition string
	status    metav1.ConditionStatus
}

func parseWaitFor(s string) (waitFor, error) {
	rest, ok := strings.CutPrefix(s, "condition=")
	if !ok || rest == "" {
		return waitFor{}, fmt.Errorf("--for=%q: want condition=TYPE or condition=TYPE=STATUS (e.g. condition=Finished)", s)
	}
	w := waitFor{condition: rest, status: metav1.ConditionTrue}
	if t, st, ok := strings.Cut(rest, "="); ok {
		w.condition = t
		switch strings.ToLower(st) {
		case "true":
			w.status = metav1.ConditionTrue
		case "false":
			w.status = metav1.ConditionFalse
		case "unknown":
			w.status = metav1.ConditionUnknown
		default:
			return waitFor{}, fmt.Errorf("--for=%q: the status must be True, False or Unknown", s)
		}
	}
	return w, nil
}

func newWaitCommand() *cobra.Command {
	var (
		k       *kube
		o       *output
		forFlag string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait RUN... [--for=condition=Finished] [--timeout=10m]",
		Short: "Wait until runs have a condition, like kubectl wait (default: Finished, whatever the verdict)",
		Long: `Wait until each named HarnessRun has the condition (True unless
--for=condition=TYPE=False), watching the API server, and print one line per
run with its phase and verdict. Finished is True at the end of any run, so
'harnessfacts wait RUN' returns once the run has ended; Ready is True only for
verdict Pass. It fails when --timeout passes first or a run is deleted.
With -o (name, yaml, json, jsonpath=...) each run is printed as it was
when it met the condition, e.g. -o jsonpath='{.status.verdict}'.
'kubectl wait --for=condition=Finished harnessrun/RUN' works the same way.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := parseWaitFor(forFlag)
			if err != nil {
				return err
			}
			p, err := o.printer()
			if err != nil {
				return err
			}
			dc, err := k.dynamic()
			if err != nil {
				return err
			}
			ns, err := k.namespace()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			for _, name := range args {
				run, err := waitRun(ctx, dc, ns, name, w)
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err) {
						return fmt.Errorf("timed out after %s waiting for condition %s=%s on HarnessRun %s/%s", timeout, w.condition, w.status, ns, name)
					}
					return err
				}
				if p != nil {
					if err := p.PrintObj(run, cmd.OutOrStdout()); err != nil {
						return err
					}
					continue
				}
				cmd.Printf("harnessrun.harnessfacts.io/%s condition met: %s=%s (phase %s, verdict %s)\n", name, w.condition, w.status,
					run.Status.Phase, orDash(string(run.Status.Verdict)))
			}
			return nil
		},
	}
	k = newKube(cmd)
	o = newOutput(cmd)
	cmd.Flags().StringVar(&forFlag, "for", "condition="+harnessv1.ConditionFinished, "condition=TYPE[=STATUS] to wait for")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait; 0 waits forever")
	return cmd
}

// waitRun watches one run (list, then watch from its resourceVersion, again
// after a dropped watch) until it has the condition.
func waitRun(ctx context.Context, dc dynamic.Interface, ns, name string, w waitFor) (*harnessv1.HarnessRun, error) {
	ri := dc.Resource(runsResource).Namespace(ns)
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return ri.Watch(ctx, o)
		},
	}
	var got *harnessv1.HarnessRun
	exists := func(store cache.Store) (bool, error) {
		if _, ok, err := store.GetByKey(ns + "/" + name); err != nil || !ok {
			return true, apierrors.NewNotFound(runsResource.GroupResource(), name)
		}
		return false, nil
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, exists, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("HarnessRun %s/%s was deleted while waiting", ns, name)
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		run := &harnessv1.HarnessRun{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, run); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(run.Status.Conditions, w.condition)
		// As kubectl wait: a condition observed for an older generation
		// does not count.
		if c != nil && c.Status == w.status && c.ObservedGeneration >= run.Generation {
			got = run
			return true, nil
		}
		return false, nil
	})
	return got, err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
