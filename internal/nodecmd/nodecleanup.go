package nodecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// NodeCleanupCommand is `node-cleanup`, the chart's uninstall Job on each
// node: it removes the run dirs nobody holds, the run root and the keys.
func NodeCleanupCommand() *cobra.Command {
	var runRoot, keyDir string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "node-cleanup",
		Short: "Remove what node-agents left on this node once they are gone: run dirs, the image cache, the signing key, the run root",
		Long: `Remove what node-agents left on this node after they stopped for good (the
chart runs it on every node as a post-delete hook of helm uninstall). It waits
until no process holds a run dir under --run-root (a node-agent pod still
terminating, at most --wait), removes every run dir, the environment image
cache (.images) and the git and OCI fixture cache (.fixtures), then the run root and its parent when they are empty: the
folders the kubelet made for the node-agent's hostPath volume. With
--evidence-key-dir it first removes the node's receipt signing key there (a
private key must not outlive the product on the host; receipts it signed stay
verifiable with its public key), and the folder and its parent when empty.
Anything else in those folders is left, and said.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyDir != "" {
				if err := removeEvidenceKey(cmd.OutOrStdout(), keyDir); err != nil {
					return err
				}
			}
			return cleanupNode(cmd.Context(), cmd.OutOrStdout(), runRoot, wait)
		},
	}
	cmd.Flags().StringVar(&runRoot, "run-root", "/var/lib/harnessfacts/runs", "the node-agents' run root")
	cmd.Flags().StringVar(&keyDir, "evidence-key-dir", "", "the folder of the node-agents' receipt signing key (evidence-key.pem) to remove; empty keeps it")
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for run dirs still held by a node-agent that is stopping")
	return cmd
}

func cleanupNode(ctx context.Context, out io.Writer, runRoot string, wait time.Duration) error {
	if !filepath.IsAbs(runRoot) || filepath.Clean(runRoot) == "/" {
		return fmt.Errorf("--run-root %q: not an absolute path below /", runRoot)
	}
	runRoot = filepath.Clean(runRoot)
	deadline := time.Now().Add(wait)
	for {
		removed, err := fixture.RemoveAbandoned(runRoot)
		for _, d := range removed {
			fmt.Fprintf(out, "removed run dir %s\n", d)
		}
		if err != nil {
			return err
		}
		held, other, err := runRootContents(runRoot)
		if err != nil {
			return err
		}
		for _, cache := range []string{imageCache, executor.FixtureCacheDir} {
			if len(held) > 0 || !slices.Contains(other, cache) {
				continue
			}
			// The node-agent's unpacked environment images and its
			// git and OCI fixtures: its own, and of no use once it is
			// gone.
			if err := os.RemoveAll(filepath.Join(runRoot, cache)); err != nil {
				return fmt.Errorf("removing the cache %s: %w", cache, err)
			}
			fmt.Fprintf(out, "removed %s\n", filepath.Join(runRoot, cache))
			other = slices.DeleteFunc(other, func(n string) bool { return n == cache })
		}
		if len(held) == 0 {
			if len(other) > 0 {
				fmt.Fprintf(out, "left %s: it holds what is not a run dir: %s\n", runRoot, strings.Join(other, ", "))
				return nil
			}
			// A parent not empty (another use of it), or the mount
			// point of this pod's own volume, stays.
			removeWithParent(out, runRoot)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run dirs under %s are still held after %s (is a node-agent still running on this node?): %s", runRoot, wait, strings.Join(held, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// runRootContents splits what is left in the run root into run dirs (which
// RemoveAbandoned left: still held, or just made) and anything else.
func runRootContents(runRoot string) (runDirs, other []string, err error) {
	entries, err := os.ReadDir(runRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		// Run dirs, and run dirs being made (".harnessfacts-tmp-…").
		if e.IsDir() && (strings.HasPrefix(e.Name(), fixture.RunDirPrefix) || strings.HasPrefix(e.Name(), "."+fixture.RunDirPrefix)) {
			runDirs = append(runDirs, e.Name())
		} else {
			other = append(other, e.Name())
		}
	}
	return runDirs, other, nil
}

// imageCache is the node-agent's environment image cache in the run root
// (node-agent/executor).
const imageCache = ".images"

// removeEvidenceKey removes the node's receipt signing key from dir (the
// key and the temporary files of one being made), then dir and its parent
// when they are empty. Anything else there is left, and said.
func removeEvidenceKey(out io.Writer, dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) == "/" {
		return fmt.Errorf("--evidence-key-dir %q: not an absolute path below /", dir)
	}
	dir = filepath.Clean(dir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "evidence-key.pem" || strings.HasPrefix(e.Name(), ".evidence-key-") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("removing the evidence signing key: %w", err)
			}
			fmt.Fprintf(out, "removed %s\n", filepath.Join(dir, e.Name()))
		}
	}
	// Not empty (the run root's parent, removed after it): it stays.
	removeWithParent(out, dir)
	return nil
}

// removeWithParent removes the empty folder dir, then its parent when that
// is empty too, saying what it removed; at the first that cannot be
// removed (not empty, a mount point) it says why and stops.
func removeWithParent(out io.Writer, dir string) {
	for _, d := range []string{dir, filepath.Dir(dir)} {
		switch err := os.Remove(d); {
		case err == nil:
			fmt.Fprintf(out, "removed %s\n", d)
		case errors.Is(err, fs.ErrNotExist):
		default:
			fmt.Fprintf(out, "left %s: %v\n", d, err)
			return
		}
	}
}
