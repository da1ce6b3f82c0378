package sandbox

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/harnessfacts/harnessfacts/sandbox/internal/sysprobe"
)

// syscallProbeEnv makes the test binary a probe: it makes each call of
// probeCalls and prints "name errno" lines (errno 0: the call succeeded).
const syscallProbeEnv = "HF_SYSCALL_PROBE"

const (
	i386Getpid = 20
	i386Keyctl = 288
	x32Bit     = 0x40000000
	// addrNoRandomize is ADDR_NO_RANDOMIZE of <linux/personality.h>.
	addrNoRandomize = 0x0040000
)

// probeCalls are the calls an attacker in the sandbox would try, each with
// arguments for which the kernel, without the filter, answers something
// other than EPERM wherever it can (so the control run tells the filter's
// EPERM from the kernel's).
var probeCalls = map[string]func() unix.Errno{
	"keyctl":            func() unix.Errno { return sys(unix.SYS_KEYCTL, 0, neg(3), 1) }, // KEYCTL_GET_KEYRING_ID, session, create
	"add_key":           func() unix.Errno { return sys(unix.SYS_ADD_KEY, 0, 0, 0, 0, neg(2)) },
	"request_key":       func() unix.Errno { return sys(unix.SYS_REQUEST_KEY, 0, 0, 0, 0) },
	"bpf":               func() unix.Errno { return sys(unix.SYS_BPF, 9999, 0, 0) },
	"perf_event_open":   func() unix.Errno { return sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, neg(1), neg(1), 0) },
	"userfaultfd":       func() unix.Errno { return sys(unix.SYS_USERFAULTFD, 1) }, // UFFD_USER_MODE_ONLY
	"io_uring_setup":    func() unix.Errno { return sys(unix.SYS_IO_URING_SETUP, 1, 0) },
	"io_uring_enter":    func() unix.Errno { return sys(unix.SYS_IO_URING_ENTER, neg(1), 0, 0, 0, 0, 0) },
	"io_uring_register": func() unix.Errno { return sys(unix.SYS_IO_URING_REGISTER, neg(1), 0, 0, 0) },
	"io_setup":          func() unix.Errno { return sys(unix.SYS_IO_SETUP, 0, 0) }, // no events, no context: EINVAL or EFAULT
	"ptrace":            func() unix.Errno { return sys(unix.SYS_PTRACE, 0xdead, uintptr(os.Getpid()), 0, 0) },
	"process_vm_readv":  func() unix.Errno { return sys(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 0) },
	"kcmp":              func() unix.Errno { return sys(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(os.Getpid()), 1, 0, 0) },
	// ADDR_NO_RANDOMIZE turns off ASLR for what this process runs next.
	"personality(ADDR_NO_RANDOMIZE)": func() unix.Errno { return sys(unix.SYS_PERSONALITY, addrNoRandomize) },
	"personality(query)":             func() unix.Errno { return sys(unix.SYS_PERSONALITY, 0xffffffff) },
	"init_module":                    func() unix.Errno { return sys(unix.SYS_INIT_MODULE, 0, 0, 0) },
	"finit_module":                   func() unix.Errno { return sys(unix.SYS_FINIT_MODULE, neg(1), 0, 0) },
	"delete_module":                  func() unix.Errno { return sys(unix.SYS_DELETE_MODULE, 0, 0) },
	"kexec_load":                     func() unix.Errno { return sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0) },
	"kexec_file_load":                func() unix.Errno { return sys(unix.SYS_KEXEC_FILE_LOAD, neg(1), neg(1), 0, 0, 0) },
	"unshare(CLONE_NEWUSER)":         func() unix.Errno { return sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER) },
	"setns":                          func() unix.Errno { return sys(unix.SYS_SETNS, neg(1), 0) },
	"clone3":                         func() unix.Errno { return sys(unix.SYS_CLONE3, 0, 0) },
	"socket(AF_VSOCK)":               func() unix.Errno { return sys(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0) },
	"socket(AF_INET)":                func() unix.Errno { return sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0) },
	"socket(AF_INET6)":               func() unix.Errno { return sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, 0) },
	"socket(AF_NETLINK)":             func() unix.Errno { return sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE) },
	"socket(AF_UNIX)":                func() unix.Errno { return sys(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0) },
	"socket(NETLINK_CRYPTO)":         func() unix.Errno { return sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_CRYPTO) },
	"socket(AF_PACKET)":              func() unix.Errno { return sys(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_DGRAM, 0) },
	"socket(AF_INET, high bits set)": func() unix.Errno { return sys(unix.SYS_SOCKET, 1<<32|unix.AF_INET, unix.SOCK_STREAM, 0) },
	"socketpair(AF_TIPC)":            func() unix.Errno { return sys(unix.SYS_SOCKETPAIR, unix.AF_TIPC, unix.SOCK_STREAM, 0, 0) },
	"getpid":                         func() unix.Errno { return sys(unix.SYS_GETPID) },
	"x32 getpid":                     func() unix.Errno { return sys(x32Bit | unix.SYS_GETPID) },
	"i386 getpid":                    func() unix.Errno { return i386(i386Getpid, 0, 0, 0) },
	"i386 keyctl":                    func() unix.Errno { return i386(i386Keyctl, 0, uint32(neg(3)), 1) },
}

