package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/moby/sys/mountinfo"
)

// placeHelperEnv makes the test binary play a node-agent that starts in a
// container's cgroup (base) and places itself with PlaceNodeAgent; the
// test, like a container runtime, made base and looks at what it did.
const placeHelperEnv = "HARNESSFACTS_TEST_PLACE_HELPER"

// placeConfig tells the helper what to do.
type placeConfig struct {
	// Version 1 uses the v1 memory and pids hierarchies; 2 the cgroup2
	// mount at Mount.
	Version int
	Mount   string
	// Base lists the cgroup (relative to each hierarchy's root) the helper
	// starts in, one per hierarchy directory in BaseDirs.
	Base     string
	BaseDirs []string
	Limit    int64
	// RunAlloc, when set, is what a process in a run's cgroup allocates
	// (v1; the run's limit is 512 MiB).
	RunAlloc int64
	// Alloc, when set, is what the helper itself then allocates.
	Alloc int64
}

// placeReport is what the helper saw.
type placeReport struct {
	Placement  Placement
	Err        string
	Self       string // /proc/self/cgroup after the placement
	LeafLimit  string // the leaf's memory limit file
	Runs       []string
	RunExit    string
	RunPeak    int64
	RunOOM     bool
	Released   bool
	ReleaseErr string
}

func runPlaceHelper(t *testing.T, cfg placeConfig) (placeReport, error) {
	t.Helper()
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), placeHelperEnv+"="+string(b))
	out, err := cmd.Output()
	var rep placeReport
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); jerr != nil && err == nil {
		t.Fatalf("helper output %q: %v", out, jerr)
	}
	return rep, err
}

// placeHelper runs in the helper process. It reports after each step (the
// last line counts), since an allocation may end it.
func placeHelper(raw string) int {
	var cfg placeConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Println(err)
		return 2
	}
	var rep placeReport
	report := func() {
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
	}
	// The container runtime's part: start in base.
	for _, d := range cfg.BaseDirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			rep.Err = "entering base: " + err.Error()
			report()
			return 1
		}
	}
	var opts Options
	var err error
	if cfg.Version == 2 {
		opts = Options{CgroupMount: cfg.Mount, MoveToLeafCgroup: true}
		opts, rep.Placement, err = placeV2(opts, cfg.Mount, cfg.Limit)
	} else {
		opts, rep.Placement, err = placeV1(Options{}, cfg.Limit)
	}
	if err != nil {
		rep.Err = err.Error()
		report()
		return 0
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	rep.Self = string(self)
	if len(rep.Placement.Agent) > 0 {
		f := "memory.limit_in_bytes"
		if cfg.Version == 2 {
			f = "memory.max"
		}
		for _, a := range rep.Placement.Agent {
			if l, err := os.ReadFile(filepath.Join(a, f)); err == nil {
				rep.LeafLimit = strings.TrimSpace(string(l))
			}
		}
	}
	report()
	// Two runs, one after the other: neither nests below the leaf (the v2
	// placement once read its own cgroup again, then <own>/agent).
	for range 2 {
		name := filepath.Join(cgroupPrefix, newRunName())
		var cg runCgroup
		if cfg.Version == 2 {
			parent, perr := runParentV2(opts, cfg.Mount)
			if perr != nil {
				rep.Err = perr.Error()
				report()
				return 0
			}
			var c *v2Cgroup
			c, err = newV2Cgroup(cfg.Mount, parent, name, Limits{}.WithDefaults(), cfg.Limit > 0)
			if err == nil {
				rep.Runs = append(rep.Runs, c.dir)
				cg = c
			}
		} else {
			var c *v1Cgroup
			c, err = newV1Cgroup(opts, name, Limits{MemoryBytes: 512 << 20}.WithDefaults())
			if err == nil {
				for _, p := range c.paths {
					rep.Runs = append(rep.Runs, p)
				}
				cg = c
			}
		}
		if err != nil {
			rep.Err = "run cgroup: " + err.Error()
			report()
			return 0
		}
		if cfg.RunAlloc > 0 && cfg.Version == 1 {
			// Moved into the run's cgroup before it forks what allocates.
			n := strconv.FormatInt(cfg.RunAlloc, 10)
			cmd := exec.Command("sh", "-c", "read go; head -c "+n+" /dev/zero | tail -c "+n+" >/dev/null")
			in, _ := cmd.StdinPipe()
			if err := cg.start(cmd, nil); err != nil {
				rep.Err = err.Error()
				report()
				return 0
			}
			_, _ = in.Write([]byte("go\n"))
			_ = in.Close()
			err = cmd.Wait()
			rep.RunExit = fmt.Sprint(err)
			rep.RunOOM, rep.RunPeak = cg.stats()
			cfg.RunAlloc = 0
		}
		_ = cg.killAll()
		if err := cg.remove(); err != nil {
			rep.Err = err.Error()
		}
	}
	report()
	if cfg.Alloc > 0 {
		b := make([]byte, cfg.Alloc)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("allocated", len(b))
	}
	if err := rep.Placement.Release(); err != nil {
		rep.ReleaseErr = err.Error()
	}
	rep.Released = true
	report()
	return 0
}

