package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/harbor"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
)

func newImportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Turn tasks of another harness into HarnessFacts fixtures and a HarnessSuite",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newImportHarborCommand())
	return cmd
}

type importHarborFlags struct {
	out, suite, agentsFile, egress string
	agents, images                 []string
	oracle                         bool
	repeats, parallelism           int32
}

func newImportHarborCommand() *cobra.Command {
	var f importHarborFlags
	cmd := &cobra.Command{
		Use:   "harbor TASK_DIR...",
		Short: "Turn Harbor (Terminal-Bench) task folders into fixture ConfigMaps (a kustomization) and a HarnessSuite",
		Long: `Turn Harbor task folders (instruction.md, task.toml, environment/, tests/,
optional solution/) into HarnessFacts fixtures: one folder per task with its
fixture.yaml, tests/ (the hidden verifier part) and solution/ (hidden from
every agent; run only by the oracle), each made into a ConfigMap by its
kustomization, and a HarnessSuite of the agents × those fixtures. Apply the
result with "kubectl apply -k OUTDIR".

The task's environment is kept as an image reference pinned by digest
(task.toml environment.docker_image, or --image TASK=REF@sha256:...). A task
with only a Dockerfile, or an image named by a tag alone, gets a placeholder
that the fixture parser refuses: its runs end with reason BadFixture before
any agent starts, until you build and push the image and put its reference
in. The import says so on stderr, with every task.toml field it did not
apply. docs/harbor.md has the mapping, field by field.`,
		Example: `  harnessfacts import harbor tasks/* -o harbor-fixtures --agent claude-code:claude-sonnet-4-5 --oracle
  harnessfacts import harbor tasks/fix-git --image fix-git=registry.example/tb/fix-git@sha256:<64 hex> --agents-file agents.yaml
  kubectl apply -k harbor-fixtures`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runImportHarbor(cmd, args, f) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.out, "output", "o", "harbor-fixtures", "the folder to write (a kustomization: one folder per task and suite.yaml)")
	fl.StringVar(&f.suite, "suite", "harbor", "the HarnessSuite's name (more than 64 tasks: NAME-1, NAME-2, ...)")
	fl.StringArrayVar(&f.agents, "agent", nil, "an agent row, ADAPTER or ADAPTER:MODEL (repeatable); add its credentials in suite.yaml")
	fl.StringVar(&f.agentsFile, "agents-file", "", "a YAML list of agent rows ({name, agent}) as in a HarnessSuite's spec.agents")
	fl.BoolVar(&f.oracle, "oracle", false, "add the row \"oracle\", which runs each task's solution/solve.sh in the same sandbox, to validate the tasks")
	fl.StringArrayVar(&f.images, "image", nil, "TASK=REF@sha256:DIGEST: the environment image built for a task (repeatable)")
	fl.Int32Var(&f.repeats, "repeats", 0, "runs per agent × task (default: the API's, 1)")
	fl.Int32Var(&f.parallelism, "parallelism", 0, "the most unfinished runs at once (default: the API's, 10)")
	fl.StringVar(&f.egress, "egress", string(harnessv1.EgressProviderOnly), "the suite's spec.template.network.egress: ProviderOnly, None or Unrestricted")
	return cmd
}

var agentRowName = regexp.MustCompile(`[^a-z0-9]+`)

func runImportHarbor(cmd *cobra.Command, dirs []string, f importHarborFlags) error {
	stderr := cmd.ErrOrStderr()
	so := harbor.SuiteOptions{Name: f.suite, Oracle: f.oracle, Repeats: f.repeats, Parallelism: f.parallelism, Egress: harnessv1.Egress(f.egress)}
	switch so.Egress {
	case harnessv1.EgressProviderOnly, harnessv1.EgressNone, harnessv1.EgressUnrestricted:
	default:
		return fmt.Errorf("--egress %q is not one of ProviderOnly, None, Unrestricted", f.egress)
	}
	if msgs := dns1123Label(f.suite); msgs != "" || len(f.suite) > 49 {
		return fmt.Errorf("--suite %q must be a DNS label of at most 49 characters (runs are named after it)", f.suite)
	}
	if f.agentsFile != "" {
		b, err := os.ReadFile(f.agentsFile)
		if err != nil {
			return err
		}
		if err := yaml.UnmarshalStrict(b, &so.Agents); err != nil {
			return fmt.Errorf("--agents-file %s: %w", f.agentsFile, err)
		}
	}
	for _, a := range f.agents {
		adapter, model, _ := strings.Cut(a, ":")
		known := false
		for _, k := range harnessv1.Adapters {
			known = known || string(k) == adapter
		}
		if !known || adapter == string(harnessv1.AdapterExec) || adapter == string(harnessv1.AdapterOracle) {
			return fmt.Errorf("--agent %q: the adapter must be one of the agent CLIs (exec needs a command: use --agents-file; the oracle: --oracle)", a)
		}
		name := adapter
		if model != "" {
			name = strings.Trim(agentRowName.ReplaceAllString(strings.ToLower(adapter+"-"+model), "-"), "-")
		}
		if len(name) > 40 {
			name = strings.TrimRight(name[:40], "-")
		}
		so.Agents = append(so.Agents, harnessv1.SuiteAgent{Name: name, Agent: harnessv1.AgentSpec{Adapter: harnessv1.Adapter(adapter), Model: model}})
	}
	opts := harbor.Options{Images: map[string]string{}}
	for _, im := range f.images {
		task, ref, ok := strings.Cut(im, "=")
		if !ok || task == "" || ref == "" {
			return fmt.Errorf("--image %q must be TASK=REF@sha256:DIGEST", im)
		}
		opts.Images[task] = ref
	}
	var tasks []*harbor.Task
	for _, d := range dirs {
		t, err := harbor.Read(d, opts)
		if err != nil {
			return err
		}
		tasks = append(tasks, t)
	}
	w, err := harbor.Write(f.out, tasks, so)
	if err != nil {
		return err
	}
	internet := 0
	for _, t := range tasks {
		for _, warning := range t.Warnings {
			fmt.Fprintf(stderr, "warning: %s: %s\n", t.Name, termsafe.String(warning))
		}
		if t.BuildContext != "" {
			fmt.Fprintf(stderr, "ACTION NEEDED: %s has no image pinned by digest. Build %s, push it, and either run the import again with --image %s=REGISTRY/REPO@sha256:DIGEST or put that reference in %s. Until then its runs end with reason BadFixture before any agent starts.\n",
				t.Name, termsafe.String(t.BuildContext), t.Name, filepath.Join(f.out, t.Name, "fixture.yaml"))
		}
		if t.AllowInternet {
			internet++
		}
	}
	if internet > 0 && so.Egress != harnessv1.EgressUnrestricted {
		fmt.Fprintf(stderr, "note: %d of %d tasks allow the internet in Harbor (environment.allow_internet, default true); the suite's agents reach only what egress %s allows, and checks have no network: a task that downloads at run time needs it in its image (or --egress Unrestricted for the agent)\n",
			internet, len(tasks), so.Egress)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Imported %d Harbor tasks into %s (%d files); suite %s.\nApply with: kubectl apply -k %s\n", len(tasks), f.out, len(w.Files), strings.Join(w.Suites, ", "), f.out)
	return nil
}

func dns1123Label(s string) string {
	if regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`).MatchString(s) {
		return ""
	}
	return "not a DNS label"
}
