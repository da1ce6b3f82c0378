package executor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
)

// TestCheckMessagesAreRedactedAndInert: a check's "could not run" message
// names what the agent wrote (a link's name and target, a gitdir's path),
// and an agent that named a link after the run's credential had it in
// status and in the signed receipt in clear, escape sequences included.
func TestCheckMessagesAreRedactedAndInert(t *testing.T) {
	const secret = "sk-live-S3CRETv4lu3x9q7w"
	r, err := redact.New(redact.Options{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	results := []harnessv1.CheckResult{{Name: "c",
		Message:     "the check could not run: the workspace holds 1 symbolic link(s): link-" + secret + " -> ../fixture/\x1b[31mred\r\n",
		RewardError: "reward.txt of " + secret}}
	inertCheckMessages(r, results)
	for _, s := range []string{results[0].Message, results[0].RewardError} {
		if strings.Contains(s, secret) || strings.Contains(s, "\x1b") {
			t.Errorf("not redacted or not inert: %q", s)
		}
	}
}

// TestChecksImportNoModuleOfTheWorkspace: a check runs in the workspace,
// and `python3 -c`/`-m` put the working directory first on sys.path: a
// json/ the agent left there answered `python3 -m json.tool` and every
// check that imports json with exit 0. The checks' environment turns that
// off outside environment images (checkPythonEnv).
func TestChecksImportNoModuleOfTheWorkspace(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 here")
	}
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "json"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "json", "__init__.py"), []byte("import os\nos._exit(0)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", "import json, sys; json.loads('1'); sys.exit(7)")
	cmd.Dir = ws
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, checkPythonEnv...)
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("python3 -c in the workspace: %v, want exit 7 from the real json module", err)
	}
}
