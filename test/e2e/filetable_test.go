//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

const fileMaxPath = "/proc/sys/fs/file-max"

// TestNodeAgentRaisesTheFileTable: on a node whose open-file table is the
// kernel's default (about one file per 10 KiB of memory: no systemd raised
// it), one run's memory can hold more open files than the whole node may
// have, and a run that fills it refuses every unprivileged process of the
// node a file. A real node-agent raises fs.file-max at start, as systemd
// does at boot, and its HarnessNode's sandbox verdict names no missing
// bound; with --protect-kernel-defaults it leaves the table as it is and
// the verdict says, loudly, what runs go without. The table is set to the
// kernel's default for the test and given back after.
func TestNodeAgentRaisesTheFileTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the node-agent writes fs.file-max")
	}
	orig, err := os.ReadFile(fileMaxPath)
	if err != nil {
		t.Skipf("no %s: %v", fileMaxPath, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(fileMaxPath, orig, 0); err != nil {
			t.Errorf("giving fs.file-max back its %s: %v", strings.TrimSpace(string(orig)), err)
		}
	})
	// The kernel's default for this machine's memory, above what is open
	// now.
	low := strconv.FormatUint(memTotalKB(t)/10, 10)
	setFileMax := func() {
		t.Helper()
		if err := os.WriteFile(fileMaxPath, []byte(low+"\n"), 0); err != nil {
			t.Skipf("cannot set fs.file-max here: %v", err)
		}
	}

	setFileMax()
	startNodeAgentOn(t, "filetable-node", filepath.Join(openDir(t), "runs"), "--protect-kernel-defaults=false")
	verdict := bwrapVerdict(t, "filetable-node")
	if got := readFileMax(t); got != strconv.FormatUint(sandbox.MaxFileTable, 10) {
		t.Errorf("fs.file-max %s after the node-agent started; want it raised from %s to %d", got, low, uint64(sandbox.MaxFileTable))
	}
	if strings.Contains(verdict, sandbox.NoFileTableBound) {
		t.Errorf("the raised node's verdict still says %q: %s", sandbox.NoFileTableBound, verdict)
	}

	setFileMax()
	startNodeAgentOn(t, "filetable-protected-node", filepath.Join(openDir(t), "runs"), "--protect-kernel-defaults")
	verdict = bwrapVerdict(t, "filetable-protected-node")
	if got := readFileMax(t); got != low {
		t.Errorf("fs.file-max %s under --protect-kernel-defaults; want it left at %s", got, low)
	}
	if !strings.Contains(verdict, sandbox.NoFileTableBound+" (fs.file-max "+low) {
		t.Errorf("the protected node's verdict does not say what its runs go without: %s", verdict)
	}
}

// bwrapVerdict waits for node's HarnessNode to be Ready and returns its bwrap
// mode's preflight verdict.
func bwrapVerdict(t *testing.T, node string) string {
	t.Helper()
	var verdict string
	waitFor(t, time.Minute, "HarnessNode "+node+" Ready", func() bool {
		hn := &harnessv1.HarnessNode{}
		if k8s.Get(context.Background(), types.NamespacedName{Name: node}, hn) != nil || !meta.IsStatusConditionTrue(hn.Status.Conditions, harnessv1.ConditionNodeReady) {
			return false
		}
		for _, m := range hn.Status.SandboxModes {
			if m.Mode == string(sandbox.ModeBwrap) && m.Available {
				verdict = m.Message
			}
		}
		return verdict != ""
	})
	return verdict
}

func readFileMax(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(fileMaxPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func memTotalKB(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatal("/proc/meminfo has no MemTotal")
	return 0
}
