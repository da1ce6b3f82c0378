package sandbox

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// cgroupPrefix names every per-run cgroup, under a "harnessfacts" directory
// of the parent.
const cgroupPrefix = "harnessfacts"

// killTimeout bounds how long killing a tree may take before Run reports it.
const killTimeout = 10 * time.Second

// runCgroup is one run's cgroup, in whichever hierarchy version the host has.
type runCgroup interface {
	// version is 1 or 2.
	version() int
	// start starts the command born inside the cgroup (v2: clone3 with
	// CLONE_INTO_CGROUP; v1: forked by a thread that moved itself in,
	// startOnForker), so that there is no moment at which it or anything
	// it forks runs unlimited, and in the network namespace netns (nil:
	// this process's own; else the forker enters it, on v2 too).
	start(cmd *exec.Cmd, netns *os.File) error
	// adopt moves a helper the runner started for the run (slirp4netns)
	// into the cgroup, before it opens any connection: its memory, CPU
	// and the buffers of its sockets count in the run's (see
	// runUserModeStackInCgroup).
	adopt(pid int) error
	// watchSockets watches, while the run lasts, what its sockets'
	// buffers add to its memory where the memory limit does not bound
	// them (v1), and calls kill once the two pass limit. stop ends the
	// watch and says why it killed ("" if it did not) and the highest
	// memory and buffers it saw together.
	watchSockets(limit int64, kill func()) (stop func() (cause string, peak int64))
	// killAll kills every process of the cgroup and waits until it is empty.
	killAll() error
	// stats reports whether the OOM killer fired and the peak memory use.
	stats() (oomKilled bool, peak int64)
	// controllers names the controllers that bound the run (memory, pids,
	// and cpu where the host lets it have a CPU share of its own).
	controllers() []string
	// remove deletes the (empty) cgroup.
	remove() error
}

// newRunName names a run's cgroup for the process that makes it
// (cgroupowner_linux.go): run-<pid>-<start>-<random>, or run-<random> where
// this process cannot read its own start time.
func newRunName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	if o, ok := selfOwner(); ok {
		return fmt.Sprintf("run-%d-%d-%s", o.pid, o.start, hex.EncodeToString(b[:]))
	}
	return "run-" + hex.EncodeToString(b[:])
}

// newRunCgroup makes a per-run cgroup with the limits, below the runs'
// parent (runParent). On a unified (v2-only) host it uses cgroup2; on a
// legacy or hybrid host the memory and pids controllers live in v1
// hierarchies, so it uses those two.
//
// Below the caller's own cgroup (a local run, no node-agent placement and
// no CgroupParent) the "harnessfacts" directory is removed with the last
// run in it, so that a local run leaves nothing in its user's cgroup tree
// (removeRunParent). Another run may remove it between its making and the
// run's cgroup's: the making is tried again then.
func newRunCgroup(opts Options, limits Limits) (runCgroup, error) {
	name := filepath.Join(cgroupPrefix, newRunName())
	for attempt := 1; ; attempt++ {
		cg, err := makeRunCgroup(opts, name, limits)
		if err == nil || attempt == 3 || !errors.Is(err, fs.ErrNotExist) {
			return cg, err
		}
	}
}

func makeRunCgroup(opts Options, name string, limits Limits) (runCgroup, error) {
	if cgroups.Mode() == cgroups.Unified {
		mount := cgroup2Mount(opts)
		parent, err := runParentV2(opts, mount)
		if err != nil {
			return nil, err
		}
		c, err := newV2Cgroup(mount, parent, name, limits, true)
		if err != nil {
			return nil, err // not a nil *v2Cgroup in a non-nil runCgroup
		}
		if ownParent(opts, "") {
			c.tidy = filepath.Dir(c.dir)
		}
		return c, nil
	}
	c, err := newV1Cgroup(opts, name, limits)
	if err != nil {
		return nil, err
	}
	for n, p := range c.paths {
		if ownParent(opts, string(n)) {
			c.tidy = append(c.tidy, filepath.Dir(p))
		}
	}
	return c, nil
}

