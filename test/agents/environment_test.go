package agents

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/test/oci"
)

// The environment tests run the hello fixture inside a foreign image: a
// Debian trixie minbase root (hack/environment-rootfs.sh) whose
// /etc/os-release says ID=harnessfacts-env-test, the node being something
// else. The image is assembled without a container engine (test/oci) and
// pulled by digest from a registry on loopback.

const envOSID = "harnessfacts-env-test"

var envImage struct {
	once sync.Once
	ref  string
	reg  *oci.Registry
	err  error
}

// environmentImage pushes the test image once and returns its reference,
// pinned by digest.
func environmentImage(t *testing.T) string {
	t.Helper()
	envImage.once.Do(func() {
		out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "environment-rootfs.sh")).Output()
		if err != nil {
			envImage.err = err
			return
		}
		rootfs := strings.TrimSpace(string(out))
		dir, err := os.MkdirTemp("", "hf-envimage-")
		if err != nil {
			envImage.err = err
			return
		}
		layer, err := oci.LayerFromDir(dir, rootfs)
		if err != nil {
			envImage.err = err
			return
		}
		img, err := oci.Build([]v1.Layer{layer}, oci.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENV_IMAGE_MARK=set-by-the-image"}})
		if err != nil {
			envImage.err = err
			return
		}
		if envImage.reg, err = oci.StartRegistry("127.0.0.1"); err != nil {
			envImage.err = err
			return
		}
		envImage.ref, envImage.err = envImage.reg.Push(context.Background(), img, "tasks/hello-env", "trixie")
		_ = os.RemoveAll(dir) // the registry holds the layer now
	})
	if envImage.err != nil {
		t.Fatalf("the environment image: %v", envImage.err)
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil && strings.Contains(string(b), "ID="+envOSID) {
		t.Fatal("the node's own os-release is the image's: the test would prove nothing")
	}
	return envImage.ref
}

// helloInTheEnvironment is fixtures/hello with one more check, which runs
// in the environment too: the image's os-release is what the check sees.
func helloInTheEnvironment(t *testing.T) string {
	t.Helper()
	src := filepath.Join(testenv.RepoRoot(), "fixtures", "hello")
	dst := filepath.Join(t.TempDir(), "hello")
	if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	manifest := filepath.Join(dst, "fixture.yaml")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	// The check also writes a reward where Harbor's verifiers do, into a
	// /logs/verifier it finds empty whatever the agent left there.
	check := "grep -qx 'ID=" + envOSID + "' /etc/os-release && test \"$ENV_IMAGE_MARK\" = set-by-the-image" +
		` && test -z "$(ls -A /logs/verifier)" && echo 0.5 > /logs/verifier/reward.txt`
	s := strings.Replace(string(b), "checks:\n", "checks:\n- name: in-the-environment\n  shell: '"+strings.ReplaceAll(check, "'", "''")+"'\n", 1)
	if s == string(b) {
		t.Fatal("fixtures/hello has no checks: list to extend")
	}
	if err := os.WriteFile(manifest, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func requireEnvironment(t *testing.T, o *Outcome, ref string) {
	t.Helper()
	RequirePass(t, o)
	env := o.Run.Status.Environment
	if env == nil || env.Image != ref || env.Source != "Run" || !strings.HasSuffix(ref, "@"+env.Digest) || !strings.HasPrefix(env.ConfigDigest, "sha256:") {
		t.Fatalf("status.environment = %+v, want the image %s and its digests", env, ref)
	}
	receipt := o.Evidence["receipt.json"]
	if !strings.Contains(receipt, `"environment":{"image":"`+ref+`","digest":"`+env.Digest+`","configDigest":"`+env.ConfigDigest+`"`) {
		t.Fatalf("the receipt does not record the environment's digests: %s", receipt)
	}
	var found bool
	for _, c := range o.Run.Status.Checks {
		if c.Name == "in-the-environment" {
			found = c.Passed && c.Reward == "0.5"
		}
	}
	if !found || o.Run.Status.Reward != "0.5" {
		t.Fatalf("the check in the environment did not pass with its reward 0.5 (run reward %q): %+v", o.Run.Status.Reward, o.Run.Status.Checks)
	}
	if !strings.Contains(receipt, `"reward":"0.5"`) {
		t.Fatalf("the receipt does not record the reward: %s", receipt)
	}
}

// The exec agent (the fixture's agent.sh, with sh, sed and mkfifo of the
// image) runs inside the image and reaches the run's MCP server over stdio
// through the node's harnessfacts binary, bound in read-only.
func TestExecInAnEnvironmentImage(t *testing.T) {
	ref := environmentImage(t)
	o := Run(t, Case{Name: "exec-env", Adapter: harnessv1.AdapterExec, Fixture: "hello", FixtureDir: helloInTheEnvironment(t),
		Transport: harnessv1.MCPTransportStdio, Environment: ref,
		// The agent, root in the image, plants a reward where the verifier
		// will write its own: the check must not see it.
		Command: []string{"sh", "-c", `. /etc/os-release; echo "os-release ID inside: $ID, uid $(id -u)"; mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && exec sh ../fixture/agent.sh`}})
	requireEnvironment(t, o, ref)
	// An exec agent reports no usage and has no trajectory: output.log is
	// its record.
	requireNoUsage(t, o)
	requireNoTrajectory(t, o)
	if log := o.Evidence["output.log"]; !strings.Contains(log, "os-release ID inside: "+envOSID+", uid 0") {
		t.Fatalf("the agent did not run as root inside the image: %s", log)
	}
}

// Claude Code, the real CLI from the node's install, runs inside the image
// (its glibc, not the node's) against the fake provider.
func TestClaudeCodeInAnEnvironmentImage(t *testing.T) {
	ref := environmentImage(t)
	const key = "sk-ant-api03-planted-claude-env-77c1a0"
	o := Run(t, Case{Name: "claude-env", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello", FixtureDir: helloInTheEnvironment(t),
		Transport: harnessv1.MCPTransportHTTP, Environment: ref, Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key}}})
	requireEnvironment(t, o, ref)
	requireClaudeHello(t, o, harnessv1.MCPTransportHTTP)
	RequireTrajectory(t, o, "mcp__harnessfacts__get_token")
	RequireUsage(t, o, key)
	RequireClean(t, o, key)
}

