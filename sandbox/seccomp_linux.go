package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sync"

	"github.com/elastic/go-seccomp-bpf/arch"
	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter every bwrap sandbox runs under (bwrap --seccomp).
//
// It starts from the profile Docker and containerd ship as their default
// (github.com/moby/profiles/seccomp), evaluated for a process with no
// capabilities at all, which is what the sandbox is after --cap-drop ALL:
// an allow-list of about 370 calls; everything else fails with EPERM.
// On top of it:
//
//   - deniedSyscalls fail with EPERM even where Docker's profile would allow
//     them (ptrace and its relatives, which Docker allows from Linux 4.8 on),
//     so that the list of what must never reach the kernel is explicit here
//     and does not depend on a later version of the upstream profile;
//   - only the native ABI is allowed. Docker translates its allow-list to the
//     i386 and x32 ABIs of an amd64 host as well; here every call made
//     through int 0x80 (i386) fails with EPERM and every x32 call (the
//     __X32_SYSCALL_BIT) with ENOSYS, so a denied call cannot be reached
//     under another number.
//
// The syscall tables are github.com/elastic/go-seccomp-bpf's (no cgo); the
// program is assembled here with golang.org/x/net/bpf, see assembleSeccomp.
// Its name and the sha256 of the BPF program are in every Result, for the
// receipt: SeccompProfile.

// mobyProfileVersion is the version of github.com/moby/profiles/seccomp in
// go.mod (a test keeps the two the same).
const mobyProfileVersion = "v0.3.0"

// deniedSyscalls are refused with EPERM before any allow rule is looked at.
var deniedSyscalls = []string{
	// Kernel keyrings are not namespaced: a key added by one run is in the
	// user's keyring of every other run of the same uid, and keyctl has a
	// long record of kernel bugs.
	"keyctl", "add_key", "request_key",
	// eBPF, perf and userfaultfd: large kernel attack surface, and
	// userfaultfd makes kernel races easy to win.
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Kernel AIO contexts draw on one count for the whole node
	// (fs.aio-max-nr, 65536 by default, no exemption even for root): a
	// run under 64 MiB and 4 processes took a quarter of it with one
	// io_setup(16384), and one of 65536 leaves every other process of
	// the node (a database's, another run's) EAGAIN until the run ends.
	// Without a context the other io_* calls do nothing.
	"io_setup",
	// Reading or steering other processes, even of the same uid.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
	// The kernel itself.
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"reboot", "swapon", "swapoff", "acct", "syslog",
	// Mounts and namespaces (bwrap set them up before the filter applies).
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsmount", "fsconfig", "fspick", "open_tree", "move_mount", "mount_setattr",
	"open_by_handle_at",
}

// socketFamilies are the address families socket and socketpair may open:
// unix, IPv4, IPv6 and netlink (the C library's address lookups read the
// interfaces through it; its routing protocol only, see seccompRules). Any other fails with EAFNOSUPPORT, as in
// flatpak's sandboxes: each family the kernel has as a module (TIPC, RDS,
// CAN, Bluetooth, X.25, ...) is loaded, as root, by the first socket of it
// on a node that loads modules on demand, and brings its code in reach.
// Docker's profile allows all but AF_VSOCK.
var socketFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// SeccompProfile is the name and digest of the filter in force.
type SeccompProfile struct {
	// Name says what the filter is built from.
	Name string
	// Digest is "sha256:<hex>" of the BPF program as bwrap loads it.
	Digest string
}

// String is "Name@Digest", the form Result.Seccomp carries.
func (p SeccompProfile) String() string { return p.Name + "@" + p.Digest }

type seccompFilter struct {
	profile SeccompProfile
	// program is the BPF program as an array of struct sock_filter in
	// native byte order, the format of bwrap's --seccomp FD.
	program []byte
	insns   []bpf.Instruction
}

var builtSeccomp = sync.OnceValues(buildSeccomp)

// Seccomp returns the profile every bwrap sandbox runs under, or why it
// cannot be built on this architecture.
func Seccomp() (SeccompProfile, error) {
	f, err := builtSeccomp()
	if err != nil {
		return SeccompProfile{}, err
	}
	return f.profile, nil
}