// ownParent says whether the runs' cgroups of a hierarchy ("" for v2) go
// below the caller's own cgroup, as runParentV1 and runParentV2 decide.
func ownParent(opts Options, hierarchy string) bool {
	_, placed := opts.runParents[hierarchy]
	return !placed && opts.CgroupParent == ""
}

// removeRunParent removes the "harnessfacts" directory dir when no run is
// left in it; with one (EBUSY, ENOTEMPTY), it stays for that run to remove.
func removeRunParent(dir string) {
	if filepath.Base(dir) == cgroupPrefix {
		_ = os.Remove(dir)
	}
}

// cgroup2Mount is the cgroup2 mount the per-run cgroups are made in.
func cgroup2Mount(opts Options) string {
	if opts.CgroupMount != "" {
		return opts.CgroupMount
	}
	return DefaultCgroupMount
}

// runParentV2 is the cgroup, relative to mount, below which runs' cgroups
// are made: the one PlaceNodeAgent fixed, else CgroupParent, else the
// caller's own.
func runParentV2(opts Options, mount string) (string, error) {
	if p, ok := opts.runParents[""]; ok {
		return p, nil
	}
	if opts.CgroupParent != "" {
		return filepath.Join("/", opts.CgroupParent), nil
	}
	own, err := ownCgroupV2(mount)
	if err != nil {
		return "", fmt.Errorf("cgroup v2: %w", err)
	}
	return own, nil
}

// runParentV1 is runParentV2 for one v1 hierarchy.
func runParentV1(opts Options, n cgroup1.Name) (string, error) {
	if p, ok := opts.runParents[string(n)]; ok {
		return p, nil
	}
	if opts.CgroupParent != "" {
		return filepath.Join("/", opts.CgroupParent), nil
	}
	own, err := ownCgroupV1(n)
	if err != nil {
		return "", fmt.Errorf("cgroup v1: %w", err)
	}
	return own, nil
}

// evacuateToLeaf moves every process of the v2 cgroup dir into dir/leaf, so
// that controllers can be enabled in dir's subtree. Processes that exit
// meanwhile are skipped; forks that land in dir meanwhile are moved by the
// next round.
func evacuateToLeaf(dir, leaf string) error {
	target := filepath.Join(dir, leaf)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("cgroup v2: make leaf %s: %w", target, err)
	}
	for range 10 {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("cgroup v2: %w", err)
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			err := os.WriteFile(filepath.Join(target, "cgroup.procs"), []byte(pid), 0)
			if err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("cgroup v2: move pid %s into %s: %w", pid, target, err)
			}
		}
	}
	return fmt.Errorf("cgroup v2: %s keeps gaining processes; cannot empty it", dir)
}

// ---- cgroup v1 ----

type v1Cgroup struct {
	cg    cgroup1.Cgroup
	paths map[cgroup1.Name]string
	// tidy are the runs' parents to remove with the run (newRunCgroup).
	tidy []string
	// maxProcesses is the pids limit (0: none). While the forker starts a
	// command from inside the cgroup its thread counts there too, so the
	// limit is one higher until the command has started (start), and the
	// thread sets it back before it moves out; forkerRoom says it is
	// higher now.
	maxProcesses int64
	forkerRoom   bool
}

// v1Found is v1Hierarchy's answer once it had one: where the hierarchies
// are mounted does not change under a running process, and reading the
// mount table again took a tenth of a millisecond of every sandbox's start.
var v1Found struct {
	sync.Mutex
	subs []cgroup1.Subsystem
}

// v1Hierarchy returns the v1 controllers a run's cgroup is made in: memory
// and pids, and cpu where this process may write it.
func v1Hierarchy() ([]cgroup1.Subsystem, error) {
	v1Found.Lock()
	defer v1Found.Unlock()
	if v1Found.subs == nil {
		subs, err := findV1Hierarchy()
		if err != nil {
			return nil, err
		}
		v1Found.subs = subs
	}
	return slices.Clone(v1Found.subs), nil
}

