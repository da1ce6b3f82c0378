package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/report"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

func newReportCommand() *cobra.Command {
	var (
		k                   *kube
		htmlFile, mdFile    string
		jsonFile, junitFile string
	)
	cmd := &cobra.Command{
		Use:   "report SUITE",
		Short: "Report a HarnessSuite's current round: pass rate per agent × fixture with 95% intervals, each run with its evidence digest",
		Long: `Report the current round of a HarnessSuite. The Markdown summary (a table of
pass rate per agent × fixture, with n and the Wilson 95% confidence interval)
goes to standard output, for CI logs; --markdown writes it to a file as well.
--html writes a self-contained page (inline CSS and SVG, nothing fetched)
with a bar chart of the pass rates and their intervals, the table, and every
run with its evidence digest and, where its evidence holds one, its
trajectory (the conversation, read from the evidence ConfigMap's
trajectory.json after its digests are checked). --json and --junit write machine-readable forms
(JUnit XML for CI systems).

The pass rate is passed / (passed + failed): runs with verdict Error (the
harness could not judge the agent) are counted apart.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(cmd, k, args[0], reportFiles{html: htmlFile, markdown: mdFile, json: jsonFile, junit: junitFile})
		},
	}
	fl := cmd.Flags()
	k = newKube(cmd)
	fl.StringVar(&htmlFile, "html", "", "write the HTML report to this file")
	fl.StringVar(&mdFile, "markdown", "", "write the Markdown summary to this file too")
	fl.StringVar(&jsonFile, "json", "", "write the report as JSON to this file (cells with pass rates and intervals, every run with its verdict and evidence digest)")
	fl.StringVar(&junitFile, "junit", "", "write the report as JUnit XML to this file, for CI systems: a testsuite per agent × fixture, a testcase per run (Fail a failure, Error an error, unfinished skipped)")
	return cmd
}

// reportFiles are the files the report is written to besides stdout.
type reportFiles struct{ html, markdown, json, junit string }

func runReport(cmd *cobra.Command, k *kube, name string, files reportFiles) error {
	htmlFile, mdFile := files.html, files.markdown
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
	for _, f := range []struct {
		path  string
		write func(io.Writer) error
	}{{files.json, r.JSON}, {files.junit, r.JUnit}} {
		if f.path == "" {
			continue
		}
		var b bytes.Buffer
		if err := f.write(&b); err != nil {
			return err
		}
		if err := os.WriteFile(f.path, b.Bytes(), 0o644); err != nil { //nolint:gosec // a report for people and CI artifacts to read
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
	}
	if htmlFile != "" {
		addTrajectories(ctx, c, namespace, r)
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

// addTrajectories reads each finished run's evidence ConfigMap, checks its
// digests against the run's status, and gives the run its trajectory for
// the HTML page; a run whose evidence cannot be read or does not verify
// says so instead.
func addTrajectories(ctx context.Context, c client.Client, namespace string, r *report.Report) {
	for i := range r.Cells {
		for j := range r.Cells[i].Runs {
			run := &r.Cells[i].Runs[j]
			if run.EvidenceConfigMap == "" || run.Digest == "" {
				continue
			}
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: run.EvidenceConfigMap}, cm); err != nil {
				run.TrajectoryNote = "evidence not read: " + termsafe.String(err.Error())
				continue
			}
			if _, ok := cm.Data[evidence.TrajectoryName]; !ok {
				continue // an adapter without one (Aider, Antigravity, exec)
			}
			if rep := evidence.VerifyConfigMap(cm.Data, cm.BinaryData, run.Digest); !rep.OK() {
				run.TrajectoryNote = "trajectory not shown: the evidence does not verify"
				continue
			}
			t, err := report.TrajectoryOf([]byte(cm.Data[evidence.TrajectoryName]))
			if err != nil {
				run.TrajectoryNote = "trajectory not shown: " + termsafe.String(err.Error())
				continue
			}
			run.Trajectory = t
		}
	}
}