// v1Base makes base in the hierarchies a run's cgroup is made in (memory,
// pids and, where it is writable, cpu) and removes it (and what the helper
// left in it) when the test ends.
func v1Base(t *testing.T, name string) (string, []string) {
	t.Helper()
	base := filepath.Join("/", testCgroupParent, name)
	var dirs []string
	for _, h := range v1Controllers() {
		d := filepath.Join("/sys/fs/cgroup", h, base)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	t.Cleanup(func() { removeCgroupTree(dirs) })
	return base, dirs
}

// removeCgroupTree removes cgroup directories and everything below them,
// leaves first.
func removeCgroupTree(dirs []string) {
	for _, d := range dirs {
		var all []string
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			_ = os.Remove(all[i])
		}
	}
}

func requireV1(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests need root: they create cgroups (run `go test` as root, as CI does)")
	}
	if cgroups.Mode() == cgroups.Unified {
		t.Skip("a unified (cgroup v2) host: TestPlaceNodeAgentV2 covers it")
	}
}

// On cgroup v1: the node-agent moves into <base>/agent of the memory and
// pids hierarchies with its hard limit; runs' cgroups are made in
// <base>/harnessfacts, beside it, so a run may use more memory than the
// node-agent's whole bound; Release leaves no cgroup of its own.
func TestPlaceNodeAgentV1LeafBesideRuns(t *testing.T) {
	requireV1(t)
	base, dirs := v1Base(t, "place-beside")
	const limit = 64 << 20
	rep, err := runPlaceHelper(t, placeConfig{Version: 1, Base: base, BaseDirs: dirs, Limit: limit, RunAlloc: 160 << 20})
	if err != nil || rep.Err != "" {
		t.Fatalf("helper: %v %s", err, rep.Err)
	}
	p := rep.Placement
	var wantAgent []string
	for _, d := range dirs {
		wantAgent = append(wantAgent, filepath.Join(d, AgentLeaf))
	}
	if sortedJoin(p.Agent) != sortedJoin(wantAgent) || p.MemoryLimit != limit || p.Version != 1 {
		t.Errorf("placement %+v, want the node-agent in %v with limit %d", p, wantAgent, limit)
	}
	for _, h := range v1Controllers() {
		if !selfIn(rep.Self, h, filepath.Join(base, AgentLeaf)) {
			t.Errorf("the helper is not in its leaf of the %s hierarchy: /proc/self/cgroup\n%s", h, rep.Self)
		}
	}
	if rep.LeafLimit != strconv.Itoa(limit) {
		t.Errorf("the leaf's memory.limit_in_bytes is %q, want %d", rep.LeafLimit, limit)
	}
	if len(rep.Runs) != 2*len(dirs) {
		t.Fatalf("runs' cgroups %v, want two runs in each of %v", rep.Runs, dirs)
	}
	for _, r := range rep.Runs {
		parent := filepath.Dir(r)
		if filepath.Base(parent) != cgroupPrefix || !slices.Contains(dirs, filepath.Dir(parent)) {
			t.Errorf("run cgroup %s is not beside the leaf (in <base>/%s)", r, cgroupPrefix)
		}
	}
	// 160 MiB in a run, over the node-agent's 64 MiB: not counted there.
	if rep.RunExit != "<nil>" || rep.RunOOM || rep.RunPeak < 160<<20 {
		t.Errorf("a run using more than the node-agent's bound: exit %s, OOM %v, peak %d MiB", rep.RunExit, rep.RunOOM, rep.RunPeak>>20)
	}
	if !rep.Released || rep.ReleaseErr != "" {
		t.Errorf("release: %v %s", rep.Released, rep.ReleaseErr)
	}
	for _, d := range dirs {
		for _, left := range []string{AgentLeaf, cgroupPrefix} {
			if _, err := os.Stat(filepath.Join(d, left)); err == nil {
				t.Errorf("%s left after Release", filepath.Join(d, left))
			}
		}
	}
}

