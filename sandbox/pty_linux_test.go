package sandbox

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestBwrapPtysAreBounded: a sandbox holds at most MaxPtys ptys at once,
// and they work (a terminal's two ends talk). bwrap's own devpts instance
// has no bound but the whole kernel's count, which every other sandbox and
// container of the node shares: an agent opened /dev/ptmx 3,071 times and
// no other sandbox could open one until its run ended.
func TestBwrapPtysAreBounded(t *testing.T) {
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
	spec.PtsIn = base
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
	if strings.Contains(string(mi), spec.PtsIn) {
		t.Errorf("a sandbox's devpts is still mounted:\n%s", mi)
	}
}
