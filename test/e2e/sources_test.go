//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/gitserver"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
)

// helloFolder is fixtures/hello as path → content, under prefix.
func helloFolder(t *testing.T, prefix string) map[string]string {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(), "fixtures", "hello")
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[prefix+filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sourceRun is the hello run with another fixture source.
func sourceRun(ns, name string, src harnessv1.FixtureSource) *harnessv1.HarnessRun {
	r := helloRun(ns, harnessv1.MCPTransportHTTP)
	r.Name = name
	r.Spec.Fixture = src
	return r
}

func runToEnd(t *testing.T, r *harnessv1.HarnessRun) harnessv1.HarnessRunStatus {
	t.Helper()
	if err := k8s.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return waitTerminal(t, client.ObjectKeyFromObject(r)).Status
}

// receiptOf reads the run's receipt from its evidence ConfigMap.
func receiptOf(t *testing.T, ns string, st harnessv1.HarnessRunStatus) evidence.Receipt {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: st.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	var r evidence.Receipt
	if err := json.Unmarshal([]byte(cm.Data[evidence.ReceiptName]), &r); err != nil {
		t.Fatalf("the receipt: %v", err)
	}
	return r
}

func failedWith(t *testing.T, name string, st harnessv1.HarnessRunStatus, reason string, words ...string) {
	t.Helper()
	if st.Phase != harnessv1.RunFailed || st.Reason != reason {
		t.Errorf("%s: %s/%s %q, want Failed with reason %s", name, st.Phase, st.Reason, st.Message, reason)
		return
	}
	for _, w := range words {
		if !strings.Contains(st.Message, w) {
			t.Errorf("%s: the message %q does not say %q", name, st.Message, w)
		}
	}
	t.Logf("%s: %s: %s", name, st.Reason, st.Message)
}

// Git and OCI fixtures on the real API server, with the node-agent and
// bwrap: the hello fixture from a git repository (git http-backend on
// loopback) at a pinned commit and as an OCI artifact (the registry on
// loopback) each run to Pass; a wrong commit and a wrong digest end Failed
// with FixtureUnavailable; a private repository is read only with its
// Secret, which reaches the node-agent through the run source.
func TestGitAndOCIFixtures(t *testing.T) {
	ns := newNamespace(t, "e2e-sources")
	helloDir := filepath.Join(testenv.RepoRoot(), "fixtures", "hello")
	want, err := fixture.FromDir(helloDir, fixture.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	public := gitserver.Start(t, "", "")
	repo := public.Repo(t, "tasks", true)
	files := helloFolder(t, "tasks/hello/")
	files["README.md"] = "tasks\n"
	commit := repo.Commit(files, "hello")
	// The branch moves on: the run must still get the pinned commit.
	files["tasks/hello/workspace/greeting.txt"] = "moved on\n"
	repo.Commit(files, "later")

	private := gitserver.Start(t, "x-access-token", "e2e-git-token")
	privRepo := private.Repo(t, "private", true)
	privCommit := privRepo.Commit(helloFolder(t, ""), "hello")
	if err := k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-cred"},
		Type: corev1.SecretTypeBasicAuth, Data: map[string][]byte{"username": []byte("x-access-token"), "password": []byte("e2e-git-token")}}); err != nil {
		t.Fatal(err)
	}

	t.Run("a git fixture at a pinned commit passes", func(t *testing.T) {
		st := runToEnd(t, sourceRun(ns, "git-hello", harnessv1.FixtureSource{Git: &harnessv1.GitFixture{URL: repo.URL, Commit: commit, Path: "tasks/hello"}}))
		if st.Phase != harnessv1.RunSucceeded || st.Verdict != harnessv1.VerdictPass {
			t.Fatalf("phase %s verdict %s: %s\n%s", st.Phase, st.Verdict, st.Message, tailOf(st))
		}
		fs := st.FixtureSource
		if fs == nil || fs.Type != "Git" || fs.URL != repo.URL || fs.Commit != commit || fs.Path != "tasks/hello" {
			t.Errorf("status.fixtureSource %+v", fs)
		}
		if st.Evidence.FixtureDigest != want.Digest {
			t.Errorf("fixture digest %s, fixtures/hello's is %s", st.Evidence.FixtureDigest, want.Digest)
		}
		if r := receiptOf(t, ns, st); r.FixtureSource == nil || r.FixtureSource.Commit != commit || r.FixtureDigest != want.Digest {
			t.Errorf("the receipt's fixture source %+v, digest %s", r.FixtureSource, r.FixtureDigest)
		}
		// The second run starts from the node's cache.
		st = runToEnd(t, sourceRun(ns, "git-hello-again", harnessv1.FixtureSource{Git: &harnessv1.GitFixture{URL: repo.URL, Commit: commit, Path: "tasks/hello"}}))
		if st.Verdict != harnessv1.VerdictPass || st.FixtureSource == nil || !st.FixtureSource.Cached {
			t.Errorf("second run: verdict %s, fixtureSource %+v: want Pass from the cache", st.Verdict, st.FixtureSource)
		}
	})
	t.Run("a wrong commit is refused", func(t *testing.T) {
		wrong := strings.Repeat("5", 40)
		st := runToEnd(t, sourceRun(ns, "git-wrong-commit", harnessv1.FixtureSource{Git: &harnessv1.GitFixture{URL: repo.URL, Commit: wrong, Path: "tasks/hello"}}))
		failedWith(t, "wrong commit", st, harnessv1.ReasonFixtureUnavailable, wrong, "not in the repository")
		if st.FixtureSource == nil || st.FixtureSource.Commit != wrong {
			t.Errorf("status.fixtureSource %+v: want the commit asked for", st.FixtureSource)
		}
	})
	t.Run("a private repository needs its Secret", func(t *testing.T) {
		src := harnessv1.GitFixture{URL: privRepo.URL, Commit: privCommit}
		st := runToEnd(t, sourceRun(ns, "git-private-nocred", harnessv1.FixtureSource{Git: &src}))
		failedWith(t, "no Secret", st, harnessv1.ReasonFixtureUnavailable, "asks for credentials")
		withSecret := src
		withSecret.SecretRef = &harnessv1.LocalObjectReference{Name: "git-cred"}
		st = runToEnd(t, sourceRun(ns, "git-private", harnessv1.FixtureSource{Git: &withSecret}))
		if st.Verdict != harnessv1.VerdictPass {
			t.Fatalf("with the Secret: %s/%s %s", st.Phase, st.Verdict, st.Message)
		}
		// Once cached, still not without the Secret.
		st = runToEnd(t, sourceRun(ns, "git-private-nocred-cached", harnessv1.FixtureSource{Git: &src}))
		failedWith(t, "no Secret, once cached", st, harnessv1.ReasonFixtureUnavailable, "asks for credentials")
		missing := src
		missing.SecretRef = &harnessv1.LocalObjectReference{Name: "no-such-secret"}
		st = runToEnd(t, sourceRun(ns, "git-private-missing-secret", harnessv1.FixtureSource{Git: &missing}))
		failedWith(t, "a missing Secret", st, harnessv1.ReasonCredentialsUnavailable, "no-such-secret")
		for _, r := range []string{"git-private", "git-private-nocred", "git-private-missing-secret"} {
			var got harnessv1.HarnessRun
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: r}, &got); err != nil {
				t.Fatal(err)
			}
			if b, _ := json.Marshal(got.Status); strings.Contains(string(b), "e2e-git-token") {
				t.Errorf("run %s: the git token is in status", r)
			}
		}
	})

	ociRef, err := fixturesource.Push(context.Background(), want, evidenceRegistry.Host+"/fixtures/hello:v1")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("an OCI fixture pinned by digest passes", func(t *testing.T) {
		st := runToEnd(t, sourceRun(ns, "oci-hello", harnessv1.FixtureSource{OCI: &harnessv1.OCIFixture{Ref: ociRef}}))
		if st.Phase != harnessv1.RunSucceeded || st.Verdict != harnessv1.VerdictPass {
			t.Fatalf("phase %s verdict %s: %s\n%s", st.Phase, st.Verdict, st.Message, tailOf(st))
		}
		if fs := st.FixtureSource; fs == nil || fs.Type != "OCI" || fs.Ref != ociRef || !strings.HasSuffix(ociRef, "@"+fs.Digest) {
			t.Errorf("status.fixtureSource %+v for %s", fs, ociRef)
		}
		if st.Evidence.FixtureDigest != want.Digest {
			t.Errorf("fixture digest %s, fixtures/hello's is %s", st.Evidence.FixtureDigest, want.Digest)
		}
		if r := receiptOf(t, ns, st); r.FixtureSource == nil || r.FixtureSource.Ref != ociRef {
			t.Errorf("the receipt's fixture source %+v", r.FixtureSource)
		}
	})
	t.Run("a wrong digest is refused", func(t *testing.T) {
		wrong := ociRef[:strings.LastIndex(ociRef, "@")] + "@sha256:" + strings.Repeat("7", 64)
		st := runToEnd(t, sourceRun(ns, "oci-wrong-digest", harnessv1.FixtureSource{OCI: &harnessv1.OCIFixture{Ref: wrong}}))
		failedWith(t, "wrong digest", st, harnessv1.ReasonFixtureUnavailable, strings.Repeat("7", 64), "MANIFEST_UNKNOWN")
	})
	waitNoRunDirs(t)
}