// The node-agent's bound is hard: allocating past it, the node-agent (and
// nothing outside its leaf) is OOM-killed.
func TestPlaceNodeAgentV1BoundIsHard(t *testing.T) {
	requireV1(t)
	base, dirs := v1Base(t, "place-hard")
	const limit = 64 << 20
	rep, err := runPlaceHelper(t, placeConfig{Version: 1, Base: base, BaseDirs: dirs, Limit: limit, Alloc: 256 << 20})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("allocating 256 MiB over a 64 MiB bound: %v, report %+v; want killed", err, rep)
	}
	oc, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", base, AgentLeaf, "memory.oom_control"))
	if readKVString(string(oc))["oom_kill"] < 1 {
		t.Errorf("the leaf's memory.oom_control shows no OOM kill:\n%s", oc)
	}
	if rep.Released {
		t.Error("the helper went on past its allocation")
	}
}

// Without a limit on cgroup v1 the node-agent stays where it started; runs
// go below that cgroup (as the mounted hierarchy shows it, not a copy of
// the full path below it), and Release leaves no runs' parent behind there
// either (a node-agent run on a host, as the benchmark's is, left
// "harnessfacts" in the host's hierarchies).
func TestPlaceNodeAgentV1NoLimitStays(t *testing.T) {
	requireV1(t)
	base, dirs := v1Base(t, "place-none")
	rep, err := runPlaceHelper(t, placeConfig{Version: 1, Base: base, BaseDirs: dirs})
	if err != nil || rep.Err != "" {
		t.Fatalf("helper: %v %s", err, rep.Err)
	}
	if len(rep.Placement.Agent) != 0 || !strings.Contains(rep.Self, ":memory:"+base+"\n") {
		t.Errorf("placement %+v, self %s: want the node-agent left in %s", rep.Placement, rep.Self, base)
	}
	var want []string
	for _, d := range dirs {
		want = append(want, filepath.Join(d, cgroupPrefix))
	}
	if sortedJoin(rep.Placement.Runs) != sortedJoin(want) {
		t.Errorf("runs below %v, want %v", rep.Placement.Runs, want)
	}
	if len(rep.Runs) != 2*len(dirs) {
		t.Fatalf("runs' cgroups %v, want two runs in each of %v", rep.Runs, dirs)
	}
	if !rep.Released || rep.ReleaseErr != "" {
		t.Errorf("release: %v %s", rep.Released, rep.ReleaseErr)
	}
	for _, d := range want {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s left after Release", d)
		}
	}
}