// A digest the registry does not have is refused before the agent starts,
// with a reason that names the image.
func TestWrongEnvironmentDigestIsRefused(t *testing.T) {
	ref := environmentImage(t)
	repo, _, _ := strings.Cut(ref, "@")
	wrong := repo + "@sha256:" + strings.Repeat("0", 64)
	o := Run(t, Case{Name: "wrong-env", Adapter: harnessv1.AdapterExec, Fixture: "hello", Environment: wrong,
		Command: []string{"sh", "-c", "echo the agent must not run; exit 3"}})
	st := o.Run.Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonEnvironmentUnavailable ||
		!strings.Contains(st.Message, wrong) || !strings.Contains(st.Message, "MANIFEST_UNKNOWN") {
		t.Fatalf("phase %s reason %s: %s", st.Phase, st.Reason, st.Message)
	}
	if st.Agent != nil && st.Agent.ExitCode != nil {
		t.Fatalf("the agent ran: %+v", st.Agent)
	}
}

// An image whose config sets a variable holding a NUL (its registry's
// doing: "x\x00--share-net" would be a bwrap option of its own) is refused
// before the agent starts, as the image's fault (EnvironmentUnavailable),
// naming the variable.
func TestEnvironmentImageWithANulInItsEnvIsRefused(t *testing.T) {
	environmentImage(t) // its registry
	layer, err := oci.LayerFromFiles(t.TempDir(), []oci.File{{Path: "etc/os-release", Mode: 0o644, Content: []byte("ID=" + envOSID + "\n")}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := oci.Build([]v1.Layer{layer}, oci.Config{Env: []string{"PATH=/usr/bin:/bin", "EVIL=x\x00--share-net"}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := envImage.reg.Push(context.Background(), img, "tasks/nul-env", "v1")
	if err != nil {
		t.Fatal(err)
	}
	o := Run(t, Case{Name: "nul-env", Adapter: harnessv1.AdapterExec, Fixture: "hello", Environment: ref,
		Command: []string{"sh", "-c", "echo the agent must not run; exit 3"}})
	st := o.Run.Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonEnvironmentUnavailable ||
		!strings.Contains(st.Message, `the variable "EVIL" to a value holding a NUL byte`) || strings.Contains(st.Message, "share-net") {
		t.Fatalf("phase %s reason %s: %s", st.Phase, st.Reason, st.Message)
	}
	if st.Agent != nil && st.Agent.ExitCode != nil {
		t.Fatalf("the agent ran: %+v", st.Agent)
	}
}

// An image whose links would move one of the sandbox's mounts onto another
// (/tmp a link to /proc) is refused before the agent starts, as the
// image's fault (EnvironmentUnavailable), naming the paths; it was refused
// as the node's (SandboxUnavailable).
func TestEnvironmentImageWhoseLinksMoveAMountIsRefused(t *testing.T) {
	environmentImage(t) // its registry
	layer, err := oci.LayerFromFiles(t.TempDir(), []oci.File{
		{Path: "etc/os-release", Mode: 0o644, Content: []byte("ID=" + envOSID + "\n")},
		{Path: "tmp", Link: "proc"},
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := oci.Build([]v1.Layer{layer}, oci.Config{Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := envImage.reg.Push(context.Background(), img, "tasks/tmp-link", "v1")
	if err != nil {
		t.Fatal(err)
	}
	o := Run(t, Case{Name: "tmp-link", Adapter: harnessv1.AdapterExec, Fixture: "hello", Environment: ref,
		Command: []string{"sh", "-c", "echo the agent must not run; exit 3"}})
	st := o.Run.Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonEnvironmentUnavailable ||
		!strings.Contains(st.Message, "/tmp to /proc") || !strings.Contains(st.Message, "may not move a mount") {
		t.Fatalf("phase %s reason %s: %s", st.Phase, st.Reason, st.Message)
	}
	if st.Agent != nil && st.Agent.ExitCode != nil {
		t.Fatalf("the agent ran: %+v", st.Agent)
	}
}