// `harnessfacts fixture push` pushes fixtures/hello as an artifact, and
// `harnessfacts run -f` runs it from the registry on this machine with no
// cluster, as it runs a git fixture of a private repository with the
// credentials of its --secrets folder.
func TestLocalRunOfGitAndOCIFixtures(t *testing.T) {
	helloDir := filepath.Join(testenv.RepoRoot(), "fixtures", "hello")
	out, err := exec.Command(binary, "fixture", "push", helloDir, evidenceRegistry.Host+"/fixtures/hello-cli:v1").CombinedOutput()
	if err != nil {
		t.Fatalf("harnessfacts fixture push: %v\n%s", err, out)
	}
	ociRef := strings.TrimSpace(string(out))
	digest, err := exec.Command(binary, "fixture", "digest", helloDir).Output()
	if err != nil {
		t.Fatal(err)
	}

	private := gitserver.Start(t, "x-access-token", "local-git-token")
	repo := private.Repo(t, "private", false)
	commit := repo.Commit(helloFolder(t, "hello/"), "hello")
	secrets := t.TempDir()
	if err := os.MkdirAll(filepath.Join(secrets, "git-cred"), 0o700); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"username": "x-access-token", "password": "local-git-token"} {
		if err := os.WriteFile(filepath.Join(secrets, "git-cred", k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	runs := filepath.Join(openDir(t), "runs")
	for name, fixtureYAML := range map[string]string{
		"oci": "    oci:\n      ref: " + ociRef + "\n",
		"git": "    git:\n      url: " + repo.URL + "\n      commit: " + commit + "\n      path: hello\n      secretRef:\n        name: git-cred\n",
	} {
		runFile := filepath.Join(t.TempDir(), "run.yaml")
		doc := "apiVersion: harnessfacts.io/v1alpha1\nkind: HarnessRun\nmetadata:\n  name: local-" + name + "\n  namespace: default\nspec:\n" +
			"  agent:\n    adapter: exec\n    command: [sh, ../fixture/agent.sh]\n  fixture:\n" + fixtureYAML
		if err := os.WriteFile(runFile, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binary, "run", "-f", runFile, "--secrets", secrets, "--evidence", filepath.Join(t.TempDir(), "evidence"), "--run-root", runs)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: harnessfacts run: %v\nstdout:\n%s\nstderr:\n%s", name, err, stdout.String(), stderr.String())
		}
		for _, want := range []string{"verdict: Pass", "fixtureDigest: " + strings.TrimSpace(string(digest))} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("%s: the printed status lacks %q:\n%s", name, want, stdout.String())
			}
		}
		if strings.Contains(stdout.String()+stderr.String(), "local-git-token") {
			t.Errorf("%s: the git token was printed", name)
		}
	}
	entries, _ := os.ReadDir(runs)
	for _, e := range entries {
		if e.Name() != executor.FixtureCacheDir {
			t.Errorf("run dir left behind in %s: %s", runs, e.Name())
		}
	}
}