func neg(n int) uintptr { return uintptr(-n) }

func sys(nr uintptr, args ...uintptr) unix.Errno {
	var a [6]uintptr
	copy(a[:], args)
	r, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
	if errno == 0 && nr != unix.SYS_GETPID && nr != unix.SYS_PERSONALITY && int(r) > 2 {
		_ = unix.Close(int(r)) // a new fd (userfaultfd, socket)
	}
	return errno
}

func i386(nr, a1, a2, a3 uint32) unix.Errno {
	if !sysprobe.I386Available {
		return unix.ENOSYS
	}
	if r := sysprobe.I386(nr, a1, a2, a3); r < 0 && r > -4096 {
		return unix.Errno(-r)
	}
	return 0
}

// The probe runs before the tests' main, in the sandbox.
func init() {
	if os.Getenv(syscallProbeEnv) != "" {
		os.Exit(syscallProbe())
	}
}

// syscallProbe is the probe's main.
func syscallProbe() int {
	names := make([]string, 0, len(probeCalls))
	for n := range probeCalls {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Printf("%s=%d\n", n, int(probeCalls[n]()))
	}
	return 0
}

// probeInSandbox runs the probe under r and returns each call's errno.
func probeInSandbox(t *testing.T, r *BwrapRunner) (map[string]unix.Errno, Result) {
	t.Helper()
	base := testBase(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy the sandbox's uid can read: go test's build dir is private,
	// and /tmp is the sandbox's own.
	probe := filepath.Join(base, "probe")
	copyFile(t, self, probe, 0o755)
	spec := runDir(t, base, probe)
	spec.Env = append(spec.Env, syscallProbeEnv+"=1")
	spec.ReadOnly = []string{probe}
	res, out := run(t, r, spec)
	if res.ExitCode != 0 {
		t.Fatalf("probe exited %d: %s", res.ExitCode, out)
	}
	got := map[string]unix.Errno{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, v, ok := strings.Cut(line, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			t.Fatalf("probe printed %q", line)
		}
		got[name] = unix.Errno(n)
	}
	if len(got) != len(probeCalls) {
		t.Fatalf("probe answered %d calls, want %d: %s", len(got), len(probeCalls), out)
	}
	return got, res
}

func copyFile(t testing.TB, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSeccompDeniesCallsInSandbox runs the probe in a real bwrap sandbox,
// with the filter and, as the control that shows the test can fail,
// without it (today's main had none).
func TestSeccompDeniesCallsInSandbox(t *testing.T) {
	r := requireBwrapHost(t)
	if !sysprobe.I386Available {
		t.Log("not amd64: the i386 calls are not probed")
	}
	filtered, res := probeInSandbox(t, r)
	prof, err := Seccomp()
	if err != nil {
		t.Fatal(err)
	}
	if res.Seccomp != prof.String() || !strings.HasPrefix(prof.Digest, "sha256:") {
		t.Errorf("Result.Seccomp = %q, want %q", res.Seccomp, prof.String())
	}
	bare := *r
	bare.noSeccomp = true
	unfiltered, res := probeInSandbox(t, &bare)
	if res.Seccomp != "" {
		t.Errorf("a run without the filter says it had one: %q", res.Seccomp)
	}

	type want struct {
		filtered unix.Errno
		// kernelRefuses: without the filter the kernel itself says EPERM
		// (the sandbox has no capabilities) or ENOSYS (not built in); the filter still keeps the
		// call off the kernel's code path, which TestSeccompFilterDecisions
		// checks on the program itself.
		kernelRefuses bool
	}
	table := map[string]want{
		"keyctl": {filtered: unix.EPERM}, "add_key": {filtered: unix.EPERM}, "request_key": {filtered: unix.EPERM},
		"bpf": {filtered: unix.EPERM}, "perf_event_open": {filtered: unix.EPERM}, "userfaultfd": {filtered: unix.EPERM},
		"io_uring_setup": {filtered: unix.EPERM}, "io_uring_enter": {filtered: unix.EPERM}, "io_uring_register": {filtered: unix.EPERM},
		"io_setup": {filtered: unix.EPERM},
		"ptrace":   {filtered: unix.EPERM}, "process_vm_readv": {filtered: unix.EPERM}, "kcmp": {filtered: unix.EPERM},
		"personality(ADDR_NO_RANDOMIZE)": {filtered: unix.EPERM},
		"personality(query)":             {filtered: 0},
		"init_module":                    {filtered: unix.EPERM, kernelRefuses: true},
		"finit_module":                   {filtered: unix.EPERM, kernelRefuses: true},
		"delete_module":                  {filtered: unix.EPERM, kernelRefuses: true},
		"kexec_load":                     {filtered: unix.EPERM, kernelRefuses: true},
		"kexec_file_load":                {filtered: unix.EPERM, kernelRefuses: true},
		"unshare(CLONE_NEWUSER)":         {filtered: unix.EPERM},
		"setns":                          {filtered: unix.EPERM},
		// Docker's rule: ENOSYS, so that glibc falls back to clone, whose
		// flags the filter can see.
		"clone3": {filtered: unix.ENOSYS},
		// Only unix, IPv4, IPv6 and netlink sockets: a family the kernel
		// has as a module is loaded by its first socket.
		"socket(AF_VSOCK)":               {filtered: unix.EAFNOSUPPORT},
		"socket(AF_INET)":                {filtered: 0},
		"socket(AF_INET6)":               {filtered: 0},
		"socket(AF_NETLINK)":             {filtered: 0},
		"socket(AF_UNIX)":                {filtered: 0},
		"socket(NETLINK_CRYPTO)":         {filtered: unix.EPROTONOSUPPORT},
		"socket(AF_PACKET)":              {filtered: unix.EAFNOSUPPORT},
		"socket(AF_INET, high bits set)": {filtered: unix.EAFNOSUPPORT},
		"socketpair(AF_TIPC)":            {filtered: unix.EAFNOSUPPORT},
		"getpid":                         {filtered: 0},
		// This kernel may lack the x32 ABI (ENOSYS either way); the program
		// itself is checked in TestSeccompFilterDecisions.
		"x32 getpid":  {filtered: unix.ENOSYS},
		"i386 getpid": {filtered: unix.EPERM},
		"i386 keyctl": {filtered: unix.EPERM},
	}
	if !sysprobe.I386Available {
		table["i386 getpid"] = want{filtered: unix.ENOSYS}
		table["i386 keyctl"] = want{filtered: unix.ENOSYS}
	}
	for name, w := range table {
		if got := filtered[name]; got != w.filtered {
			t.Errorf("%s under the filter: errno %d (%v), want %d (%v)", name, int(got), got, int(w.filtered), w.filtered)
		}
		if w.filtered == unix.EPERM && !w.kernelRefuses && unfiltered[name] == unix.EPERM {
			t.Errorf("%s without the filter: EPERM too, so this probe cannot tell the filter's refusal from the kernel's", name)
		}
		if got := unfiltered[name]; w.kernelRefuses && got != unix.EPERM && got != unix.ENOSYS {
			t.Errorf("%s without the filter: errno %d, expected the kernel to refuse it too (EPERM, or ENOSYS where it is not built in)", name, int(got))
		}
	}
	if len(table) != len(probeCalls) {
		t.Errorf("the table covers %d of the %d probe calls", len(table), len(probeCalls))
	}
	t.Logf("without the filter: %v", unfiltered)
}

// TestSeccompFilterDecisions runs the assembled program in a BPF
// interpreter for every denied call, the other ABIs and a few allowed calls.
func TestSeccompFilterDecisions(t *testing.T) {
	f, err := builtSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(f.insns)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	const (
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosy = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	decide := func(auditArch uint32, nr uint32, args ...uint64) uint32 {
		var a [6]uint64
		copy(a[:], args)
		v, err := vm.Run(seccompData(auditArch, nr, a))
		if err != nil {
			t.Fatal(err)
		}
		return uint32(v)
	}
	native := uint32(info.ID)
	nr := func(name string) uint32 {
		n, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("%s has no number on %s", name, info.Name)
		}
		return uint32(n)
	}
	for _, name := range deniedSyscalls {
		if _, ok := info.SyscallNames[name]; !ok {
			continue
		}
		if got := decide(native, nr(name)); got != eperm {
			t.Errorf("%s: %#x, want EPERM", name, got)
		}
	}
	for _, name := range []string{"read", "write", "openat", "execve", "futex", "mmap", "wait4", "getdents64", "rt_sigreturn", "exit_group"} {
		if got := decide(native, nr(name)); got != allow {
			t.Errorf("%s: %#x, want allowed", name, got)
		}
	}
	// clone: threads and forks yes, new namespaces no.
	if got := decide(native, nr("clone"), unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SIGHAND|unix.CLONE_THREAD); got != allow {
		t.Errorf("clone of a thread: %#x", got)
	}
	if got := decide(native, nr("clone"), unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)); got != eperm {
		t.Errorf("clone(CLONE_NEWUSER): %#x, want EPERM", got)
	}
	if got := decide(native, nr("clone3")); got != enosy {
		t.Errorf("clone3: %#x, want ENOSYS", got)
	}
	if got := decide(native, nr("personality"), 0xffffffff); got != allow {
		t.Errorf("personality(query): %#x", got)
	}
	if got := decide(native, nr("personality"), addrNoRandomize); got != eperm {
		t.Errorf("personality(ADDR_NO_RANDOMIZE): %#x, want EPERM", got)
	}
	// After a failed argument check the next rules compare the call's
	// number again, not the argument (go-seccomp-bpf v1.6.0's assembler
	// compared the argument: personality(arch_prctl's number) matched
	// arch_prctl's allow rule).
	if got := decide(native, nr("personality"), uint64(nr("arch_prctl"))); got != eperm {
		t.Errorf("personality(%d): %#x, want EPERM", nr("arch_prctl"), got)
	}
	if got := decide(native, nr("socket"), unix.AF_INET6); got != allow {
		t.Errorf("socket(AF_INET6): %#x, want allowed", got)
	}
	// A 64-bit argument whose low word is an allowed value.
	if got := decide(native, nr("personality"), 1<<32); got != eperm {
		t.Errorf("personality(1<<32): %#x, want EPERM", got)
	}
	if info.ID == arch.X86_64.ID {
		for _, n := range []uint32{nr("getpid"), nr("keyctl"), nr("read")} {
			if got := decide(native, x32Bit|n); got != enosy {
				t.Errorf("x32 call %d: %#x, want ENOSYS", n, got)
			}
			if got := decide(uint32(arch.I386.ID), n); got != eperm {
				t.Errorf("i386 call %d: %#x, want EPERM", n, got)
			}
		}
	}
}

// seccompData is struct seccomp_data as bpf.VM loads it: the interpreter
// loads big-endian words, so each 32-bit word is stored big-endian where
// the kernel keeps it (an argument's low word first on a little-endian
// host).
func seccompData(auditArch, nr uint32, args [6]uint64) []byte {
	var d [64]byte
	binary.BigEndian.PutUint32(d[0:], nr)
	binary.BigEndian.PutUint32(d[4:], auditArch)
	for i, a := range args {
		lo, hi := 16+8*i, 20+8*i
		if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 { // big-endian host
			lo, hi = hi, lo
		}
		binary.BigEndian.PutUint32(d[lo:], uint32(a))
		binary.BigEndian.PutUint32(d[hi:], uint32(a>>32))
	}
	return d[:]
}

// chainDecides is what the rules mean, read one after another as the
// filter's first form ran them: the first rule of the call's number whose
// conditions all hold gives the action; no such rule, EPERM.
func chainDecides(rules []seccompRule, info *arch.Info, auditArch, nr uint32, args [6]uint64) uint32 {
	if auditArch != uint32(info.ID) {
		return retEPERM
	}
	if info.ID == arch.X86_64.ID && nr >= x32Bit {
		return unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	}
	for _, r := range rules {
		if r.nr != nr {
			continue
		}
		holds := true
		for _, c := range r.conds {
			v := args[c.Index]
			switch c.Op {
			case specs.OpEqualTo:
				holds = v == c.Value
			case specs.OpNotEqual:
				holds = v != c.Value
			case specs.OpGreaterThan:
				holds = v > c.Value
			case specs.OpGreaterEqual:
				holds = v >= c.Value
			case specs.OpLessThan:
				holds = v < c.Value
			case specs.OpLessEqual:
				holds = v <= c.Value
			case specs.OpMaskedEqual:
				holds = v&c.Value == c.ValueTwo
			default:
				panic("operator " + c.Op)
			}
			if !holds {
				break
			}
		}
		if holds {
			return r.action
		}
	}
	return retEPERM
}

// TestSeccompProgramIsItsRules: the compiled program (a search on the call
// number, then each conditional call's rules) decides exactly as the rules
// read one after another, for every call number of the architecture and
// beyond, the other ABIs, and, for each call with argument conditions,
// arguments on and around every value a condition names, in either word.
func TestSeccompProgramIsItsRules(t *testing.T) {
	f, err := builtSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	prof, err := mobyseccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := seccompRules(prof, info)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(f.insns)
	if err != nil {
		t.Fatal(err)
	}
	// Argument values: each a condition names, its neighbours, its
	// words swapped and moved to the other word, masks with and without
	// their bits; and some plain ones.
	values := []uint64{0, 1, 2, 3, 0xffffffff, 1 << 32, math.MaxUint64, 0x7fffffff, 0x80000000}
	conditional := map[uint32]bool{}
	for _, r := range rules {
		for _, c := range r.conds {
			conditional[r.nr] = true
			for _, v := range []uint64{c.Value, c.ValueTwo} {
				values = append(values, v, v-1, v+1, v<<32, v|1<<32, v>>32, ^v, v|c.ValueTwo)
			}
		}
	}
	slices.Sort(values)
	values = slices.Compact(values)
	decide := func(auditArch, nr uint32, args [6]uint64) {
		t.Helper()
		got, err := vm.Run(seccompData(auditArch, nr, args))
		if err != nil {
			t.Fatal(err)
		}
		if want := chainDecides(rules, info, auditArch, nr, args); uint32(got) != want {
			t.Fatalf("arch %#x, call %d, arguments %#x: the program says %#x, the rules %#x", auditArch, nr, args, got, want)
		}
	}
	var nrs []uint32
	for nr := range uint32(1024) {
		nrs = append(nrs, nr)
	}
	nrs = append(nrs, 1<<16, x32Bit-1, x32Bit, x32Bit+1, x32Bit+3, 0x7fffffff, 0x80000000, math.MaxUint32-1, math.MaxUint32)
	checked := 0
	for _, nr := range nrs {
		for _, a := range []uint32{uint32(info.ID), uint32(arch.I386.ID), uint32(arch.ARM.ID), 0} {
			decide(a, nr, [6]uint64{})
			checked++
		}
		if !conditional[nr] {
			decide(uint32(info.ID), nr, [6]uint64{math.MaxUint64, 1, 2, 3, 4, 5})
			continue
		}
		// Every condition is on argument 0 or 2 here; each value in
		// each, and in both at once.
		for _, v := range values {
			for _, w := range values {
				decide(uint32(info.ID), nr, [6]uint64{v, 0, w})
				checked++
			}
			decide(uint32(info.ID), nr, [6]uint64{v, v, v, v, v, v})
		}
	}
	for _, r := range rules {
		for _, c := range r.conds {
			if c.Index != 0 && c.Index != 2 {
				t.Errorf("call %d has a condition on argument %d, which this test does not vary", r.nr, c.Index)
			}
		}
	}
	t.Logf("%d decisions checked, %d instructions", checked, len(f.insns))
}

// TestShadowedRulesAreOnlyThoseNeverReached: a rule is left out of the
// program only when an earlier rule of its call holds for every argument
// list it holds for.
func TestShadowedRulesAreOnlyThoseNeverReached(t *testing.T) {
	ne := func(i uint, v uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: i, Value: v, Op: specs.OpNotEqual}
	}
	eq := func(i uint, v uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: i, Value: v, Op: specs.OpEqualTo}
	}
	families := seccompRule{nr: 41, conds: []specs.LinuxSeccompArg{ne(0, 1), ne(0, 2)}, action: retEPERM}
	for _, c := range []struct {
		name    string
		r       seccompRule
		earlier []seccompRule
		want    bool
	}{
		{"a value the earlier rule refuses", seccompRule{nr: 41, conds: []specs.LinuxSeccompArg{eq(0, 7)}}, []seccompRule{families}, true},
		{"a value the earlier rule lets by", seccompRule{nr: 41, conds: []specs.LinuxSeccompArg{eq(0, 2)}}, []seccompRule{families}, false},
		{"another argument", seccompRule{nr: 41, conds: []specs.LinuxSeccompArg{eq(2, 7)}}, []seccompRule{families}, false},
		{"two conditions", seccompRule{nr: 41, conds: []specs.LinuxSeccompArg{eq(0, 7), eq(2, 0)}}, []seccompRule{families}, false},
		{"not an equality", seccompRule{nr: 41, conds: []specs.LinuxSeccompArg{{Index: 0, Value: 7, Op: specs.OpGreaterEqual}}}, []seccompRule{families}, false},
		{"an earlier rule of mixed conditions", seccompRule{nr: 41, conds: []specs.LinuxSeccompArg{eq(0, 7)}},
			[]seccompRule{{nr: 41, conds: []specs.LinuxSeccompArg{ne(0, 1), eq(2, 0)}}}, false},
		{"an earlier rule on another argument", seccompRule{nr: 41, conds: []specs.LinuxSeccompArg{eq(0, 7)}},
			[]seccompRule{{nr: 41, conds: []specs.LinuxSeccompArg{ne(2, 1)}}}, false},
		{"no earlier rule", seccompRule{nr: 41, conds: []specs.LinuxSeccompArg{eq(0, 7)}}, nil, false},
	} {
		if got := shadowed(c.r, c.earlier); got != c.want {
			t.Errorf("%s: shadowed %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSeccompProfileIsStable: the digest names the program, so building it
// twice gives the same one, and the name says where it comes from.
func TestSeccompProfileIsStable(t *testing.T) {
	a, err := buildSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	b, err := buildSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	if a.profile != b.profile {
		t.Errorf("two builds differ: %v, %v", a.profile, b.profile)
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), "github.com/moby/profiles/seccomp "+mobyProfileVersion+"\n") {
		t.Errorf("go.mod does not require github.com/moby/profiles/seccomp %s, the version the profile's name gives", mobyProfileVersion)
	}
	t.Logf("%s (%d instructions)", a.profile, len(a.insns))
}

// TestSeccompAgentWorkloadRuns: the shell tools an agent uses (a pipeline,
// threads through a Go program, files, a unix socket) work under the filter.
func TestSeccompAgentWorkloadRuns(t *testing.T) {
	r := requireBwrapHost(t)
	spec := runDir(t, testBase(t), "/bin/sh", "-c",
		`set -e; mkdir -p a/b; echo hi > a/b/f; cat a/b/f | tr a-z A-Z > up; grep -q HI up; ls -la a >/dev/null
		 command -v python3 >/dev/null && python3 -c 'import threading,socket,os; s=socket.socket(socket.AF_UNIX); t=threading.Thread(target=print, args=("thread",)); t.start(); t.join()'
		 echo ok`)
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
}
