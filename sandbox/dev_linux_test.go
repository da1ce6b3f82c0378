package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBwrapPtysAreBounded: a sandbox holds at most MaxPtys ptys at once,
// and they work (a terminal's two ends talk). bwrap's own devpts instance
// has no bound but the whole kernel's count, which every other sandbox and
// container of the node shares: an agent opened /dev/ptmx 3,071 times and
// no other sandbox could open one until its run ended.
func TestBwrapPtysAreBounded(t *testing.T) {
	for _, form := range []string{"own /dev", "devpts over --dev"} {
		t.Run(form, func(t *testing.T) {
			if form == "devpts over --dev" {
				withMknodRefused(t)
			}
			testPtysAreBounded(t)
		})
	}
}

// withMknodRefused makes the runner's sandboxes, for the test, what they
// are where mknod is refused (a node-agent in a pod's user namespace): a
// devpts bound over --dev's (TestDevInstanceWithoutMknod shows the
// refusal itself is found).
func withMknodRefused(t *testing.T) {
	mknodRefused.Store(true)
	t.Cleanup(func() { mknodRefused.Store(false) })
}

func testPtysAreBounded(t *testing.T) {
	r := requireBwrapHost(t)
	script := fmt.Sprintf(`
open(my $m, "+<", "/dev/ptmx") or die "ptmx: $!";
my $n = pack("L", 0); ioctl($m, 0x80045430, $n) or die "TIOCGPTN: $!";
my $num = unpack("L", $n);
my $z = pack("l", 0); ioctl($m, 0x40045431, $z) or die "TIOCSPTLCK: $!";
open(my $s, "+<", "/dev/pts/$num") or die "/dev/pts/$num: $!";
syswrite($s, "ping\n"); my $got; sysread($m, $got, 64);
print "terminal ", ($got =~ /ping/ ? "works" : "is silent"), "\n";
my @k = ($m);
while (@k < %d) { open(my $f, "+<", "/dev/ptmx") or last; push @k, $f }
print "held ", scalar(@k), ": ", ($! || "no error"), "\n";`, 4*MaxPtys)
	base := testBase(t)
	spec := runDir(t, base, "perl", "-e", script)
	// The mount point in a folder of its own (as the run dir's top level
	// is for the node-agent), looked for below: other packages' tests run
	// sandboxes of their own meanwhile.
	spec.DevIn = base
	res, out := run(t, r, spec)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	if !strings.Contains(out, "terminal works") {
		t.Errorf("a pty of the sandbox does not work: %s", out)
	}
	if want := fmt.Sprintf("held %d: No space left on device", MaxPtys); !strings.Contains(out, want) {
		t.Errorf("the sandbox's ptys are not bounded at %d: %s", MaxPtys, out)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), spec.DevIn) {
		t.Errorf("a sandbox's /dev is still mounted:\n%s", mi)
	}
}

// devListing lists a sandbox's /dev as the sandbox sees it: each entry's
// type, mode, device numbers and link target (not owners: bwrap's links
// are the sandbox's uid, the runner's root's, and neither is writable but
// by its owner), then what the sandbox may do with it.
const devListing = `cd /dev && for f in . * pts/ptmx; do stat -c '%n %F %a %t:%T %N' "$f"; done
touch /dev/made && echo "may write /dev"; touch /dev/shm/made && echo "may write /dev/shm"
grep ' /dev ' /proc/self/mountinfo | grep -q nosuid && echo "/dev is nosuid"
`