func findV1Hierarchy() ([]cgroup1.Subsystem, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	var root string
	for _, s := range all {
		if s.Name() == cgroup1.Memory {
			if p, ok := s.(interface{ Path(string) string }); ok {
				root = filepath.Dir(p.Path("/"))
			}
		}
	}
	var subs []cgroup1.Subsystem
	have := map[cgroup1.Name]bool{}
	for _, s := range all {
		switch s.Name() {
		case cgroup1.Memory:
			// memsw (swap accounting) is limited too when the kernel has it,
			// so swap cannot stretch the memory limit.
			subs = append(subs, cgroup1.NewMemory(root, cgroup1.OptionalSwap()))
		case cgroup1.Pids:
			subs = append(subs, s)
		case cgroup1.Cpu:
			// A run's processes together get one CPU share, however many
			// they are: an agent that keeps a thousand threads busy takes
			// its share of a contended node, not the node-agent's and the
			// other runs'. Optional: a host may not mount it, or mount it
			// read-only; the preflight's verdict says so (cgroupDescription).
			if !cpuV1Writable(s) {
				continue
			}
			subs = append(subs, s)
		default:
			continue
		}
		have[s.Name()] = true
	}
	for _, n := range []cgroup1.Name{cgroup1.Memory, cgroup1.Pids} {
		if !have[n] {
			return nil, fmt.Errorf("cgroup v1: the %s controller is not mounted (expected /sys/fs/cgroup/%s): mount it or boot with cgroup v2", n, n)
		}
	}
	return subs, nil
}

// cpuV1Writable reports whether this process can make cgroups below its
// own in the v1 cpu hierarchy: asked once (a mount's being read-only does
// not change), not at every run.
func cpuV1Writable(s cgroup1.Subsystem) bool {
	cpuV1Once.Do(func() {
		own, err := ownCgroupV1(s.Name())
		cpuV1OK = err == nil && unix.Access(v1Dir(s, own), unix.W_OK) == nil
	})
	return cpuV1OK
}

var (
	cpuV1Once sync.Once
	cpuV1OK   bool
)

func newV1Cgroup(opts Options, name string, limits Limits) (*v1Cgroup, error) {
	subs, err := v1Hierarchy()
	if err != nil {
		return nil, err
	}
	parents := map[cgroup1.Name]string{}
	for _, s := range subs {
		if parents[s.Name()], err = runParentV1(opts, s.Name()); err != nil {
			return nil, err
		}
	}
	path := func(n cgroup1.Name) (string, error) {
		p, ok := parents[n]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return filepath.Join(p, name), nil
	}
	mem := limits.MemoryBytes
	// Made with room for the forker's thread: the first start needs it.
	pids := limits.MaxProcesses
	if pids > 0 {
		pids++
	}
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &mem, Swap: &mem},
		Pids:   &specs.LinuxPids{Limit: &pids},
	}
	cg, err := cgroup1.New(path, res, cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil }))
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: create per-run cgroup %s: %w", name, err)
	}
	c := &v1Cgroup{cg: cg, paths: map[cgroup1.Name]string{}, maxProcesses: max(limits.MaxProcesses, 0), forkerRoom: limits.MaxProcesses > 0}
	for _, s := range subs {
		if p, ok := s.(interface{ Path(string) string }); ok {
			if rel, err := path(s.Name()); err == nil {
				c.paths[s.Name()] = p.Path(rel)
			}
		}
	}
	// Before anything is in it: only the sockets made after this count.
	if err := c.limitTCP(mem); err != nil {
		_ = c.remove()
		return nil, err
	}
	return c, nil
}

// tcpLimitFile is v1's TCP buffer limit of a memory cgroup.
const tcpLimitFile = "memory.kmem.tcp.limit_in_bytes"