func buildSeccomp() (*seccompFilter, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	// No capabilities: the sandbox drops them all.
	prof, err := mobyseccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		return nil, fmt.Errorf("seccomp: the default profile: %w", err)
	}
	rules, err := seccompRules(prof, info)
	if err != nil {
		return nil, err
	}
	insns, err := assembleSeccomp(rules, info)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	var buf bytes.Buffer
	for _, in := range raw {
		// struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }
		_ = binary.Write(&buf, binary.NativeEndian, struct {
			Op     uint16
			Jt, Jf uint8
			K      uint32
		}{in.Op, in.Jt, in.Jf, in.K})
	}
	sum := sha256.Sum256(buf.Bytes())
	name := fmt.Sprintf("harnessfacts-4: moby default %s without capabilities, %s only, %d calls denied first, sockets of %d families",
		mobyProfileVersion, info.Name, len(deniedSyscalls), len(socketFamilies))
	return &seccompFilter{
		profile: SeccompProfile{Name: name, Digest: "sha256:" + hex.EncodeToString(sum[:])},
		program: buf.Bytes(),
		insns:   insns,
	}, nil
}

// seccompRule is one rule of the program: the call nr, when every
// condition holds (none: always), ends with action.
type seccompRule struct {
	nr     uint32
	conds  []specs.LinuxSeccompArg
	action uint32
}

// seccompRules turns the evaluated OCI profile into rules, after the
// explicit denials. Names the architecture does not have (the profile lists
// every architecture's) are left out, as libseccomp does; an action it
// cannot express is an error, never a rule silently dropped.
func seccompRules(prof *specs.LinuxSeccomp, info *arch.Info) ([]seccompRule, error) {
	if prof.DefaultAction != specs.ActErrno || (prof.DefaultErrnoRet != nil && *prof.DefaultErrnoRet != uint(unix.EPERM)) {
		return nil, fmt.Errorf("seccomp: the default profile's default action is %s, not EPERM", prof.DefaultAction)
	}
	var rules []seccompRule
	for _, n := range deniedSyscalls {
		if nr, ok := info.SyscallNames[n]; ok {
			rules = append(rules, seccompRule{nr: uint32(nr), action: retEPERM})
		}
	}
	for _, n := range []string{"socket", "socketpair"} {
		if nr, ok := info.SyscallNames[n]; ok {
			var conds []specs.LinuxSeccompArg
			for _, f := range socketFamilies {
				conds = append(conds, specs.LinuxSeccompArg{Index: 0, Value: f, Op: specs.OpNotEqual})
			}
			rules = append(rules, seccompRule{nr: uint32(nr), conds: conds, action: unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)})
		}
	}
	// Of netlink, the routing protocol alone (what address lookups and
	// `ip` read): each other protocol may be a module of its own too
	// (crypto_user, the socket diagnostics, audit).
	if nr, ok := info.SyscallNames["socket"]; ok {
		rules = append(rules, seccompRule{nr: uint32(nr), conds: []specs.LinuxSeccompArg{
			{Index: 0, Value: unix.AF_NETLINK, Op: specs.OpEqualTo},
			{Index: 2, Value: unix.NETLINK_ROUTE, Op: specs.OpNotEqual},
		}, action: unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)})
	}
	for _, rule := range prof.Syscalls {
		var action uint32
		switch rule.Action {
		case specs.ActAllow:
			action = unix.SECCOMP_RET_ALLOW
		case specs.ActErrno:
			errno := uint(unix.EPERM)
			if rule.ErrnoRet != nil {
				errno = *rule.ErrnoRet
			}
			action = unix.SECCOMP_RET_ERRNO | uint32(errno&unix.SECCOMP_RET_DATA)
		default:
			return nil, fmt.Errorf("seccomp: the default profile has action %s, which this filter does not express", rule.Action)
		}
		for _, n := range rule.Names {
			nr, ok := info.SyscallNames[n]
			if !ok || slices.Contains(deniedSyscalls, n) {
				continue
			}
			for _, a := range rule.Args {
				if a.Index > 5 {
					return nil, fmt.Errorf("seccomp: %s: argument %d", n, a.Index)
				}
			}
			rules = append(rules, seccompRule{nr: uint32(nr), conds: rule.Args, action: action})
		}
	}
	return rules, nil
}

const retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)

// Offsets in struct seccomp_data.
const (
	dataNr   = 0
	dataArch = 4
	dataArgs = 16
)

// assembleSeccomp compiles the rules: the architecture check, the x32
// check on x86_64, then a binary search on the call's number
// (seccompSegments, searchSegments), whose leaves return the action of a
// call the rules decide by its number alone and jump to the rules of a
// call with argument conditions, which follow the search in order.
//
// It was one rule after another (a number compared, an action returned),
// about a thousand instructions. The kernel converts and compiles the
// program at every sandbox's start, and then runs it once for each of the
// architecture's calls to find those it may let through without running
// it again (its action cache): each of those runs walked the chain to the
// call's rule. That took about 1.5 ms of each start, a quarter of a bare
// bwrap's (BenchmarkSandboxStartCost, docs/performance.md); the search
// compares a number about nine times and has a third of the
// instructions. What each call and argument gets is exactly what the
// chain gave (TestSeccompProgramIsItsRules).
//
// go-seccomp-bpf's own assembler is not used: after a rule with argument
// conditions fails, it goes on to the next rule with the argument still in
// the accumulator, so later rules compare the argument, not the call number
// (with v1.6.0, personality(0xffffffff), which Docker allows, was refused,
// and a call whose argument equals a later rule's number could match it).
// Here the rules of a call are reached by its number only, and compare
// nothing but arguments.
func assembleSeccomp(rules []seccompRule, info *arch.Info) ([]bpf.Instruction, error) {
	var a bpfAsm
	a.emit(bpf.LoadAbsolute{Off: dataArch, Size: 4})
	a.jump(bpf.JumpEqual, uint32(info.ID), "arch-ok", "")
	a.emit(bpf.RetConstant{Val: retEPERM}) // i386 on x86_64, arm on arm64: no rule applies
	a.label("arch-ok")
	a.emit(bpf.LoadAbsolute{Off: dataNr, Size: 4})
	if info.ID == arch.X86_64.ID {
		a.jump(bpf.JumpGreaterOrEqual, uint32(arch.X32.SeccompMask), "", "native")
		a.emit(bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)})
		a.label("native")
	}
	segs, calls := seccompSegments(rules)
	a.searchSegments(segs)
	for _, c := range calls {
		a.label(callLabel(c.nr))
		for i, r := range c.rules {
			if len(r.conds) == 0 {
				break // the call's last rule: its action follows
			}
			fail := fmt.Sprintf("fail-%d-%d", c.nr, i)
			for j, cond := range r.conds {
				pass := fmt.Sprintf("pass-%d-%d-%d", c.nr, i, j)
				if err := a.condition(cond, pass, fail); err != nil {
					return nil, err
				}
				a.label(pass)
			}
			a.emit(bpf.RetConstant{Val: r.action})
			a.label(fail)
		}
		a.emit(bpf.RetConstant{Val: c.final})
	}
	return a.resolve()
}

// condition compares an argument: it jumps to pass when c holds and to
// fail when not.
func (a *bpfAsm) condition(c specs.LinuxSeccompArg, pass, fail string) error {
	hi, lo := argOffsets(c.Index)
	vhi, vlo := uint32(c.Value>>32), uint32(c.Value)
	switch c.Op {
	case specs.OpEqualTo:
		a.load(hi)
		a.jump(bpf.JumpEqual, vhi, "", fail)
		a.load(lo)
		a.jump(bpf.JumpEqual, vlo, pass, fail)
	case specs.OpNotEqual:
		a.load(hi)
		a.jump(bpf.JumpEqual, vhi, "", pass)
		a.load(lo)
		a.jump(bpf.JumpEqual, vlo, fail, pass)
	case specs.OpGreaterThan, specs.OpGreaterEqual:
		a.load(hi)
		a.jump(bpf.JumpGreaterThan, vhi, pass, "")
		a.jump(bpf.JumpEqual, vhi, "", fail)
		a.load(lo)
		cond := bpf.JumpGreaterThan
		if c.Op == specs.OpGreaterEqual {
			cond = bpf.JumpGreaterOrEqual
		}
		a.jump(cond, vlo, pass, fail)
	case specs.OpLessThan, specs.OpLessEqual:
		a.load(hi)
		a.jump(bpf.JumpLessThan, vhi, pass, "")
		a.jump(bpf.JumpEqual, vhi, "", fail)
		a.load(lo)
		cond := bpf.JumpLessThan
		if c.Op == specs.OpLessEqual {
			cond = bpf.JumpLessOrEqual
		}
		a.jump(cond, vlo, pass, fail)
	case specs.OpMaskedEqual:
		mhi, mlo := vhi, vlo
		whi, wlo := uint32(c.ValueTwo>>32), uint32(c.ValueTwo)
		a.load(hi)
		a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mhi})
		a.jump(bpf.JumpEqual, whi, "", fail)
		a.load(lo)
		a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mlo})
		a.jump(bpf.JumpEqual, wlo, pass, fail)
	default:
		return fmt.Errorf("seccomp: operator %s, which this filter does not express", c.Op)
	}
	return nil
}