// TestBwrapDevIsBwraps: the /dev the runner makes for a sandbox
// (devInstance) is what bwrap's --dev makes, entry for entry; its devices
// work; the sandbox cannot make a device there, though no nodev is on
// it; a device it replaces is not the next sandbox's; and nothing is left
// mounted.
func TestBwrapDevIsBwraps(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	spec := runDir(t, base, "sh", "-c", devListing)
	spec.DevIn = base

	// bwrap's own, with the same options but --dev.
	plain := spec
	plain.DevIn = ""
	args := bwrapArgs(plain, false)
	if strings.Contains(strings.Join(args, " "), "--dev-bind") {
		t.Fatalf("without a /dev of the runner's, bwrap is not given --dev: %q", args)
	}
	cmd := exec.Command(r.bwrap, append(args, "--", "sh", "-c", devListing)...)
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
	bw, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bwrap --dev: %v: %s", err, bw)
	}
	for _, form := range []string{"devpts over --dev", "own /dev"} {
		mknodRefused.Store(form == "devpts over --dev")
		res, ours := func() (Result, string) {
			// Restored even when run fails the test: later tests of the
			// package must not inherit the devpts-only form.
			defer mknodRefused.Store(false)
			return run(t, r, spec)
		}()
		if res.ExitCode != 0 || !res.ptysBounded {
			t.Fatalf("%s: exit %d, ptys bounded %v: %s", form, res.ExitCode, res.ptysBounded, ours)
		}
		if got, want := afterSetupRetries(ours), string(bw); got != want {
			t.Errorf("%s: the sandbox's /dev is not bwrap's --dev:\n%s\nbwrap's:\n%s", form, got, want)
		}
		for _, want := range []string{"may write /dev\n", "may write /dev/shm\n", "/dev is nosuid\n", "\nnull character special file 666 1:3 "} {
			if !strings.Contains(ours, want) {
				t.Errorf("%s: the sandbox's /dev: no %q in\n%s", form, want, ours)
			}
		}
	}

	// The devices work; no device can be made; a /dev/null replaced.
	spec.Argv = []string{"sh", "-c", `
[ "$(head -c 3 /dev/zero | od -An -tx1 | tr -d ' ')" = 000000 ] && echo zero works
[ "$(head -c 16 /dev/urandom | wc -c)" = 16 ] && echo urandom works
echo x > /dev/null && echo null works
echo x 2>/dev/null > /dev/full || echo full is full
for d in "b 8 0" "c 1 1" "c 10 232"; do mknod /dev/made-$(echo $d | tr ' ' -) $d 2>/dev/null && echo "made $d"; done
ln /dev/null /dev/null2 && ln /dev/null2 /dev/shm/null3 && echo linked
cp -a /dev/null /dev/shm/copy 2>/dev/null && echo "copied a device"
rm -f /dev/null && echo replaced > /dev/null && echo null replaced`}
	res, out := run(t, r, spec)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	for _, want := range []string{"zero works", "urandom works", "null works", "full is full", "null replaced"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	for _, not := range []string{"made ", "copied a device"} {
		if strings.Contains(out, not) {
			t.Errorf("the sandbox made a device in its /dev:\n%s", out)
		}
	}
	spec.Argv = []string{"sh", "-c", `stat -c '%F %t:%T %s' /dev/null; cat /dev/null; ls /dev`}
	res, out = run(t, r, spec)
	if res.ExitCode != 0 || !strings.HasPrefix(afterSetupRetries(out), "character special file 1:3 0\n") || strings.Contains(out, "replaced") || strings.Contains(out, "made") || strings.Contains(out, "null2") {
		t.Errorf("the next sandbox's /dev is the last one's (exit %d):\n%s", res.ExitCode, out)
	}

	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), base) {
		t.Errorf("a sandbox's /dev is still mounted:\n%s", mi)
	}
	left, _ := filepath.Glob(filepath.Join(base, "harnessfacts-dev-*", "*"))
	if len(left) != 0 {
		t.Errorf("a sandbox's /dev left files behind: %q", left)
	}
}

// devHelperEnv makes the test binary find out, in a user namespace of its
// own (as a node-agent in a pod's: root there, no device node can be made),
// what sandbox /dev the runner makes.
const devHelperEnv = "HARNESSFACTS_TEST_DEV_HELPER"

// TestDevInstanceWithoutMknod: where the runner may mount but mknod is
// refused, a sandbox's /dev is a devpts alone (bound over --dev's, so its
// ptys are still bounded), and every later one is made so without trying.
func TestDevInstanceWithoutMknod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to make a user namespace mapped to root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("needs unshare (util-linux)")
	}
	dir := t.TempDir()
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), devHelperEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"first: a devpts alone", "mknod refused: true", "second: a devpts alone", "removed"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("helper output lacks %q:\n%s", want, out)
		}
	}
}

func devHelper(dir string) int {
	fail := func(format string, a ...any) int { fmt.Printf(format+"\n", a...); return 1 }
	for _, n := range []string{"first", "second"} {
		d, err := newDevInstance(dir, 0, 0)
		if err != nil || d == nil {
			return fail("%s: %v %v", n, d, err)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(d.dir, &st); err != nil {
			return fail("%s: %v", n, err)
		}
		if d.ptsOnly && st.Type == unix.DEVPTS_SUPER_MAGIC {
			fmt.Printf("%s: a devpts alone\n", n)
		} else {
			fmt.Printf("%s: ptsOnly %v, file system %#x\n", n, d.ptsOnly, st.Type)
		}
		fmt.Printf("mknod refused: %v\n", mknodRefused.Load())
		if err := d.remove(); err != nil {
			return fail("%s: %v", n, err)
		}
		if err := os.Remove(d.dir); err != nil {
			return fail("%s: %v", n, err)
		}
	}
	fmt.Println("removed")
	return 0
}