// limitTCP gives the cgroup a TCP buffer limit of limit bytes. On v1 the
// buffers of a socket are charged to the memory cgroup it was made in only
// once that cgroup has a TCP limit of its own (the first write turns the
// accounting on, for the sockets made afterwards), and then to a counter
// apart from memory.usage_in_bytes, which memory.limit_in_bytes does not
// bound: without it an agent under a 128 MiB limit held 612 MiB of loopback
// TCP buffers in its own network namespace, which the whole node shares
// (net.ipv4.tcp_mem: at its hard mark every TCP socket of the node is
// starved), while its cgroup showed 3 MiB. Even with it the limit is soft
// (over it the kernel still charges each socket's minimum and only puts
// the sockets under pressure), so watchSockets kills the run at its memory
// limit. A kernel without the file (no kernel memory accounting) charges
// no socket buffers to a v1 cgroup at all; there is nothing to turn on.
func (c *v1Cgroup) limitTCP(limit int64) error {
	f, err := os.OpenFile(filepath.Join(c.paths[cgroup1.Memory], tcpLimitFile), os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		_, err = f.WriteString(strconv.FormatInt(limit, 10))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("cgroup v1: bound the run's TCP buffers (%s): %w", tcpLimitFile, err)
	}
	return nil
}

// boundsSockets says whether the run's TCP buffers count against its
// memory limit here: the kernel has v1's TCP accounting (limitTCP), which
// watchSockets reads.
func (c *v1Cgroup) boundsSockets() bool {
	dir, ok := c.paths[cgroup1.Memory]
	if !ok {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, tcpLimitFile))
	return err == nil
}

func (*v1Cgroup) version() int { return 1 }

func (c *v1Cgroup) controllers() []string {
	var names []string
	for _, n := range []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Cpu} {
		if _, ok := c.paths[n]; ok {
			names = append(names, string(n))
		}
	}
	return names
}

// start starts cmd born in the cgroup's hierarchies (startOnForker). The
// forker's thread is in the cgroup from before the fork until it has moved
// back, after the command's exec, and counts in its pids meanwhile: on a
// busy node it may be kept from running that long while the command's
// processes start beside it, and the run had one process fewer than its
// limit. So the limit has room for the thread until the command has
// started, and is the run's own from then on: the thread sets it back
// itself before it moves out, so the run never has a process more than
// its limit (for the two system calls until the thread is out, one
// fewer).
func (c *v1Cgroup) start(cmd *exec.Cmd, netns *os.File) error {
	if c.maxProcesses > 0 && !c.forkerRoom {
		// Started again (bwrap's setup retried): room again.
		if err := c.setMaxProcesses(c.maxProcesses + 1); err != nil {
			return err
		}
		c.forkerRoom = true
	}
	tasks := map[cgroup1.Name]string{}
	for n, p := range c.paths {
		tasks[n] = filepath.Join(p, "tasks")
	}
	var started func() error
	if c.maxProcesses > 0 {
		// On the forker's thread, before it moves out. A limit that
		// cannot be set back kills the command: never a run with more
		// processes than its limit.
		started = func() error {
			if err := c.setMaxProcesses(c.maxProcesses); err != nil {
				return err
			}
			c.forkerRoom = false
			return nil
		}
	}
	return startOnForker(tasks, netns, cmd, started)
}

// setMaxProcesses writes the cgroup's pids limit.
func (c *v1Cgroup) setMaxProcesses(n int64) error {
	p, ok := c.paths[cgroup1.Pids]
	if !ok {
		return nil
	}
	if err := os.WriteFile(filepath.Join(p, "pids.max"), []byte(strconv.FormatInt(n, 10)), 0); err != nil {
		return fmt.Errorf("cgroup v1: set the run's process limit: %w", err)
	}
	return nil
}

// adopt moves pid into each of the run's hierarchies. The buffers of the
// connections pid opens for the run are charged to the run's memory cgroup
// like those of the payload's own sockets: its TCP accounting has been on
// since the cgroup was made (limitTCP).
func (c *v1Cgroup) adopt(pid int) error {
	for _, n := range []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Cpu} {
		if p, ok := c.paths[n]; ok {
			if err := os.WriteFile(filepath.Join(p, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				return fmt.Errorf("cgroup v1: move %d into %s: %w", pid, p, err)
			}
		}
	}
	return nil
}