// The v2 code path. On a unified host it runs with the limit; on this
// kind of hybrid host the cgroup2 at /sys/fs/cgroup/unified has no
// controllers, so the placement runs without a limit (as
// --move-to-leaf-cgroup does) and a limit is refused, saying why.
func TestPlaceNodeAgentV2(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("these tests need root: they create cgroups (run `go test` as root, as CI does)")
	}
	mount := "/sys/fs/cgroup"
	var limit int64 = 64 << 20
	if cgroups.Mode() != cgroups.Unified {
		mount = "/sys/fs/cgroup/unified"
		limit = 0
		if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
			t.Fatalf("no cgroup2 at %s on this hybrid host", mount)
		}
	}
	base := filepath.Join("/", testCgroupParent, "place-v2")
	dir := filepath.Join(mount, base)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree([]string{dir}) })
	rep, err := runPlaceHelper(t, placeConfig{Version: 2, Mount: mount, Base: base, BaseDirs: []string{dir}, Limit: limit})
	if err != nil || rep.Err != "" {
		t.Fatalf("helper: %v %s", err, rep.Err)
	}
	leaf := filepath.Join(dir, AgentLeaf)
	if strings.Join(rep.Placement.Agent, " ") != leaf || !strings.Contains(rep.Self, "0::"+filepath.Join(base, AgentLeaf)+"\n") {
		t.Errorf("placement %+v, self %s: want the node-agent in %s", rep.Placement, rep.Self, leaf)
	}
	if limit > 0 && rep.LeafLimit != strconv.FormatInt(limit, 10) {
		t.Errorf("the leaf's memory.max is %q, want %d", rep.LeafLimit, limit)
	}
	if len(rep.Runs) != 2 {
		t.Fatalf("runs' cgroups %v, want two", rep.Runs)
	}
	for _, r := range rep.Runs {
		if filepath.Dir(r) != filepath.Join(dir, cgroupPrefix) {
			t.Errorf("run cgroup %s: want it in %s, beside the leaf (never below %s)", r, filepath.Join(dir, cgroupPrefix), leaf)
		}
	}
	if !rep.Released || rep.ReleaseErr != "" {
		t.Errorf("release: %v %s", rep.Released, rep.ReleaseErr)
	}
	if _, err := os.Stat(filepath.Join(dir, cgroupPrefix)); err == nil {
		t.Errorf("%s left after Release", filepath.Join(dir, cgroupPrefix))
	}
	if limit == 0 {
		// A limit needs the memory controller, which this cgroup2 lacks.
		dir2 := filepath.Join(mount, testCgroupParent, "place-v2-limit")
		if err := os.MkdirAll(dir2, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeCgroupTree([]string{dir2}) })
		rep, err := runPlaceHelper(t, placeConfig{Version: 2, Mount: mount, BaseDirs: []string{dir2}, Limit: 64 << 20})
		if err != nil || !strings.Contains(rep.Err, "memory controller must be available") {
			t.Errorf("a limit without the memory controller: %v, %q", err, rep.Err)
		}
	}
}

func TestRelativeCgroup(t *testing.T) {
	for _, c := range []struct{ root, path, want string }{
		{"/", "/", "/"},
		{"/", "/a/b", "/a/b"},
		// A container: its own cgroup mounted as the hierarchy's root.
		{"/kubepods/pod1/c1", "/kubepods/pod1/c1", "/"},
		{"/kubepods/pod1/c1", "/kubepods/pod1/c1/agent", "/agent"},
		{"/a/b", "/a", ""},
		{"/a/b", "/a/bc", ""},
	} {
		got, err := relativeCgroup(c.root, c.path)
		if c.want == "" {
			if err == nil {
				t.Errorf("relativeCgroup(%q, %q) = %q, want an error", c.root, c.path, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("relativeCgroup(%q, %q) = %q, %v; want %q", c.root, c.path, got, err, c.want)
		}
	}
}

// TestLastMountRootUnescapes: the mountinfo table is read with
// moby/sys/mountinfo, which undoes the kernel's octal escapes: a cgroup
// mounted at a path with a space (a pod's cgroup named by a runtime, a
// bind mount a node's tooling made) is found by its real path and its root
// is the real cgroup path, not "\040" taken literally. The last match wins,
// as a later mount hides an earlier one at the same place.
func TestLastMountRootUnescapes(t *testing.T) {
	table := `22 1 0:21 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
30 22 0:21 /kubepods/pod\0401/c1 /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
31 1 0:21 /a\011b /run/my\040cgroup rw,nosuid - cgroup2 cgroup2 rw
32 1 0:22 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
`
	v2At := func(mount string) func(*mountinfo.Info) bool {
		return func(m *mountinfo.Info) bool { return m.FSType == "cgroup2" && filepath.Clean(m.Mountpoint) == mount }
	}
	for _, c := range []struct {
		match func(*mountinfo.Info) bool
		want  string
	}{
		{v2At("/sys/fs/cgroup"), "/kubepods/pod 1/c1"},
		{v2At("/run/my cgroup"), "/a\tb"},
		{func(m *mountinfo.Info) bool { return m.FSType == "cgroup" && strings.Contains(m.VFSOptions, "memory") }, "/"},
	} {
		got, err := lastMountRoot(strings.NewReader(table), c.match)
		if err != nil || got != c.want {
			t.Errorf("lastMountRoot = %q, %v; want %q", got, err, c.want)
		}
	}
	if _, err := lastMountRoot(strings.NewReader(table), v2At("/nowhere")); err == nil {
		t.Error("a mount that is not there was found")
	}
}

func readKVString(s string) map[string]int64 {
	out := map[string]int64{}
	for _, l := range strings.Split(s, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			out[f[0]] = v
		}
	}
	return out
}

func sortedJoin(l []string) string {
	l = slices.Clone(l)
	slices.Sort(l)
	return strings.Join(l, " ")
}

// selfIn reports whether /proc/self/cgroup puts the process in path of the
// v1 hierarchy h (co-mounted hierarchies, such as cpu,cpuacct, included).
func selfIn(self, h, path string) bool {
	for _, l := range strings.Split(self, "\n") {
		if p := strings.SplitN(l, ":", 3); len(p) == 3 && slices.Contains(strings.Split(p[1], ","), h) {
			return p[2] == path
		}
	}
	return false
}

// v1Controllers names the v1 hierarchies a run's cgroup is made in.
func v1Controllers() []string {
	subs, err := v1Hierarchy()
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(subs))
	for _, s := range subs {
		names = append(names, string(s.Name()))
	}
	return names
}