// seccompCall is a call with argument conditions: its rules in order, and
// the action when none of those with conditions holds (its first rule
// without conditions, else EPERM).
type seccompCall struct {
	nr    uint32
	rules []seccompRule
	final uint32
}

// seccompSegment is where a run of call numbers begins (it ends where the
// next begins): their action, or the call whose rules decide.
type seccompSegment struct {
	lo     uint32
	action uint32
	call   *seccompCall
}

// seccompSegments cuts the numbers 0 to 2^32-1 into segments in order, each
// of one action or one call with argument conditions: what the rules, one
// after another, decide for each number. A call's rules apply only to its
// number, so the rules of other calls between them change nothing; the
// first of its rules without conditions ends its chain; a number no rule
// names gets EPERM. Neighbours with the same action are one segment.
func seccompSegments(rules []seccompRule) ([]seccompSegment, []*seccompCall) {
	byNr := map[uint32][]seccompRule{}
	for _, r := range rules {
		byNr[r.nr] = append(byNr[r.nr], r)
	}
	nrs := slices.Sorted(maps.Keys(byNr))
	var segs []seccompSegment
	var calls []*seccompCall
	add := func(s seccompSegment) {
		if n := len(segs); n > 0 && segs[n-1].lo == s.lo {
			segs = segs[:n-1]
		}
		if n := len(segs); n > 0 && s.call == nil && segs[n-1].call == nil && segs[n-1].action == s.action {
			return
		}
		segs = append(segs, s)
	}
	add(seccompSegment{lo: 0, action: retEPERM})
	for _, nr := range nrs {
		c := &seccompCall{nr: nr, final: retEPERM}
		for _, r := range byNr[nr] {
			if shadowed(r, c.rules) {
				continue
			}
			c.rules = append(c.rules, r)
			if len(r.conds) == 0 {
				c.final = r.action
				break
			}
		}
		if len(c.rules) == 1 && len(c.rules[0].conds) == 0 {
			add(seccompSegment{lo: nr, action: c.final})
		} else {
			calls = append(calls, c)
			add(seccompSegment{lo: nr, call: c})
		}
		if nr < math.MaxUint32 {
			add(seccompSegment{lo: nr + 1, action: retEPERM})
		}
	}
	return segs, calls
}