// socketPoll is how often watchSockets reads a v1 run's TCP buffers.
const socketPoll = 50 * time.Millisecond

// watchSockets kills the run once its TCP buffers and its memory together
// pass limit, the run's memory limit: v1 charges the buffers to a counter
// of their own (memory.kmem.tcp.usage_in_bytes, see limitTCP), which
// memory.limit_in_bytes does not bound and whose own limit the kernel lets
// sockets pass. A poll is two reads of open files, one of them while the
// run has no buffers; the watch starts and ends with the run's sandbox, in
// a goroutine of its own, off its start.
//
// The memory counter holds the run's file cache too, which fills to the
// limit in the ordinary course and which the kernel would reclaim to make
// room (on v2 it does, for socket buffers too): once the sum passes the
// limit, the file cache (memory.stat) is left out, and the run is killed
// only when what the kernel cannot take back from it (anonymous memory,
// tmpfs files, kernel memory) and its socket buffers pass the limit, the
// bound v2's memory.max sets.
func (c *v1Cgroup) watchSockets(limit int64, kill func()) func() (string, int64) {
	dir := c.paths[cgroup1.Memory]
	done, exited := make(chan struct{}), make(chan struct{})
	var cause string
	var peak int64
	go func() {
		defer close(exited)
		tick := time.NewTicker(socketPoll)
		defer tick.Stop()
		var tcpFile, memFile *os.File
		defer func() {
			for _, f := range []*os.File{tcpFile, memFile} {
				if f != nil {
					_ = f.Close()
				}
			}
		}()
		var buf [32]byte
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if tcpFile == nil {
				// Opened at the first poll, not while the sandbox starts.
				var err error
				if tcpFile, err = os.Open(filepath.Join(dir, "memory.kmem.tcp.usage_in_bytes")); err != nil {
					return // no TCP accounting on this kernel (limitTCP)
				}
				if memFile, err = os.Open(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
					return
				}
			}
			tcp := preadInt(tcpFile, buf[:])
			if tcp <= 0 {
				continue
			}
			mem := preadInt(memFile, buf[:])
			if mem+tcp <= limit {
				peak = max(peak, mem+tcp)
				continue
			}
			st := readKV(filepath.Join(dir, "memory.stat"))
			held := max(mem-int64(st["total_inactive_file"]+st["total_active_file"]), 0)
			peak = max(peak, held+tcp)
			if held+tcp > limit {
				cause = fmt.Sprintf("its TCP socket buffers (%d MiB) and the rest of its memory (%d MiB) together passed it", tcp>>20, held>>20)
				kill()
				return
			}
		}
	}()
	return func() (string, int64) {
		close(done)
		<-exited
		return cause, peak
	}
}

// preadInt reads the number a cgroup file holds from its start, 0 if it
// cannot.
func preadInt(f *os.File, buf []byte) int64 {
	n, err := unix.Pread(int(f.Fd()), buf, 0)
	if err != nil || n <= 0 {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64)
	return v
}

// killAll sends SIGKILL to every process of the cgroup and repeats until it
// is empty. No freezer: a process forked between listing and killing is
// caught by the next round, and the pids limit bounds how many there can be,
// while joining a third v1 hierarchy would cost every run another migration
// (each takes the kernel's global threadgroup lock, milliseconds under load).
func (c *v1Cgroup) killAll() error {
	deadline := time.Now().Add(killTimeout)
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		procs, err := v1Procs(c.paths[cgroup1.Pids])
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("cgroup v1: list processes: %w", err)
		}
		// A thread of this process is there only if the forker could
		// not leave (startOnForker): never this process's own end.
		if i := slices.Index(procs, os.Getpid()); i >= 0 {
			procs = slices.Delete(procs, i, i+1)
			if len(procs) == 0 {
				return fmt.Errorf("cgroup v1: a thread of the node's own process is stuck in %s", c.paths[cgroup1.Pids])
			}
		}
		if len(procs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup v1: %d processes still alive after %s", len(procs), killTimeout)
		}
		for _, pid := range procs {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(delay)
	}
}

