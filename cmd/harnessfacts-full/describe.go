package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
)

func newDescribeCommand() *cobra.Command {
	var k *kube
	cmd := &cobra.Command{
		Use:   "describe RUN",
		Short: "Show a run in words: spec, phase and verdict, conditions, agent, checks, artifacts, evidence, events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			run := &harnessv1.HarnessRun{}
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, run); err != nil {
				return describeErr(err, ns, args[0])
			}
			evs := &eventsv1.EventList{}
			if err := c.List(cmd.Context(), evs, client.InNamespace(ns)); err != nil {
				// Events are a courtesy: a user who may not list them
				// still gets the run.
				cmd.PrintErrf("(events not shown: %v)\n", err)
			}
			var mine []eventsv1.Event
			for _, e := range evs.Items {
				if e.Regarding.Kind == "HarnessRun" && e.Regarding.Name == run.Name && e.Regarding.UID == run.UID {
					mine = append(mine, e)
				}
			}
			sort.Slice(mine, func(i, j int) bool { return eventTime(mine[i]).Before(eventTime(mine[j])) })
			return describeRun(cmd.OutOrStdout(), run, mine, time.Now())
		},
	}
	k = newKube(cmd)
	return cmd
}

func eventTime(e eventsv1.Event) time.Time {
	if e.Series != nil {
		return e.Series.LastObservedTime.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.DeprecatedLastTimestamp.Time
}

// describeRun prints what a run is and did. Every field may hold text of
// someone else's choosing (the agent's output, a fixture author's check
// names, a run author's model, Events any namespace editor writes): each
// free-text field is folded to one line (oneLine), and everything printed
// goes through a termsafe.Writer, so no field can move the cursor, rewrite
// the Verdict line above it, retitle the window or write the clipboard.
func describeRun(out io.Writer, run *harnessv1.HarnessRun, events []eventsv1.Event, now time.Time) (err error) {
	safe := termsafe.NewWriter(out)
	defer func() {
		if ferr := safe.Flush(); err == nil {
			err = ferr
		}
	}()
	out = safe
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	st := &run.Status
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("Name:\t%s", run.Name)
	p("Namespace:\t%s", run.Namespace)
	if of := run.Labels[harnessv1.LabelRetryOf]; of != "" {
		p("Retry of:\t%s", of)
	}
	if s := run.Labels[harnessv1.LabelSuite]; s != "" {
		p("Suite:\t%s (round %s)", s, run.Labels[harnessv1.LabelSuiteRound])
	}
	p("Created:\t%s (%s ago)", run.CreationTimestamp.UTC().Format(time.RFC3339), duration.HumanDuration(now.Sub(run.CreationTimestamp.Time)))
	a := run.Spec.Agent
	p("Agent:\t%s%s", a.Adapter, ifSet(" model ", oneLine(a.Model)))
	switch f := run.Spec.Fixture; {
	case f.ConfigMapRef != nil:
		p("Fixture:\tConfigMap %s", f.ConfigMapRef.Name)
	case f.Inline != nil:
		p("Fixture:\tinline")
	}
	if run.Spec.Cancel {
		p("Cancel:\trequested")
	}
	p("Phase:\t%s", orDash(string(st.Phase)))
	p("Verdict:\t%s%s", orDash(string(st.Verdict)), ifSet(", failure class ", string(st.FailureClass)))
	p("Reason:\t%s", orDash(st.Reason))
	if st.Message != "" {
		p("Message:\t%s", oneLine(st.Message))
	}
	p("Node:\t%s%s", orDash(st.NodeName), ifSet(", attempt ", itoa(st.Attempt)))
	if st.StartTime != nil {
		end := now
		if st.CompletionTime != nil {
			end = st.CompletionTime.Time
		}
		p("Started:\t%s (ran %s)", st.StartTime.UTC().Format(time.RFC3339), duration.HumanDuration(end.Sub(st.StartTime.Time)))
	}
	if st.Sandbox != nil {
		p("Sandbox:\t%s%s", orDash(st.Sandbox.Mode), ifSet(", fell back: ", st.Sandbox.FallbackReason))
	}
	if ag := st.Agent; ag != nil {
		exit := "-"
		switch {
		case ag.ExitCode != nil:
			exit = fmt.Sprintf("exit %d", *ag.ExitCode)
		case ag.Signal != "":
			exit = "signal " + ag.Signal
		}
		p("Agent CLI:\t%s %s, %s, %d ms, %d bytes of output%s%s", ag.Adapter, orDash(ag.CLIVersion), exit, ag.DurationMilliseconds, ag.OutputBytes,
			flag(ag.Truncated, " (truncated)"), flag(ag.OOMKilled, ", OOM-killed")+flag(ag.TimedOut, ", timed out"))
		for _, n := range ag.Notes {
			p("  Note:\t%s", oneLine(n))
		}
	}
	if m := st.MCP; m != nil {
		p("MCP:\t%s, %d calls, token issued %t, seen %t%s", m.Transport, m.Calls, m.TokenIssued, m.TokenSeen, ifSet(": ", m.Message))
	}
	if n := st.Network; n != nil {
		denied := ""
		if len(n.DeniedHosts) > 0 {
			denied = " (" + strings.Join(n.DeniedHosts, ", ") + ")"
		}
		p("Network:\t%s, %d allowed, %d denied%s", n.Egress, n.Allowed, n.Denied, printable(denied))
	}
	if e := st.Evidence; e != nil {
		p("Evidence:\t%s%s", orDash(e.Digest), ifSet(" in ConfigMap ", e.ConfigMapName))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	section := func(title string, header string, rows [][]string) {
		if len(rows) == 0 {
			return
		}
		fmt.Fprintf(out, "%s:\n", title)
		tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "  %s\n", header)
		for _, r := range rows {
			fmt.Fprintf(tw, "  %s\n", strings.Join(r, "\t"))
		}
		_ = tw.Flush()
	}
	var rows [][]string
	for _, c := range st.Conditions {
		rows = append(rows, []string{oneLine(c.Type), string(c.Status), oneLine(c.Reason), oneLine(c.Message)})
	}
	section("Conditions", "Type\tStatus\tReason\tMessage", rows)
	rows = nil
	for _, c := range st.Checks {
		rows = append(rows, []string{oneLine(c.Name), map[bool]string{true: "passed", false: "FAILED"}[c.Passed], fmt.Sprintf("%d ms", c.DurationMilliseconds), oneLine(c.Message)})
	}
	section("Checks", "Name\tResult\tTime\tMessage", rows)
	rows = nil
	for _, a := range st.Artifacts {
		what := a.SHA256
		if a.Rejected != "" {
			what = "rejected: " + oneLine(a.Rejected)
		}
		rows = append(rows, []string{oneLine(a.Path), itoa64(a.Size), what})
	}
	section("Artifacts", "Path\tSize\tsha256", rows)
	if ag := st.Agent; ag != nil && ag.OutputTail != "" {
		fmt.Fprintf(out, "Output (redacted tail; 'harnessfacts logs %s' for all of it):\n", run.Name)
		for _, l := range strings.Split(strings.TrimRight(ag.OutputTail, "\n"), "\n") {
			fmt.Fprintf(out, "  %s\n", printable(l))
		}
	}
	rows = nil
	for _, e := range events {
		rows = append(rows, []string{oneLine(e.Type), oneLine(e.Reason), duration.HumanDuration(now.Sub(eventTime(e))), oneLine(e.ReportingController), oneLine(e.Note)})
	}
	if len(rows) == 0 {
		fmt.Fprintln(out, "Events:  <none>")
	}
	section("Events", "Type\tReason\tAge\tFrom\tMessage", rows)
	return nil
}

func ifSet(prefix, s string) string {
	if s == "" || s == "0" {
		return ""
	}
	return prefix + s
}

func flag(b bool, s string) string {
	if b {
		return s
	}
	return ""
}

// oneLine folds s to one line without control characters: a message or
// output line may carry an agent's bytes, and a terminal escape in them must
// not reach the user's terminal.
func oneLine(s string) string { return printable(strings.Join(strings.Fields(s), " ")) }

// printable makes captured text inert in a terminal (termsafe).
func printable(s string) string { return termsafe.String(s) }

func itoa(i int32) string   { return fmt.Sprint(i) }
func itoa64(i int64) string { return fmt.Sprint(i) }