// shadowed reports whether r can never decide because a rule before it
// always does first, in the one case this looks for: r's only condition
// is an argument equal to v, and an earlier rule's conditions all say
// that argument differs from values v is not among, so it holds for every
// call r's holds for. Docker's profile allows socket family by family
// with 29 such rules, after the filter's own rule, which refuses every
// family but four: 27 of them were never reached, and made most of the
// program.
func shadowed(r seccompRule, earlier []seccompRule) bool {
	if len(r.conds) != 1 || r.conds[0].Op != specs.OpEqualTo {
		return false
	}
	eq := r.conds[0]
	for _, e := range earlier {
		if len(e.conds) == 0 {
			continue
		}
		all := true
		for _, c := range e.conds {
			if c.Op != specs.OpNotEqual || c.Index != eq.Index || c.Value == eq.Value {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func callLabel(nr uint32) string { return fmt.Sprintf("call-%d", nr) }

// searchSegments emits the binary search for the call number (in the
// accumulator) among segs: each comparison halves the segments, and each
// leaf returns its segment's action or jumps to its call's rules.
func (a *bpfAsm) searchSegments(segs []seccompSegment) {
	if len(segs) == 1 {
		if c := segs[0].call; c != nil {
			a.goTo(callLabel(c.nr))
		} else {
			a.emit(bpf.RetConstant{Val: segs[0].action})
		}
		return
	}
	m := (len(segs) + 1) / 2
	left := searchSize(segs[:m])
	if left <= 255 {
		// At or past segs[m], skip the lower half.
		a.emit(bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: segs[m].lo, SkipTrue: uint8(left)})
	} else {
		// Too far for a conditional jump: through an unconditional one.
		a.emit(bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: segs[m].lo, SkipFalse: 1})
		a.emit(bpf.Jump{Skip: uint32(left)})
	}
	a.searchSegments(segs[:m])
	a.searchSegments(segs[m:])
}

// searchSize is how many instructions searchSegments emits for segs.
func searchSize(segs []seccompSegment) int {
	if len(segs) == 1 {
		return 1
	}
	m := (len(segs) + 1) / 2
	left := searchSize(segs[:m])
	n := 1 + left + searchSize(segs[m:])
	if left > 255 {
		n++
	}
	return n
}

// argOffsets are the offsets of the high and low words of argument i.
func argOffsets(i uint) (hi, lo uint32) {
	lo = dataArgs + 8*uint32(i)
	hi = lo + 4
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 { // big-endian
		hi, lo = lo, hi
	}
	return hi, lo
}

// bpfAsm is a classic-BPF program with named jump targets.
type bpfAsm struct {
	insns  []bpf.Instruction
	labels map[string]int
	jumps  map[int][2]string // instruction → true, false target ("" next)
	gotos  map[int]string    // unconditional jumps: instruction → target
}

func (a *bpfAsm) emit(in bpf.Instruction) { a.insns = append(a.insns, in) }

func (a *bpfAsm) load(off uint32) { a.emit(bpf.LoadAbsolute{Off: off, Size: 4}) }

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.insns)
}

func (a *bpfAsm) jump(cond bpf.JumpTest, val uint32, ifTrue, ifFalse string) {
	if a.jumps == nil {
		a.jumps = map[int][2]string{}
	}
	a.jumps[len(a.insns)] = [2]string{ifTrue, ifFalse}
	a.emit(bpf.JumpIf{Cond: cond, Val: val})
}

// goTo jumps to label, however far ahead.
func (a *bpfAsm) goTo(label string) {
	if a.gotos == nil {
		a.gotos = map[int]string{}
	}
	a.gotos[len(a.insns)] = label
	a.emit(bpf.Jump{})
}

func (a *bpfAsm) resolve() ([]bpf.Instruction, error) {
	skip := func(at int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := a.labels[label]
		if !ok {
			return 0, fmt.Errorf("seccomp: no label %s", label)
		}
		d := to - at - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("seccomp: jump of %d instructions to %s", d, label)
		}
		return uint8(d), nil
	}
	for at, targets := range a.jumps {
		j := a.insns[at].(bpf.JumpIf)
		var err error
		if j.SkipTrue, err = skip(at, targets[0]); err != nil {
			return nil, err
		}
		if j.SkipFalse, err = skip(at, targets[1]); err != nil {
			return nil, err
		}
		a.insns[at] = j
	}
	for at, label := range a.gotos {
		to, ok := a.labels[label]
		if !ok {
			return nil, fmt.Errorf("seccomp: no label %s", label)
		}
		if to <= at {
			return nil, fmt.Errorf("seccomp: jump back to %s", label)
		}
		a.insns[at] = bpf.Jump{Skip: uint32(to - at - 1)}
	}
	if len(a.insns) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: %d instructions, over the kernel's %d", len(a.insns), unix.BPF_MAXINSNS)
	}
	return a.insns, nil
}

// seccompFile returns a sealed memfd holding the filter, for --seccomp.
func seccompFile() (*os.File, SeccompProfile, error) {
	f, err := builtSeccomp()
	if err != nil {
		return nil, SeccompProfile{}, err
	}
	mf, err := sealedMemfd("bwrap-seccomp", f.program)
	return mf, f.profile, err
}