func (c *v1Cgroup) stats() (bool, int64) {
	dir := c.paths[cgroup1.Memory]
	oom := readKV(filepath.Join(dir, "memory.oom_control"))["oom_kill"] > 0
	peak := readUint(filepath.Join(dir, "memory.max_usage_in_bytes"))
	if !oom {
		// Kernels before 4.13 have no oom_kill counter; hitting the limit
		// (failcnt) with the tree killed is the best sign there is.
		if _, ok := readKV(filepath.Join(dir, "memory.oom_control"))["oom_kill"]; !ok {
			oom = readUint(filepath.Join(dir, "memory.failcnt")) > 0
		}
	}
	return oom, int64(peak)
}

func (c *v1Cgroup) remove() error {
	var errs []error
	for _, dir := range c.paths {
		if err := removeV1(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cgroup v1: remove: %w", err)
	}
	for _, d := range c.tidy {
		removeRunParent(d)
	}
	return nil
}

// v1Procs lists the processes of the v1 cgroup at dir and of every cgroup
// below it (a run's cgroup has none: nothing in the sandbox can make one).
// It reads each cgroup.procs and finds the cgroups below by their
// directory entries' types alone; containerd's cgroup1 walks the tree with
// an lstat of every control file (some thirty in a memory cgroup), which
// was most of the time a run's cgroup took to remove.
func v1Procs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		below, err := v1Procs(filepath.Join(dir, e.Name()))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		pids = append(pids, below...)
	}
	return pids, nil
}

// removeV1 removes the v1 cgroup at dir, and any below it first. The
// kernel refuses (EBUSY) while a process is in it, and a killed process
// leaves its cgroups only once it has run its exit: it tries again for
// up to 150 ms, as containerd's cgroup1 does. Gone already is done.
func removeV1(dir string) error {
	delay := 10 * time.Millisecond
	for try := 1; ; try++ {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		busy := errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOTEMPTY)
		if busy {
			// A cgroup below it (never made by a run) goes first.
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.IsDir() {
					if err := removeV1(filepath.Join(dir, e.Name())); err != nil {
						return err
					}
				}
			}
		}
		if try == 5 || !busy {
			if pids, perr := v1Procs(dir); perr == nil && len(pids) > 0 {
				return fmt.Errorf("%s holds %d processes still: %w", dir, len(pids), err)
			}
			return fmt.Errorf("%s: %w", dir, err)
		}
		time.Sleep(delay)
		delay *= 2
	}
}

// ---- cgroup v2 ----

type v2Cgroup struct {
	m   *cgroup2.Manager
	dir string
	// cpu: the run has a CPU weight of its own.
	cpu bool
	// tidy is the runs' parent to remove with the run (newRunCgroup).
	tidy string
}

// newV2Cgroup makes mount/parent/name with the limits. withLimits false makes
// a cgroup without controllers; only tests use it, on hosts whose v2
// hierarchy has none, to exercise placement and killing.
func newV2Cgroup(mount, parent, name string, limits Limits, withLimits bool) (*v2Cgroup, error) {
	group := filepath.Join("/", parent, name)
	res := &cgroup2.Resources{}
	cpu := false
	if withLimits {
		mem := limits.MemoryBytes
		res.Memory = &cgroup2.Memory{Max: &mem}
		res.Pids = &cgroup2.Pids{Max: limits.MaxProcesses}
		// One CPU weight per run, however many processes it has (see
		// v1Hierarchy), where the parent offers the cpu controller.
		if slices.Contains(strings.Fields(readString(filepath.Join(mount, parent, "cgroup.controllers"))), "cpu") {
			weight := uint64(100)
			res.CPU = &cgroup2.CPU{Weight: &weight}
			cpu = true
		}
	}
	m, err := cgroup2.NewManager(mount, group, res)
	if err != nil && cpu {
		// The kernel may refuse the cpu controller where memory and pids
		// work (real-time tasks in the subtree): the run goes on with
		// those two, and the cgroup says so (controllers, preflight).
		res.CPU, cpu = nil, false
		m, err = cgroup2.NewManager(mount, group, res)
	}
	if err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOTSUP) {
			return nil, fmt.Errorf("cgroup v2: cannot enable the memory and pids controllers below %s: it holds processes (the no-internal-processes rule); "+
				"let the node-agent move into its leaf (--move-to-leaf-cgroup, sandbox.PlaceNodeAgent), start it in a leaf cgroup such as %s/agent, or set --cgroup-parent to a delegated subtree: %w",
				filepath.Join(mount, parent), filepath.Join(mount, parent), err)
		}
		return nil, fmt.Errorf("cgroup v2: create %s: %w", group, err)
	}
	dir := filepath.Join(mount, group)
	if withLimits {
		// No swap, so swap cannot stretch the memory limit. The file is
		// absent when the kernel does not account swap; nothing to do then.
		if err := os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			_ = m.Delete()
			return nil, fmt.Errorf("cgroup v2: set memory.swap.max: %w", err)
		}
	}
	return &v2Cgroup{m: m, dir: dir, cpu: cpu}, nil
}

