package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
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
		Short: "Print a run's redacted output: live from its node-agent while it runs (-f follows), stored in its evidence once it ended",
		Long: `Print the agent's output of a run, redacted (the run's credentials and
common token formats are removed before anything is served or stored).
Terminal control sequences in it are shown inert.

While the run is Running, the output comes from the node-agent running it
(status.liveOutput): what it kept so far (the last 64 KiB), and with -f
everything the agent prints until it ends. The node-agent serves it only to
callers the API server authenticates and who may get harnessruns/log of the
run (a SubjectAccessReview, as kubectl logs needs pods/log). Your own
credentials authenticate you: a client certificate of your kubeconfig, or
else its bearer token, which is then sent to the node-agent over TLS to the
certificate the run's status pins.

Once the run has ended, the command prints output.log of its evidence
ConfigMap (bounded by limits.maxOutputBytes), read with your credentials
(get on the run and on ConfigMaps of its namespace). With -f on a run that
has not started yet, it waits for it to start.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			cfg, err := k.restConfig()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			w := outputWriter(cmd.OutOrStdout(), follow && isTerminal(cmd.OutOrStdout()))
			defer func() { _ = w.Flush() }()
			run, err := liveOrWait(ctx, cmd, c, cfg, ns, args[0], follow, w)
			if err != nil {
				return err
			}
			if run == nil {
				return nil // printed live
			}
			if err := printStored(ctx, c, ns, run.Name, run.UID, w); err != nil {
				return err
			}
			if follow {
				// As after a followed stream: how the run ended.
				cmd.PrintErrf("HarnessRun %s/%s ended: phase %s, verdict %s\n", ns, run.Name, run.Status.Phase, orDash(string(run.Status.Verdict)))
			}
			return nil
		},
	}
	k = newKube(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow a running run's output until the agent ends (waiting for a run that has not started)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long; 0 waits forever")
	return cmd
}

// outputWriter is where the agent's output is printed: made inert, and with
// marked set each line behind termsafe.LinePrefix. With -f on a terminal,
// harnessfacts' own line on how the run ended shows among the agent's, and
// an agent printed that line itself ("ended: phase Succeeded, verdict
// Pass") and then waited out its deadline; piped or redirected, the output
// is the agent's bytes alone, as kubectl logs prints them.
func outputWriter(out io.Writer, marked bool) *termsafe.Writer {
	if marked {
		return termsafe.NewWriter(termsafe.NewLinePrefixer(out, termsafe.LinePrefix))
	}
	return termsafe.NewWriter(out)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// liveOrWait prints a running run's live output and returns nil, or returns
// the run once it has ended (or when it has not started and follow is off,
// an error), for its stored output to be printed.
func liveOrWait(ctx context.Context, cmd *cobra.Command, c client.Client, cfg *rest.Config, ns, name string, follow bool, w *termsafe.Writer) (*harnessv1.HarnessRun, error) {
	said := ""
	var uid types.UID
	for {
		run := &harnessv1.HarnessRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
			return nil, describeErr(err, ns, name)
		}
		if uid == "" {
			uid = run.UID
		} else if err := sameRun(run, uid); err != nil {
			return nil, err
		}
		st := &run.Status
		if st.Phase.Terminal() {
			return run, nil
		}
		if st.Phase == harnessv1.RunRunning && st.LiveOutput != nil {
			err := readLive(ctx, cfg, st.LiveOutput, follow, w)
			switch {
			case err == nil && !follow:
				cmd.PrintErrf("(HarnessRun %s/%s is still running: -f follows its output)\n", ns, name)
				return nil, nil
			case err == nil:
				return nil, finished(ctx, cmd, c, ns, name, uid)
			case !errors.Is(err, errNotServed):
				return nil, err
			}
			// Not served (yet, or any more): look at the run again.
		} else if !follow {
			if st.Phase == harnessv1.RunRunning {
				return nil, fmt.Errorf("HarnessRun %s/%s is running, but its node-agent serves no live output (status.liveOutput is empty: the node-agent runs with --logs-bind-address=0 or is older); its output is stored when it ends", ns, name)
			}
			return nil, fmt.Errorf("HarnessRun %s/%s has not started (phase %s): -f waits for it", ns, name, orDash(string(st.Phase)))
		}
		if now := string(st.Phase); now != said {
			said = now
			if st.Phase == harnessv1.RunRunning && st.LiveOutput == nil {
				cmd.PrintErrf("HarnessRun %s/%s is running, but its node-agent serves no live output: waiting for it to finish\n", ns, name)
			} else if st.Phase != harnessv1.RunRunning {
				cmd.PrintErrf("HarnessRun %s/%s is %s: waiting for it to start\n", ns, name, orDash(now))
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("HarnessRun %s/%s: %w", ns, name, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// finished waits, after the live stream ended, for the run to be Finished
// and says how it ended, on stderr.
func finished(ctx context.Context, cmd *cobra.Command, c client.Client, ns, name string, uid types.UID) error {
	for {
		run := &harnessv1.HarnessRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
			return describeErr(err, ns, name)
		}
		if err := sameRun(run, uid); err != nil {
			return err
		}
		if run.Status.Phase.Terminal() {
			cmd.PrintErrf("HarnessRun %s/%s ended: phase %s, verdict %s\n", ns, name, run.Status.Phase, orDash(string(run.Status.Verdict)))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("HarnessRun %s/%s: the agent's output ended, the run did not: %w", ns, name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// printStored prints output.log of a finished run's evidence.
func printStored(ctx context.Context, c client.Client, ns, name string, uid types.UID, w *termsafe.Writer) error {
	run, cm, err := runEvidence(ctx, c, ns, name)
	if err != nil {
		return err
	}
	if err := sameRun(run, uid); err != nil {
		return err
	}
	// The ConfigMap is the namespace's to edit; the digest in status only
	// the node-agent's to write: what is printed as the run's output must
	// be what that digest vouches for.
	if rep := evidence.VerifyConfigMap(cm.Data, cm.BinaryData, run.Status.Evidence.Digest); !rep.OK() {
		return fmt.Errorf("the stored output of HarnessRun %s/%s does not match its evidence digest %s, so it is not shown: %w (harnessfacts evidence verify %s says what differs)",
			ns, run.Name, run.Status.Evidence.Digest, rep.Err(), run.Name)
	}
	b, err := evidence.FromConfigMap(cm.Data, cm.BinaryData)
	if err != nil {
		return fmt.Errorf("the evidence of HarnessRun %s/%s: %w", ns, run.Name, err)
	}
	_, err = w.Write(b.Output)
	return err
}

// sameRun: the command looks the run up by name again as it waits; a run
// deleted and made again under that name meanwhile is another run, whose
// output or end is not the one asked for.
func sameRun(run *harnessv1.HarnessRun, uid types.UID) error {
	if run.UID != uid {
		return fmt.Errorf("HarnessRun %s/%s was deleted and made again (UID %s, was %s) while its output was followed: stopped", run.Namespace, run.Name, run.UID, uid)
	}
	return nil
}
