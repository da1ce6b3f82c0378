package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

func newLogsCommand() *cobra.Command {
	var (
		k       *kube
		follow  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "logs RUN [-f]",
		Short: "Print a finished run's redacted output (output.log of its evidence); -f waits for a running one to finish",
		Long: `Print the agent's output of a finished run: output.log of its evidence
ConfigMap, redacted before it was stored (credentials, token formats) and
bounded by limits.maxOutputBytes. It is read with your own credentials, so
RBAC decides (get on the run and on ConfigMaps of its namespace). Terminal
control sequences in it are shown inert.

With -f on a run that has not finished, the command waits until it has
(the Finished condition) and then prints its output. The output is not yet
streamed while the agent runs: the node-agent does not serve live output.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			run := &harnessv1.HarnessRun{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: args[0]}, run); err != nil {
				return describeErr(err, ns, args[0])
			}
			if !run.Status.Phase.Terminal() {
				if !follow {
					return fmt.Errorf("HarnessRun %s/%s has not finished (phase %s): its output is stored when it ends; -f waits for that", ns, run.Name, orDash(string(run.Status.Phase)))
				}
				cmd.PrintErrf("HarnessRun %s/%s is %s; live output is not served yet: waiting for it to finish\n", ns, run.Name, orDash(string(run.Status.Phase)))
				dc, err := k.dynamic()
				if err != nil {
					return err
				}
				wctx := ctx
				if timeout > 0 {
					var cancel context.CancelFunc
					wctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				if _, err := waitRun(wctx, dc, ns, run.Name, waitFor{condition: harnessv1.ConditionFinished, status: "True"}); err != nil {
					return err
				}
			}
			run, cm, err := runEvidence(ctx, c, ns, args[0])
			if err != nil {
				return err
			}
			b, err := evidence.FromConfigMap(cm.Data, cm.BinaryData)
			if err != nil {
				return fmt.Errorf("the evidence of HarnessRun %s/%s: %w", ns, run.Name, err)
			}
			w := termsafe.NewWriter(cmd.OutOrStdout())
			if _, err := w.Write(b.Output); err != nil {
				return err
			}
			return w.Flush()
		},
	}
	k = newKube(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "wait for a run that has not finished, then print its output")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with -f, how long to wait; 0 waits forever")
	return cmd
}