// TestRemoveAbandonedCgroups: what `harnessfacts run` removes at its start
// is the empty run cgroups whose maker is gone, just made or not, and those
// whose name says no maker made more than minAge ago, in every hierarchy;
// one without a maker just made (another local run's, about to hold its
// sandbox), one a live process made, however old, and one that still holds
// a process stay. RecoverAbandoned (a node-agent's start) removes every
// empty one but the live process's.
func TestRemoveAbandonedCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make cgroups")
	}
	opts := Options{CgroupParent: testCgroupParent + "-abandoned"}
	dirs, err := runParentDirs(opts)
	if err != nil {
		t.Skipf("no cgroup hierarchy to use: %v", err)
	}
	t.Cleanup(removeTestCgroupParent)
	live := newRunName() // this process's
	if _, ok := runOwner(live); !ok {
		t.Fatalf("newRunName() = %q names no maker", live)
	}
	dead := deadOwnerName(t)
	old := time.Now().Add(-2 * time.Minute)
	for _, d := range dirs {
		for _, name := range []string{"run-old", "run-new", "run-busy", live, dead} {
			if err := os.MkdirAll(filepath.Join(d, name), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Remove(filepath.Join(d, name)) })
		}
		for _, name := range []string{"run-old", "run-busy", live} {
			if err := os.Chtimes(filepath.Join(d, name), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A process holds run-busy of the first hierarchy (enough for it to
	// stay there: the kernel refuses to remove it). Killed first of the
	// cleanups, before the cgroups are removed.
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	busy := filepath.Join(dirs[0], "run-busy")
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	removed, err := RemoveAbandonedCgroups(opts, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	for _, d := range dirs {
		if exists(filepath.Join(d, "run-old")) {
			t.Errorf("%s/run-old, empty and two minutes old, was not removed (removed %v)", d, removed)
		}
		if !exists(filepath.Join(d, "run-new")) {
			t.Errorf("%s/run-new, just made, was removed", d)
		}
		if exists(filepath.Join(d, dead)) {
			t.Errorf("%s/%s, just made by a process that is gone, was not removed", d, dead)
		}
		if !exists(filepath.Join(d, live)) {
			t.Errorf("%s/%s, made by this live process, was removed", d, live)
		}
	}
	if !exists(busy) {
		t.Errorf("%s, which holds a process, was removed", busy)
	}
	if _, err := RecoverAbandoned(opts, ""); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if exists(filepath.Join(d, "run-new")) {
			t.Errorf("RecoverAbandoned left %s/run-new", d)
		}
		// A node-agent starting beside a live process that shares the
		// parent (CI's test processes, a local run) leaves it its cgroup.
		if !exists(filepath.Join(d, live)) {
			t.Errorf("RecoverAbandoned removed %s/%s, a live process's", d, live)
		}
	}
}

// deadOwnerName is a run cgroup's name whose maker was a process that has
// ended: the pid and start time of a `sleep` that was killed.
func deadOwnerName(t *testing.T) string {
	t.Helper()
	p := exec.Command("sleep", "30")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := procStart(p.Process.Pid)
	_ = p.Process.Kill()
	_ = p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("run-%d-%d-0123456789abcdef", p.Process.Pid, start)
}
