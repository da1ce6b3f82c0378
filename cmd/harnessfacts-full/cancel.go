package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func newCancelCommand() *cobra.Command {
	var (
		k *kube
		o *output
	)
	cmd := &cobra.Command{
		Use:   "cancel RUN...",
		Short: "Stop runs: sets spec.cancel, and the run ends with reason Cancelled (its evidence is kept)",
		Long: `Cancel runs by setting spec.cancel to true. A run not yet started ends at
once; a running one is stopped by its node-agent, which kills the agent's
process tree and still records what it knows (status, evidence). The run
ends in phase Failed with reason Cancelled; 'harnessfacts wait RUN' returns
then. A finished run is left as it is. With -o (name, yaml, json,
jsonpath=...) each run is printed as the API server holds it after the
command.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := o.printer()
			if err != nil {
				return err
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			say := func(run *harnessv1.HarnessRun, format string, a ...any) error {
				if p != nil {
					return p.PrintObj(run, cmd.OutOrStdout())
				}
				cmd.Printf(format, a...)
				return nil
			}
			for _, name := range args {
				run := &harnessv1.HarnessRun{}
				if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
					return describeErr(err, ns, name)
				}
				var err error
				switch {
				case run.Status.Phase.Terminal():
					err = say(run, "harnessrun.harnessfacts.io/%s already finished (phase %s, verdict %s)\n", name, run.Status.Phase, orDash(string(run.Status.Verdict)))
				case run.Spec.Cancel:
					err = say(run, "harnessrun.harnessfacts.io/%s cancel already requested\n", name)
				default:
					// The UID is a precondition: a run deleted and made
					// again under its name since the read is not the one
					// cancelled (the API server refuses to change a UID).
					patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"uid":%q},"spec":{"cancel":true}}`, run.UID))
					if err := c.Patch(cmd.Context(), run, patch); err != nil {
						if uidChanged(err) {
							return fmt.Errorf("HarnessRun %s/%s was deleted and made again since it was read: the new run was not cancelled (run the command again to cancel it)", ns, name)
						}
						return describeErr(err, ns, name)
					}
					err = say(run, "harnessrun.harnessfacts.io/%s cancel requested\n", name)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	k = newKube(cmd)
	o = newOutput(cmd)
	return cmd
}

func newRetryCommand() *cobra.Command {
	var (
		k *kube
		o *output
	)
	cmd := &cobra.Command{
		Use:   "retry RUN",
		Short: "Create a new run with the same spec and a new name, labelled as a retry of RUN",
		Long: `Create a new HarnessRun with RUN's spec (cancel cleared) and a generated name
(RUN's name and a random suffix). It carries the label
harnessfacts.io/retry-of=RUN and the annotation harnessfacts.io/retry-of-uid,
so 'kubectl get hfrun -l harnessfacts.io/retry-of=RUN' lists RUN's retries.
RUN's labels are copied, except a suite's: the retry is not part of the
suite's round. The new run's name is printed; -o name prints only that
(NEW=$(harnessfacts retry RUN -o name)), -o yaml|json the new run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := o.printer()
			if err != nil {
				return err
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			old := &harnessv1.HarnessRun{}
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, old); err != nil {
				return describeErr(err, ns, args[0])
			}
			run := retryOf(old)
			if err := c.Create(cmd.Context(), run); err != nil {
				return fmt.Errorf("creating a retry of HarnessRun %s/%s: %w", ns, old.Name, err)
			}
			if p != nil {
				return p.PrintObj(run, cmd.OutOrStdout())
			}
			cmd.Printf("harnessrun.harnessfacts.io/%s created (a retry of %s)\n", run.Name, old.Name)
			return nil
		},
	}
	k = newKube(cmd)
	o = newOutput(cmd)
	return cmd
}

// retryOf is a new run with old's spec and user labels, linked to old.
func retryOf(old *harnessv1.HarnessRun) *harnessv1.HarnessRun {
	base := old.Name
	if orig := old.Labels[harnessv1.LabelRetryOf]; orig != "" {
		// A retry of a retry is named after the first run, so names do
		// not grow with each retry.
		base = orig
	}
	// The API server appends 5 characters to generateName; a run's name
	// may have 63.
	if len(base) > 57 {
		base = base[:57]
	}
	labels := map[string]string{}
	for k, v := range old.Labels {
		switch k {
		case harnessv1.LabelSuite, harnessv1.LabelSuiteRound, harnessv1.LabelSuiteAgent, harnessv1.LabelSuiteFixture:
			continue
		}
		labels[k] = v
	}
	labels[harnessv1.LabelRetryOf] = old.Name
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: base + "-",
			Namespace:    old.Namespace,
			Labels:       labels,
			Annotations:  map[string]string{harnessv1.AnnotationRetryOfUID: string(old.UID)},
		},
		Spec: *old.Spec.DeepCopy(),
	}
	run.Spec.Cancel = false
	return run
}

// uidChanged says whether a patch carrying the read run's UID was refused
// because the run under that name now has another.
func uidChanged(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}
