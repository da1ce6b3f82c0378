package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/report"
)

func newReportCommand() *cobra.Command {
	var (
		k                *kube
		htmlFile, mdFile string
	)
	cmd := &cobra.Command{
		Use:   "report SUITE",
		Short: "Report a HarnessSuite's current round: pass rate per agent × fixture with 95% intervals, each run with its evidence digest",
		Long: `Report the current round of a HarnessSuite. The Markdown summary (a table of
pass rate per agent × fixture, with n and the Wilson 95% confidence interval)
goes to standard output, for CI logs; --markdown writes it to a file as well.
--html writes a self-contained page (inline CSS and SVG, nothing fetched)
with a bar chart of the pass rates and their intervals, the table, and every
run with its evidence digest.

The pass rate is passed / (passed + failed): runs with verdict Error (the
harness could not judge the agent) are counted apart.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(cmd, k, args[0], htmlFile, mdFile)
		},
	}
	fl := cmd.Flags()
	k = newKube(cmd)
	fl.StringVar(&htmlFile, "html", "", "write the HTML report to this file")
	fl.StringVar(&mdFile, "markdown", "", "write the Markdown summary to this file too")
	return cmd
}

func runReport(cmd *cobra.Command, k *kube, name, htmlFile, mdFile string) error {
	c, namespace, err := k.client()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	suite := &harnessv1.HarnessSuite{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, suite); err != nil {
		return fmt.Errorf("reading HarnessSuite %s/%s: %w", namespace, name, err)
	}
	// Only the current round's runs, by label, a page at a time.
	var runs []harnessv1.HarnessRun
	opts := []client.ListOption{client.InNamespace(namespace), client.Limit(500), client.MatchingLabels{
		harnessv1.LabelSuite: name, harnessv1.LabelSuiteRound: strconv.Itoa(int(suite.Status.Round))}}
	for cont := ""; ; {
		list := &harnessv1.HarnessRunList{}
		if err := c.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return fmt.Errorf("listing the runs of HarnessSuite %s/%s: %w", namespace, name, err)
		}
		for i := range list.Items {
			// Runs an earlier suite of the same name left are not this one's.
			if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.UID == suite.UID {
				runs = append(runs, list.Items[i])
			}
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}
	r := report.Build(suite, runs, time.Now())

	var md bytes.Buffer
	if err := r.Markdown(&md); err != nil {
		return err
	}
	if _, err := cmd.OutOrStdout().Write(md.Bytes()); err != nil {
		return err
	}
	if mdFile != "" {
		if err := os.WriteFile(mdFile, md.Bytes(), 0o644); err != nil { //nolint:gosec // a report for people and CI artifacts to read
			return fmt.Errorf("writing %s: %w", mdFile, err)
		}
	}
	if htmlFile != "" {
		var page bytes.Buffer
		if err := r.HTML(&page); err != nil {
			return err
		}
		if err := os.WriteFile(htmlFile, page.Bytes(), 0o644); err != nil { //nolint:gosec // a report for people and CI artifacts to read
			return fmt.Errorf("writing %s: %w", htmlFile, err)
		}
	}
	return nil
}
