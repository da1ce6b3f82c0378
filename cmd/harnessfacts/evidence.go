package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
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
	cmd := &cobra.Command{
		Use:   "verify RUN|DIR|REFERENCE",
		Short: "Recompute a run's evidence digest from what is stored and say which part differs",
		Long: `Verify the evidence of a run: recompute the digest of every stored part (the
receipt, output.log, each artifact) and compare them with the receipt, and
the receipt's digest with the run's status.evidence.digest.

DIR is an evidence folder written by 'harnessfacts run' or 'harnessfacts
evidence export': one run's folder (evidence/NAME/<time>), its 'latest'
link, or the run's folder evidence/NAME (its latest run is verified). RUN is
the name of a HarnessRun on the cluster; its evidence ConfigMap is read.
REFERENCE is evidence stored in an OCI registry (status.evidence.storedRef,
registry/repository@sha256:..., or oci://...): it is fetched and verified
without the cluster (registry credentials from $DOCKER_CONFIG).

With --key (one PEM public key) or --trusted-keys (a file of PEM public
keys, the operator's list of trusted node keys), the receipt must also be
signed: receipt.dsse.json, a DSSE envelope of an in-toto statement, must
carry a signature by one of those keys over a statement whose predicate is
the receipt and whose subjects are the stored parts. This needs no cluster:
a third party verifies an exported folder offline (docs/evidence.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := verifyKeys(keyFile, trustedFile)
			if err != nil {
				return err
			}
			if fi, err := os.Stat(args[0]); err != nil || !fi.IsDir() {
				if ref, ok := evidence.IsReference(args[0]); ok {
					// Stored evidence: fetched from its registry, no cluster.
					files, err := evidence.Pull(cmd.Context(), ref)
					if err != nil {
						return err
					}
					return printReport(cmd, ref, evidence.VerifyFiles(files, "", keys...))
				}
			}
			if fi, err := os.Stat(args[0]); err == nil && fi.IsDir() {
				dir := resolveEvidenceDir(args[0])
				report, err := evidence.VerifyDir(dir, "", keys...)
				if err != nil {
					return err
				}
				return printReport(cmd, dir, report)
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			run, cm, err := runEvidence(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			report := evidence.VerifyConfigMap(cm.Data, cm.BinaryData, run.Status.Evidence.Digest, keys...)
			return printReport(cmd, fmt.Sprintf("HarnessRun %s/%s (ConfigMap %s)", ns, run.Name, cm.Name), report)
		},
	}
	k = newKube(cmd)
	cmd.Flags().StringVar(&keyFile, "key", "", "PEM public key the receipt must be signed with (a HarnessNode's status.evidenceKey.publicKey)")
	cmd.Flags().StringVar(&trustedFile, "trusted-keys", "", "file of PEM public keys, one of which must have signed the receipt")
	return cmd
}

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
			cmd.Printf("exported the evidence of HarnessRun %s/%s to %s\n", ns, run.Name, args[1])
			return printReport(cmd, args[1], report)
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

// resolveEvidenceDir is dir itself when it holds a receipt; else its
// 'latest' link (a run's folder of 'harnessfacts run'); else dir.
func resolveEvidenceDir(dir string) string {
	if fileExists(filepath.Join(dir, evidence.ReceiptName)) {
		return dir
	}
	if latest := filepath.Join(dir, latestLink); fileExists(filepath.Join(latest, evidence.ReceiptName)) {
		return latest
	}
	return dir
}

func printReport(cmd *cobra.Command, what string, r *evidence.Report) error {
	if err := r.Err(); err != nil {
		for _, p := range r.Problems {
			cmd.PrintErrf("DIFFERS %s\n", p)
		}
		return fmt.Errorf("%s: %w", what, err)
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
		cmd.Printf("receipt of HarnessRun %s/%s (uid %s, attempt %d) on node %s, finished %s\n", rr.Run.Namespace, rr.Run.Name,
			rr.Run.UID, rr.Run.Attempt, rr.Node, rr.Timings.Finished.Format(time.RFC3339))
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
