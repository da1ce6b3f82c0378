package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	nodeagent "github.com/harnessfacts/harnessfacts/node-agent"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

type runFlags struct {
	file        string
	fixturesDir string
	secretsDir  string
	evidenceDir string
	runRoot     string
	agentCLIs   string
	hidden      []string
	uid, gid    int
	bwrap       string
}

func newRunCommand() *cobra.Command {
	f := runFlags{}
	cmd := &cobra.Command{
		Use:   "run -f run.yaml",
		Short: "Run one HarnessRun on this machine, without a cluster",
		Long: `Run one HarnessRun on this machine with the node-agent's executor: the same
fixture handling, sandbox, MCP token server, checks, artifacts, redaction and
evidence as on a cluster. The run is defaulted and validated exactly as the
API server would. spec.fixture.configMapRef NAME is read from the folder
--fixtures/NAME (or from the folder holding run.yaml when it has a
fixture.yaml); secretKeyRef NAME/KEY from the file --secrets/NAME/KEY.
At start it removes the run dirs of earlier local runs that were killed
(those whose owner lock no process holds) from --run-root.

The final status is printed as YAML and the evidence is written to
--evidence (verify it with 'harnessfacts evidence verify DIR'). The exit code
is 0 for verdict Pass, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runLocal(ctx, cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "the HarnessRun YAML")
	fl.StringVar(&f.fixturesDir, "fixtures", "", "folder of fixture folders, for spec.fixture.configMapRef")
	fl.StringVar(&f.secretsDir, "secrets", "", "folder of Secret folders (NAME/KEY files), for credentials")
	fl.StringVar(&f.evidenceDir, "evidence", "", "where to write the evidence (default ./evidence/<run name>)")
	fl.StringVar(&f.runRoot, "run-root", filepath.Join(os.TempDir(), "harnessfacts-runs"), "folder of the run dirs")
	fl.StringVar(&f.agentCLIs, "agent-clis", "", "folder of the agent CLIs' commands (hack/install-agent-clis.sh PREFIX/bin; /opt/harnessfacts/agents/bin in the image); empty: PATH")
	fl.StringSliceVar(&f.hidden, "hide", nil, hideUsage)
	fl.IntVar(&f.uid, "run-as-uid", sandbox.DefaultUID, "unprivileged uid the agent runs as")
	fl.IntVar(&f.gid, "run-as-gid", sandbox.DefaultGID, "unprivileged gid the agent runs as")
	fl.StringVar(&f.bwrap, "bwrap", "", "bubblewrap binary (default: bwrap on PATH)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// errNotPass makes the exit code 1 without another message.
var errNotPass = errors.New("the run did not pass")

func runLocal(ctx context.Context, cmd *cobra.Command, f runFlags) error {
	hidden, err := hiddenPaths(f.hidden)
	if err != nil {
		return err
	}
	run, err := nodeagent.ReadRunFile(ctx, f.file)
	if err != nil {
		return err
	}
	sources := nodeagent.LocalSources{FixturesDir: f.fixturesDir, SecretsDir: f.secretsDir}
	if f.fixturesDir == "" {
		// A run.yaml kept in its fixture's folder names that folder.
		if dir := filepath.Dir(f.file); fileExists(filepath.Join(dir, "fixture.yaml")) {
			sources.FixtureDir = dir
		}
	}
	exec, err := nodeagent.NewExecutor(nodeagent.ExecutorOptions{
		Sources: sources, RunRoot: f.runRoot, Hidden: hidden, UID: f.uid, GID: f.gid,
		Sandbox: sandbox.Options{Bwrap: f.bwrap}, Adapters: adapters.New(adapters.Config{CLIDir: f.agentCLIs}),
	})
	if err != nil {
		return err
	}
	// A local run killed before its end (kill -9, a closed laptop) leaves
	// its run dir, credential copies included. Those whose owner lock no
	// process holds are removed now; a run dir another `harnessfacts run`
	// still holds is left alone, so runs may share a run root.
	removed, err := exec.RemoveAbandoned()
	for _, d := range removed {
		cmd.PrintErrf("removed the run dir %s that a killed run left behind\n", d)
	}
	if err != nil {
		cmd.PrintErrf("WARNING could not remove every abandoned run dir in %s: %v\n", f.runRoot, err)
	}
	final, res := nodeagent.RunLocally(ctx, exec, run, "")
	evidenceDir := f.evidenceDir
	if evidenceDir == "" {
		evidenceDir = filepath.Join("evidence", run.Name)
	}
	if res.Evidence != nil {
		if err := nodeagent.WriteEvidenceDir(evidenceDir, res.Evidence); err != nil {
			return fmt.Errorf("writing the evidence: %w", err)
		}
		if final.Status.Evidence != nil {
			final.Status.Evidence.ConfigMapName = ""
		}
	}
	out, err := yaml.Marshal(map[string]any{"status": final.Status})
	if err != nil {
		return err
	}
	if _, err := cmd.OutOrStdout().Write(out); err != nil {
		return err
	}
	for _, w := range res.Warnings {
		cmd.PrintErrf("WARNING %s: %s\n", w.Reason, w.Message)
	}
	if res.Evidence != nil {
		cmd.PrintErrf("evidence written to %s\n", evidenceDir)
	}
	if final.Status.Verdict != harnessv1.VerdictPass {
		return errNotPass
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
