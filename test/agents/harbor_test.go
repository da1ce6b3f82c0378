package agents

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/harbor"
)

// harborTaskInTheImage writes a task folder in Harbor's format whose
// task.toml names the test image by digest, as a Terminal-Bench task names
// its prebuilt environment, and imports it: the work is in /app of the
// image, tests/test.sh reads its files from /tests and writes its reward
// to /logs/verifier, solution/solve.sh reads one from /solution. Nothing
// of it is copied from another project.
func harborTaskInTheImage(t *testing.T, ref string) string {
	t.Helper()
	task := filepath.Join(t.TempDir(), "harbor-env")
	for p, content := range map[string]string{
		"instruction.md": "Write the word \"harbor\" spelled backwards into /app/answer.txt.\n",
		"task.toml": `version = "1.0"
[task]
name = "fixture-harbor-env"
[verifier]
timeout_sec = 60.0
[agent]
timeout_sec = 120.0
[environment]
docker_image = "` + ref + `"
memory_mb = 1024
`,
		"tests/expected.txt": "robrah\n",
		"tests/test.sh": `#!/bin/sh
grep -qx 'ID=` + envOSID + `' /etc/os-release || { echo "not in the task's image"; exit 2; }
if [ "$(cat /app/answer.txt 2>/dev/null)" = "$(cat /tests/expected.txt)" ]; then
  echo 1 > /logs/verifier/reward.txt; exit 0
fi
echo 0 > /logs/verifier/reward.txt
exit 1
`,
		"solution/solve.sh":   "#!/bin/sh\nmkdir -p /app && cp /solution/answer.txt /app/answer.txt\n",
		"solution/answer.txt": "robrah\n",
	} {
		full := filepath.Join(task, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	imported, err := harbor.Read(task, harbor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if imported.Image != ref || imported.Manifest.Environment == nil || imported.Manifest.Environment.Image != ref {
		t.Fatalf("the import did not keep the image: %+v", imported.Manifest.Environment)
	}
	out := t.TempDir()
	if _, err := harbor.Write(out, []*harbor.Task{imported}, harbor.SuiteOptions{Name: "harbor-env", Oracle: true}); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(out, "fixture-harbor-env")
}

func requireHarborReward(t *testing.T, o *Outcome, ref string) {
	t.Helper()
	RequirePass(t, o)
	st := o.Run.Status
	if env := st.Environment; env == nil || env.Image != ref || env.Source != "Fixture" {
		t.Fatalf("status.environment = %+v, want the task's image %s from the fixture", env, ref)
	}
	if len(st.Checks) != 1 || st.Checks[0].Name != harbor.CheckName || st.Checks[0].Reward != "1" || st.Reward != "1" {
		t.Fatalf("checks %+v reward %q, want the verifier's reward 1", st.Checks, st.Reward)
	}
}

// An exec agent, root in the task's image, works in /app as a Harbor agent
// does; it looks for the verifier's and the solution's folders at Harbor's
// paths and in its run dir and finds neither. The imported tests/test.sh
// then runs in the same image, over what the agent left, finds its files
// in /tests and writes the reward to /logs/verifier.
func TestHarborTaskInAnEnvironmentImage(t *testing.T) {
	ref := environmentImage(t)
	o := Run(t, Case{Name: "harbor-env", Adapter: harnessv1.AdapterExec, Fixture: "harbor-env", FixtureDir: harborTaskInTheImage(t, ref),
		Command: []string{"sh", "-c", `for p in /tests /solution /logs/verifier ../fixture/tests ../fixture/solution ../fixture/fixture.yaml; do
  if [ -e "$p" ]; then echo "SEEN $p"; fi
done
echo "probe done, in $(. /etc/os-release; echo $ID) as uid $(id -u)"
mkdir -p /app && echo robrah > /app/answer.txt`}})
	requireHarborReward(t, o, ref)
	log := o.Evidence["output.log"]
	if !strings.Contains(log, "probe done, in "+envOSID+" as uid 0") || strings.Contains(log, "SEEN") {
		t.Fatalf("the agent's probe: %s", log)
	}
}

// The oracle runs the task's solve.sh in the same image, with its folder
// at /solution, and the verifier rewards it.
func TestHarborOracleInAnEnvironmentImage(t *testing.T) {
	ref := environmentImage(t)
	o := Run(t, Case{Name: "harbor-oracle", Adapter: harnessv1.AdapterOracle, Fixture: "harbor-env", FixtureDir: harborTaskInTheImage(t, ref)})
	requireHarborReward(t, o, ref)
}
