package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/runcmd"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

func newEvidenceCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "evidence", Short: "Work with the hashed evidence of runs"}
	cmd.AddCommand(newEvidenceVerifyCommand(), newEvidenceExportCommand())
	return cmd
}

func newEvidenceVerifyCommand() *cobra.Command {
	var k *kube
	var keyFile, trustedFile string
	var pin receiptPins
	cmd := &cobra.Command{
		Use:   "verify RUN|DIR|REFERENCE",
		Short: "Recompute a run's evidence digest from what is stored and say which part differs",
		Long: `Verify the evidence of a run: recompute the digest of every stored part (the
receipt, output.log, each artifact) and compare them with the receipt, and
the receipt's digest with the run's status.evidence.digest.

DIR is an evidence folder written by 'harnessfacts run' or 'harnessfacts
evidence export', written as a path (with a slash: ./NAME, evidence/NAME):
one run's folder (evidence/NAME/<time>), its 'latest' link, or the run's
folder evidence/NAME (its latest run is verified; its 'latest' must be a
relative link to a folder in it). RUN is the name of a HarnessRun on the
cluster, even when a folder of that name is here; its evidence ConfigMap is
read, and the receipt must be of that run (namespace, name, UID, attempt).
REFERENCE is evidence stored in an OCI registry (status.evidence.storedRef,
registry/repository@sha256:..., or oci://...): it is fetched and verified
without the cluster (registry credentials from $DOCKER_CONFIG).

With --key (one PEM public key) or --trusted-keys (a file of PEM public
keys, the operator's list of trusted node keys), the receipt must also be
signed: receipt.dsse.json, a DSSE envelope of an in-toto statement, must
carry a signature by one of those keys over a statement whose predicate is
the receipt and whose subjects are the stored parts. This needs no cluster:
a third party verifies an exported folder offline (docs/evidence.md).

A valid receipt of another run, or of another fixture, is still valid: the
output says what the receipt is about (run, fixture and spec digests, the
checks' results, how the agent ended), and --fixture-digest and
--spec-digest make verification fail unless the receipt names those.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := verifyKeys(keyFile, trustedFile)
			if err != nil {
				return err
			}
			arg := args[0]
			isDir := false
			if fi, err := os.Stat(arg); err == nil && fi.IsDir() {
				isDir = true
			}
			if isDir && writtenAsPath(arg) {
				dir, err := resolveEvidenceDir(cmd, arg)
				if err != nil {
					return err
				}
				report, err := evidence.VerifyDir(dir, "", keys...)
				if err != nil {
					return err
				}
				return printReport(cmd, dir, report, pin)
			}
			if ref, ok := evidence.IsReference(arg); ok && !isDir {
				// Stored evidence: fetched from its registry, no cluster.
				files, err := evidence.Pull(cmd.Context(), ref)
				if err != nil {
					return err
				}
				return printReport(cmd, ref, evidence.VerifyFiles(files, "", keys...), pin)
			}
			if !isDir && writtenAsPath(arg) {
				if _, err := os.Stat(arg); err == nil {
					return fmt.Errorf("%s is not a folder: give the evidence folder, which holds %s", arg, evidence.ReceiptName)
				}
				return fmt.Errorf("no folder %s here (stored evidence is named with its registry and digest: REGISTRY/REPOSITORY@sha256:..., or oci://REGISTRY/REPOSITORY:TAG)", arg)
			}
			if isDir {
				// A run's name never holds a slash, so the rule is plain; a
				// folder of the same name here is said, not used: verifying
				// it would show another run's evidence as the cluster's.
				cmd.PrintErrf("NOTE %s is read as a HarnessRun on the cluster, not as the folder %s here; to verify the folder, write ./%s\n", arg, arg, arg)
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			run, cm, err := runEvidence(cmd.Context(), c, ns, arg)
			if err != nil {
				return err
			}
			report := evidence.VerifyConfigMap(cm.Data, cm.BinaryData, run.Status.Evidence.Digest, keys...)
			receiptOfRun(report, run)
			return printReport(cmd, fmt.Sprintf("HarnessRun %s/%s (ConfigMap %s)", ns, run.Name, cm.Name), report, pin)
		},
	}
	k = newKube(cmd)
	cmd.Flags().StringVar(&keyFile, "key", "", "PEM public key the receipt must be signed with (a HarnessNode's status.evidenceKey.publicKey)")
	cmd.Flags().StringVar(&trustedFile, "trusted-keys", "", "file of PEM public keys, one of which must have signed the receipt")
	cmd.Flags().StringVar(&pin.fixture, "fixture-digest", "", "the fixture's tree digest the receipt must name (harnessfacts fixture digest DIR)")
	cmd.Flags().StringVar(&pin.spec, "spec-digest", "", "the run spec's digest the receipt must name (status.evidence.specDigest)")
	return cmd
}

// receiptPins are what a verified receipt must name besides being valid.
type receiptPins struct{ fixture, spec string }

// verifyKeys reads --key and --trusted-keys; none: signatures are not
// checked against any key.
func verifyKeys(keyFile, trustedFile string) ([]*evidence.PublicKey, error) {
	var keys []*evidence.PublicKey
	for flag, path := range map[string]string{"--key": keyFile, "--trusted-keys": trustedFile} {
		if path == "" {
			continue
		}
		k, err := evidence.ReadPublicKeys(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		if flag == "--key" && len(k) != 1 {
			return nil, fmt.Errorf("--key %s: %d public keys, want one (use --trusted-keys for a list)", path, len(k))
		}
		keys = append(keys, k...)
	}
	return keys, nil
}

func newEvidenceExportCommand() *cobra.Command {
	var k *kube
	cmd := &cobra.Command{
		Use:   "export RUN DIR",
		Short: "Write a run's evidence from its ConfigMap to a folder (receipt, output.log, artifacts) and verify it",
		Long: `Export the evidence of a HarnessRun on the cluster to DIR, in the layout
'harnessfacts run' writes (receipt.json, receipt.sha256, output.log,
artifacts/<path>), so it outlives the run (a run's evidence ConfigMap is
deleted with it) and 'harnessfacts evidence verify DIR' checks it offline.
DIR must not exist or be empty; nothing is overwritten. The export is
verified against the run's status.evidence.digest; a mismatch is an error
(the files are still written, for inspection).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			run, cm, err := runEvidence(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			b, err := evidence.FromConfigMap(cm.Data, cm.BinaryData)
			if err != nil {
				return fmt.Errorf("the evidence ConfigMap %s of HarnessRun %s/%s: %w", cm.Name, ns, run.Name, err)
			}
			if err := b.WriteDir(args[1]); err != nil {
				return fmt.Errorf("writing the evidence to %s: %w", args[1], err)
			}
			report, err := evidence.VerifyDir(args[1], run.Status.Evidence.Digest)
			if err != nil {
				return err
			}
			receiptOfRun(report, run)
			cmd.Printf("exported the evidence of HarnessRun %s/%s to %s\n", ns, run.Name, args[1])
			return printReport(cmd, args[1], report, receiptPins{})
		},
	}
	k = newKube(cmd)
	return cmd
}