func (*v2Cgroup) version() int { return 2 }

func (c *v2Cgroup) controllers() []string {
	if c.cpu {
		return []string{"memory", "pids", "cpu"}
	}
	return []string{"memory", "pids"}
}

// start starts cmd with clone3(CLONE_INTO_CGROUP) on the cgroup's directory:
// the child is born inside the cgroup, so there is no moment at which it or
// anything it forks runs unlimited.
func (c *v2Cgroup) start(cmd *exec.Cmd, netns *os.File) error {
	fd, err := os.OpenFile(c.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cgroup v2: open %s: %w", c.dir, err)
	}
	defer func() { _ = fd.Close() }()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(fd.Fd())
	if netns != nil {
		return startOnForker(nil, netns, cmd, nil)
	}
	return cmd.Start()
}

// adopt moves pid into the cgroup. v2 charges the buffers of a socket to
// the memory cgroup of the process that made it.
func (c *v2Cgroup) adopt(pid int) error {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("cgroup v2: move %d into %s: %w", pid, c.dir, err)
	}
	return nil
}

// watchSockets has nothing to do on v2: the buffers of a socket are
// charged to memory.current of the memory cgroup that made it, with the
// rest of its memory, so they are under memory.max, its reclaim and its
// OOM killer like any other memory of the run (not tested here: this
// project's machines are v1).
func (*v2Cgroup) watchSockets(int64, func()) func() (string, int64) {
	return func() (string, int64) { return "", 0 }
}

// killAll writes cgroup.kill (or freezes and kills on kernels before 5.14,
// which the library does) and waits until the cgroup is empty.
func (c *v2Cgroup) killAll() error {
	deadline := time.Now().Add(killTimeout)
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if readKV(filepath.Join(c.dir, "cgroup.events"))["populated"] == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup v2: %s still populated after %s", c.dir, killTimeout)
		}
		if err := c.m.Kill(); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cgroup v2: kill: %w", err)
		}
		time.Sleep(delay)
	}
}

func (c *v2Cgroup) stats() (bool, int64) {
	ev := readKV(filepath.Join(c.dir, "memory.events"))
	return ev["oom_kill"] > 0 || ev["oom_group_kill"] > 0, int64(readUint(filepath.Join(c.dir, "memory.peak")))
}

func (c *v2Cgroup) remove() error {
	if err := c.m.Delete(); err != nil {
		return fmt.Errorf("cgroup v2: remove: %w", err)
	}
	if c.tidy != "" {
		removeRunParent(c.tidy)
	}
	return nil
}

// ---- small readers for the few values the library does not expose ----

func readKV(path string) map[string]uint64 {
	out := map[string]uint64{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		var k string
		var v uint64
		if n, _ := fmt.Sscanf(s.Text(), "%s %d", &k, &v); n == 2 {
			out[k] = v
		}
	}
	return out
}

func readUint(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var v uint64
	_, _ = fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &v)
	return v
}

// readString is a cgroup file's content, "" when it cannot be read.
func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}
