package install

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// maskProc reproduces what a container runtime does to a container's /proc
// unless the pod asks for procMount: Unmasked: files hidden under /dev/null,
// directories under an empty read-only tmpfs, some trees read-only (runc's
// and containerd's defaults, for the paths this kernel has).
const maskProc = `
set -e
for f in /proc/kcore /proc/keys /proc/latency_stats /proc/timer_list /proc/timer_stats /proc/sched_debug; do
  [ -f "$f" ] && mount --bind /dev/null "$f"
done
for d in /proc/acpi /proc/scsi; do
  [ -d "$d" ] && mount -t tmpfs -o ro tmpfs "$d"
done
for d in /proc/bus /proc/fs /proc/irq /proc/sys; do
  [ -d "$d" ] && mount --bind "$d" "$d" && mount -o remount,bind,ro "$d"
done
`

// bwrapAsAgent is how the node-agent starts an agent: bwrap as an
// unprivileged uid, which builds the sandbox in a user namespace of its own
// and mounts a fresh /proc there.
const bwrapAsAgent = `setpriv --reuid 65534 --regid 65534 --clear-groups bwrap --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp true`

// TestBwrapNeedsAnUnmaskedProc checks the reason the node-agent DaemonSet
// sets procMount: Unmasked (and so hostUsers: false): with the /proc a
// runtime gives a container by default, the kernel refuses bwrap's new /proc
// inside its user namespace; with /proc as the kernel made it, bwrap works.
func TestBwrapNeedsAnUnmaskedProc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a mount namespace with a container-like /proc (run as root, as make test does in CI)")
	}
	for _, tool := range []string{"bwrap", "unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (make deps installs bubblewrap and util-linux): %v", tool, err)
		}
	}
	run := func(script string) (string, error) {
		out, err := exec.Command("unshare", "--mount", "--propagation", "private", "--fork", "bash", "-c", script).CombinedOutput()
		return string(out), err
	}

	if out, err := run(bwrapAsAgent); err != nil {
		t.Fatalf("bwrap as uid 65534 with an unmasked /proc failed; the sandbox cannot work on this host at all: %v\n%s", err, out)
	}
	out, err := run(maskProc + bwrapAsAgent)
	if err == nil {
		t.Fatal("bwrap mounted its /proc under a container's masked /proc: procMount: Unmasked would not be needed, drop it from the chart")
	}
	if !strings.Contains(out, "Can't mount proc") {
		t.Errorf("bwrap under a masked /proc failed for another reason than mounting /proc: %v\n%s", err, out)
	}
}