// runEvidence reads a run and its evidence ConfigMap.
func runEvidence(ctx context.Context, c client.Client, ns, name string) (*harnessv1.HarnessRun, *corev1.ConfigMap, error) {
	run := &harnessv1.HarnessRun{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, run); err != nil {
		return nil, nil, fmt.Errorf("reading HarnessRun %s/%s: %w", ns, name, err)
	}
	ev := run.Status.Evidence
	if ev == nil || ev.Digest == "" || ev.ConfigMapName == "" {
		return nil, nil, fmt.Errorf("HarnessRun %s/%s has no evidence yet (phase %s)", ns, name, run.Status.Phase)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ev.ConfigMapName}, cm); err != nil {
		return nil, nil, fmt.Errorf("reading the evidence ConfigMap %s: %w", ev.ConfigMapName, err)
	}
	return run, cm, nil
}

// writtenAsPath reports whether arg is written as a path (a slash, ".",
// ".." or a volume), which a HarnessRun's name never is: only such an
// argument is a folder, so `verify hello -n prod` reads the cluster even
// where a folder hello happens to be.
func writtenAsPath(arg string) bool {
	return strings.ContainsRune(arg, '/') || strings.ContainsRune(arg, filepath.Separator) ||
		arg == "." || arg == ".." || filepath.VolumeName(arg) != ""
}

// resolveEvidenceDir is dir itself when it holds a receipt; else the
// folder its 'latest' link names (a run's folder of 'harnessfacts run'),
// which must be a relative link to a folder directly in dir, as
// 'harnessfacts run' makes it: a link that points elsewhere would have the
// verifier report on evidence that is not in the folder handed over. The
// resolved folder is said; without a 'latest', dir (whose report says what
// is missing).
func resolveEvidenceDir(cmd *cobra.Command, dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, evidence.ReceiptName)); err == nil {
		return dir, nil
	}
	latest := filepath.Join(dir, runcmd.LatestLink)
	info, err := os.Lstat(latest)
	if err != nil || info.Mode()&os.ModeSymlink == 0 {
		// No link: dir, or a copied 'latest' folder, which is in dir.
		if err == nil && info.IsDir() {
			return latest, nil
		}
		return dir, nil
	}
	target, err := os.Readlink(latest)
	if err != nil {
		return "", err
	}
	// The link's target is the sender's text: shown inert.
	if target != filepath.Base(target) || target == "." || target == ".." || filepath.VolumeName(target) != "" {
		return "", fmt.Errorf("%s points to %s: only a relative link to a folder directly in %s is followed", latest, termsafe.String(target), dir)
	}
	resolved := filepath.Join(dir, target)
	if ti, err := os.Lstat(resolved); err != nil || !ti.IsDir() {
		return "", fmt.Errorf("%s points to %s, which is not a folder in %s (a link is followed once)", latest, termsafe.String(target), dir)
	}
	cmd.Print(termsafe.String(fmt.Sprintf("%s -> %s\n", latest, resolved)))
	return resolved, nil
}

