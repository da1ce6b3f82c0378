package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

func newEvidenceCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "evidence", Short: "Work with the hashed evidence of runs"}
	cmd.AddCommand(newEvidenceVerifyCommand())
	return cmd
}

func newEvidenceVerifyCommand() *cobra.Command {
	var kubeconfig, namespace string
	cmd := &cobra.Command{
		Use:   "verify RUN|DIR",
		Short: "Recompute a run's evidence digest from what is stored and say which part differs",
		Long: `Verify the evidence of a run: recompute the digest of every stored part (the
receipt, output.log, each artifact) and compare them with the receipt, and
the receipt's digest with the run's status.evidence.digest.

DIR is an evidence folder written by 'harnessfacts run'. RUN is the name of
a HarnessRun on the cluster; its evidence ConfigMap is read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fi, err := os.Stat(args[0]); err == nil && fi.IsDir() {
				report, err := evidence.VerifyDir(args[0], "")
				if err != nil {
					return err
				}
				return printReport(cmd, args[0], report)
			}
			return verifyRun(cmd, kubeconfig, namespace, args[0])
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster config or $KUBECONFIG when empty")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "the run's namespace (default: the kubeconfig's)")
	return cmd
}

func verifyRun(cmd *cobra.Command, kubeconfig, namespace, name string) error {
	c, namespace, err := userClient(kubeconfig, namespace)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	run := &harnessv1.HarnessRun{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, run); err != nil {
		return fmt.Errorf("reading HarnessRun %s/%s: %w", namespace, name, err)
	}
	ev := run.Status.Evidence
	if ev == nil || ev.Digest == "" || ev.ConfigMapName == "" {
		return fmt.Errorf("HarnessRun %s/%s has no evidence yet (phase %s)", namespace, name, run.Status.Phase)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ev.ConfigMapName}, cm); err != nil {
		return fmt.Errorf("reading the evidence ConfigMap %s: %w", ev.ConfigMapName, err)
	}
	report := evidence.VerifyConfigMap(cm.Data, cm.BinaryData, ev.Digest)
	return printReport(cmd, fmt.Sprintf("HarnessRun %s/%s (ConfigMap %s)", namespace, name, ev.ConfigMapName), report)
}

func printReport(cmd *cobra.Command, what string, r *evidence.Report) error {
	if err := r.Err(); err != nil {
		for _, p := range r.Problems {
			cmd.PrintErrf("DIFFERS %s\n", p)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	parts := 1
	if r.Receipt != nil {
		for _, a := range r.Receipt.Artifacts {
			if a.Stored {
				parts++
			}
		}
	}
	cmd.Printf("verified %s: %s (receipt, output.log and %d artifacts match)\n", what, r.Digest, parts-1)
	return nil
}
