//go:build !windows

package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/runcmd"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

// sealedEvidence is a signed bundle whose receipt is of run, as a
// node-agent (or `harnessfacts run`) seals it.
func sealedEvidence(t *testing.T, key *evidence.Key, run evidence.RunRef, output string) *evidence.Bundle {
	t.Helper()
	now := time.Now()
	b, err := evidence.SealLog(evidence.Receipt{Run: run, Node: "node-1", Agent: evidence.Agent{Adapter: harnessv1.AdapterExec},
		Timings: evidence.Timings{Started: now, Finished: now}}, evidence.BytesLog(output), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sign(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	return b
}

// verifyCommand runs `harnessfacts evidence verify ARGS` in this process.
func verifyCommand(args ...string) (stdout, stderr string, err error) {
	cmd := newEvidenceVerifyCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

// A bare name is a HarnessRun on the cluster, even where a folder of that
// name is (the folder is named on stderr, and ./NAME verifies it); with no
// cluster to reach it fails rather than verify the folder. The receipt must
// be of the run verified: a ConfigMap holding a valid receipt of another
// run, or of another attempt, fails, naming both. A real API server.
func TestVerifyReadsTheRunNotAFolderOfItsName(t *testing.T) {
	const ns = "prod"
	c, kubeconfig := apiServerWithNamespace(t, ns)
	ctx := context.Background()
	key, pub := signingKey(t)
	// mk creates a finished run whose evidence ConfigMap holds the
	// receipt receiptOf makes of it.
	mk := func(name string, attempt int32, receiptOf func(*harnessv1.HarnessRun) evidence.RunRef) {
		run := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: harnessv1.HarnessRunSpec{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex},
				Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-hello"}}}}
		if err := c.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
		b := sealedEvidence(t, key, receiptOf(run), "cluster\n")
		data, bin := b.ConfigMapData()
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-evidence", Namespace: ns}, Data: data, BinaryData: bin}); err != nil {
			t.Fatal(err)
		}
		run.Status = harnessv1.HarnessRunStatus{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictPass, Attempt: attempt,
			Evidence: &harnessv1.EvidenceStatus{Digest: b.Digest, ConfigMapName: name + "-evidence", SignedBy: key.Public().ID}}
		if err := c.Status().Update(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	own := func(r *harnessv1.HarnessRun) evidence.RunRef {
		return evidence.RunRef{Namespace: r.Namespace, Name: r.Name, UID: string(r.UID), Attempt: 1}
	}
	mk("hello", 1, own)
	mk("other", 1, func(*harnessv1.HarnessRun) evidence.RunRef {
		return evidence.RunRef{Namespace: ns, Name: "hello", UID: "not-this-one", Attempt: 1}
	})
	mk("retried", 2, own)

	// A folder hello here, with valid evidence of a local run of that name.
	t.Chdir(t.TempDir())
	if err := sealedEvidence(t, key, evidence.RunRef{Namespace: "default", Name: "hello", Attempt: 1}, "local\n").WriteDir("hello"); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := verifyCommand("hello", "-n", ns, "--kubeconfig", kubeconfig, "--key", pub)
	if err != nil || !strings.Contains(out, "verified HarnessRun prod/hello (ConfigMap hello-evidence)") ||
		!strings.Contains(errOut, "NOTE hello is read as a HarnessRun on the cluster, not as the folder hello here; to verify the folder, write ./hello") {
		t.Errorf("verify hello -n prod, with a folder hello here: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if out, _, err := verifyCommand("hello", "-n", ns, "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--key", pub); err == nil {
		t.Errorf("verify hello with no cluster to reach verified something:\n%s", out)
	}
	if out, errOut, err := verifyCommand("./hello", "--key", pub); err != nil || !strings.Contains(out, "verified ./hello: ") ||
		!strings.Contains(out, "receipt of HarnessRun default/hello") {
		t.Errorf("verify ./hello: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}

	for name, want := range map[string]string{
		"other":   "DIFFERS receipt.json: the receipt of HarnessRun prod/hello (uid not-this-one, attempt 1), not of prod/other (uid ",
		"retried": ", attempt 1), not of prod/retried (uid ",
	} {
		out, errOut, err := verifyCommand(name, "-n", ns, "--kubeconfig", kubeconfig, "--key", pub)
		if err == nil || !strings.Contains(errOut, want) {
			t.Errorf("verify %s, whose ConfigMap holds another run's (or attempt's) valid receipt: %v, want %q\nstdout:\n%s\nstderr:\n%s", name, err, want, out, errOut)
		}
	}
}

// A run's folder (evidence/NAME) is verified through its 'latest' link only
// when the link is relative and names a folder directly in it, as
// `harnessfacts run` makes it; the resolved folder is said. A link that
// points outside the folder handed over (absolute, or up) is refused, so
// the report is never about evidence elsewhere. evidence/NAME/latest given
// itself, as the README shows, still verifies.
func TestLatestLinkStaysInTheRunsFolder(t *testing.T) {
	key, pub := signingKey(t)
	b := sealedEvidence(t, key, evidence.RunRef{Namespace: "default", Name: "hello", Attempt: 1}, "done\n")
	base := t.TempDir()
	runDir := filepath.Join(base, "evidence", "hello")
	if err := b.WriteDir(filepath.Join(runDir, "20261202T001500Z")); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(base, "elsewhere")
	if err := b.WriteDir(elsewhere); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(runDir, runcmd.LatestLink)

	for _, target := range []string{elsewhere, "../../elsewhere", "20261202T001500Z/../../../elsewhere"} {
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		out, _, err := verifyCommand(runDir, "--key", pub)
		if err == nil || !strings.Contains(err.Error(), link+" points to "+target+": only a relative link to a folder directly in "+runDir+" is followed") {
			t.Errorf("latest -> %s (outside %s): %v\n%s", target, runDir, err, out)
		}
	}

	_ = os.Remove(link)
	if err := os.Symlink("20261202T001500Z", link); err != nil {
		t.Fatal(err)
	}
	resolved := filepath.Join(runDir, "20261202T001500Z")
	out, errOut, err := verifyCommand(runDir, "--key", pub)
	if err != nil || !strings.Contains(out, link+" -> "+resolved+"\n") || !strings.Contains(out, "verified "+resolved+": "+b.Digest) {
		t.Errorf("latest -> 20261202T001500Z: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if out, errOut, err := verifyCommand(link, "--key", pub); err != nil || !strings.Contains(out, "verified "+link+": "+b.Digest) {
		t.Errorf("verify %s: %v\nstdout:\n%s\nstderr:\n%s", link, err, out, errOut)
	}
}

// signingKey makes an evidence signing key and writes its public part to a
// file, as --key takes it.
func signingKey(t *testing.T) (*evidence.Key, string) {
	t.Helper()
	key, err := evidence.LoadOrCreateKey(filepath.Join(t.TempDir(), "keys", "evidence-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(t.TempDir(), "key.pub")
	if err := os.WriteFile(pub, []byte(key.Public().PEM), 0o644); err != nil {
		t.Fatal(err)
	}
	return key, pub
}

// A folder handed over is the sender's: its file names, and every string of
// a receipt that no trusted key signed, are theirs, and verify prints them.
// A terminal control sequence in any of them is shown inert, never sent to
// the reader's terminal, where it could erase the DIFFERS lines or write
// "signature: good" over "signature: none".
func TestVerifyPrintsNoControlSequenceOfTheBundle(t *testing.T) {
	const esc = "\x1b[1A\x1b[2K\x1b]52;c;ZXZpbA==\x07"
	now := time.Now()
	b, err := evidence.SealLog(evidence.Receipt{Run: evidence.RunRef{Namespace: "default", Name: "hello", Attempt: 1},
		Node: "node-1" + esc, Agent: evidence.Agent{Adapter: harnessv1.AdapterExec},
		Timings: evidence.Timings{Started: now, Finished: now}}, evidence.BytesLog("done\n"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	// Unsigned and consistent: verified, the receipt's node printed.
	out, errOut, err := verifyCommand(dir)
	if err != nil {
		t.Fatalf("verify %s: %v\n%s%s", dir, err, out, errOut)
	}
	if strings.ContainsRune(out+errOut, 0x1b) || !strings.Contains(out, "on node node-1^[[1A") {
		t.Errorf("verify printed the receipt's control sequences as they are:\n%q\n%q", out, errOut)
	}
	// A file of the sender's naming, and a key to check against: DIFFERS lines.
	if err := os.WriteFile(filepath.Join(dir, "x"+esc), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, pub := signingKey(t)
	out, errOut, err = verifyCommand(dir, "--key", pub)
	if err == nil {
		t.Fatalf("verify %s with a key, unsigned: no error\n%s", dir, out)
	}
	if strings.ContainsRune(out+errOut+err.Error(), 0x1b) || !strings.Contains(errOut, "DIFFERS x^[[1A") {
		t.Errorf("verify printed the folder's control sequences as they are:\nstdout %q\nstderr %q\nerr %q", out, errOut, err)
	}
}

// A run killed for its socket buffers (cgroup v1) says so in the receipt
// and in what verify prints of it, not only "killed for memory".
func TestVerifySaysWhatPassedTheMemoryLimit(t *testing.T) {
	now := time.Now()
	const cause = "its TCP socket buffers (60 MiB) and the rest of its memory (5 MiB) together passed it"
	b, err := evidence.SealLog(evidence.Receipt{Run: evidence.RunRef{Namespace: "default", Name: "hello", Attempt: 1},
		Node: "node-1", Agent: evidence.Agent{Adapter: harnessv1.AdapterExec},
		Exit:    evidence.Exit{OOMKilled: true, OOMCause: cause},
		Timings: evidence.Timings{Started: now, Finished: now}}, evidence.BytesLog("done\n"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := verifyCommand(dir)
	if err != nil {
		t.Fatalf("verify %s: %v\n%s%s", dir, err, out, errOut)
	}
	if !strings.Contains(out, "the agent was killed for memory ("+cause+")") {
		t.Errorf("verify did not say what passed the memory limit:\n%s", out)
	}
}

// A path that is not a folder here is never read as a registry reference:
// `verify evidence/t1/latest` from another directory went to Docker Hub
// (the default registry) with the user's credentials, where whoever holds
// that name decides what is verified. Only a reference that names its
// registry and is pinned by digest, or an oci:// URL, is stored evidence;
// the rest is a missing folder, said without dialling anything (a proxy
// that records every connection stands in for the network).
func TestVerifyOfAMissingFolderStaysOffTheNetwork(t *testing.T) {
	var dialled []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dialled = append(dialled, r.Method+" "+r.Host)
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer proxy.Close()
	t.Setenv("HTTPS_PROXY", proxy.URL)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Chdir(t.TempDir())
	for _, arg := range []string{"evidence/t1/latest", "./evidence/t1", "../t1", "/nonexistent/evidence", "evidence/hello/latest/receipt.json", "library/evidence@sha256:" + strings.Repeat("a", 64)} {
		_, _, err := verifyCommand(arg)
		if err == nil || !strings.Contains(err.Error(), "no folder "+arg+" here") {
			t.Errorf("verify %s: %v, want it said to be a missing folder", arg, err)
		}
	}
	if len(dialled) > 0 {
		t.Errorf("verify of missing folders dialled %v", dialled)
	}
	// A file given where the folder belongs is said to be one.
	if err := os.WriteFile("receipt.json", []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := verifyCommand("./receipt.json"); err == nil || !strings.Contains(err.Error(), "./receipt.json is not a folder: give the evidence folder") {
		t.Errorf("verify of a file: %v", err)
	}
	for arg, want := range map[string]bool{
		"oci://registry.test/e:tag": true, "registry.test/e@sha256:" + strings.Repeat("a", 64): true,
		"localhost/e@sha256:" + strings.Repeat("a", 64): true, "127.0.0.1:5000/e@sha256:" + strings.Repeat("a", 64): true,
		"registry.test/e:tag": false, "evidence/t1@sha256:" + strings.Repeat("a", 64): false, "./x.y/e@sha256:" + strings.Repeat("a", 64): false,
	} {
		if _, got := evidence.IsReference(arg); got != want {
			t.Errorf("IsReference(%q) = %t, want %t", arg, got, want)
		}
	}
}