// receiptOfRun adds a problem to rep when its receipt is not of run's
// current attempt: a valid receipt of another run (or attempt) would
// otherwise verify as this one's.
func receiptOfRun(rep *evidence.Report, run *harnessv1.HarnessRun) {
	r := rep.Receipt
	if r == nil {
		return
	}
	if got := r.Run; got.Namespace != run.Namespace || got.Name != run.Name || got.UID != string(run.UID) || got.Attempt != run.Status.Attempt {
		rep.Problems = append(rep.Problems, evidence.Problem{Part: evidence.ReceiptName, Detail: fmt.Sprintf(
			"the receipt of HarnessRun %s/%s (uid %s, attempt %d), not of %s/%s (uid %s, attempt %d)",
			got.Namespace, got.Name, got.UID, got.Attempt, run.Namespace, run.Name, run.UID, run.Status.Attempt)})
	}
}

// printReport prints what verify found and returns its error. Every text
// it prints is made inert (termsafe): a folder or a stored
// artifact handed over names its own files, and every string of a receipt
// no trusted key signed is the sender's, so a terminal control sequence in
// one could otherwise erase the DIFFERS lines or write "signature: good"
// over what verify said.
// maxDiffersShown bounds the DIFFERS lines: a folder may hold any number of
// parts the receipt does not describe.
const maxDiffersShown = 100

func printReport(cmd *cobra.Command, what string, r *evidence.Report, pin receiptPins) error {
	what = termsafe.String(what)
	if err := r.Err(); err != nil {
		for i, p := range r.Problems {
			if i == maxDiffersShown {
				cmd.PrintErrf("... and %d more\n", len(r.Problems)-i)
				break
			}
			cmd.PrintErrf("DIFFERS %s\n", termsafe.String(p.String()))
		}
		return fmt.Errorf("%s: %s", what, termsafe.String(err.Error()))
	}
	// A pinned digest is judged before anything says "verified", and a
	// report without a receipt matches no pin.
	if pin.fixture != "" || pin.spec != "" {
		rr := r.Receipt
		switch {
		case rr == nil:
			return fmt.Errorf("%s: no receipt to hold to --fixture-digest or --spec-digest", what)
		case pin.fixture != "" && rr.FixtureDigest != pin.fixture:
			return fmt.Errorf("%s: the receipt is of fixture %s, not %s", what, termsafe.String(rr.FixtureDigest), termsafe.String(pin.fixture))
		case pin.spec != "" && rr.SpecDigest != pin.spec:
			return fmt.Errorf("%s: the receipt is of run spec %s, not %s", what, termsafe.String(rr.SpecDigest), termsafe.String(pin.spec))
		}
	}
	parts := 1
	if r.Receipt != nil {
		for _, a := range r.Receipt.Artifacts {
			if a.Stored {
				parts++
			}
		}
	}
	cmd.Printf("verified %s: %s (receipt, output.log and %d artifacts match)\n", what, r.Digest, parts-1)
	if rr := r.Receipt; rr != nil {
		// What the evidence is about: a valid receipt of another run is
		// still valid, so the reader must see whose it is.
		cmd.Print(termsafe.String(fmt.Sprintf("receipt of HarnessRun %s/%s (uid %s, attempt %d) on node %s, finished %s\n", rr.Run.Namespace, rr.Run.Name,
			rr.Run.UID, rr.Run.Attempt, rr.Node, rr.Timings.Finished.Format(time.RFC3339))))
		cmd.Print(termsafe.String(receiptSummary(rr) + "\n"))
	}
	switch {
	case r.SignedBy != "":
		cmd.Printf("signature: good, by trusted key %s\n", r.SignedBy)
	case r.Signed:
		cmd.Printf("signature: present but NOT checked; give --key or --trusted-keys to check it\n")
	default:
		cmd.Printf("signature: none (the evidence is unsigned); only its internal consistency was checked\n")
	}
	return nil
}

// receiptSummary says in one line what a receipt records of the run: its
// fixture and spec, its checks' results and how the agent ended.
func receiptSummary(r *evidence.Receipt) string {
	passed := 0
	var failed []string
	for _, c := range r.Checks {
		if c.Passed {
			passed++
		} else {
			failed = append(failed, c.Name)
		}
	}
	checks := fmt.Sprintf("%d of %d checks passed", passed, len(r.Checks))
	if len(failed) > 0 {
		checks += " (failed: " + strings.Join(failed, ", ") + ")"
	}
	exit := "the agent's exit is not recorded"
	switch e := r.Exit; {
	case e.TimedOut:
		exit = "the agent timed out"
	case e.OOMKilled:
		exit = "the agent was killed for memory"
		if e.OOMCause != "" {
			exit += " (" + e.OOMCause + ")"
		}
	case e.Signal != "":
		exit = "the agent was killed by " + e.Signal
	case e.ExitCode != nil:
		exit = fmt.Sprintf("the agent exited with code %d", *e.ExitCode)
	}
	token := "not seen"
	if r.MCP.TokenSeen {
		token = "seen"
	}
	return fmt.Sprintf("fixture %s, spec %s: %s; %s; MCP token %s", r.FixtureDigest, r.SpecDigest, checks, exit, token)
}
