package testenv

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harnessfacts/harnessfacts/internal/testing/machinecpu"
)

// CPUCounter reads, from /proc, the CPU time of this process (the
// controller, node-agents, fake nodes, clients), of the processes it started
// and waited for (sandboxes, once reaped), of the kube-apiserver serving
// host and of its etcd: zero where they cannot be found. Benchmarks divide
// the difference of two readings by the runs between them, to say which
// process a run's CPU went to.
type CPUCounter struct{ apiserver, etcd int }

// CPUTimes is one reading of a CPUCounter. Busy and Idle are the whole
// machine's, every core summed (/proc/stat): whether the cores were
// saturated, and how much went to what the four do not cover (the kernel's
// threads, such as the ones that tear down a sandbox's namespaces, and any
// other process).
type CPUTimes struct{ Self, Children, APIServer, Etcd, Busy, Idle time.Duration }

// NewCPUCounter finds the kube-apiserver serving host (a rest.Config's Host)
// and its etcd among this machine's processes.
func NewCPUCounter(host string) *CPUCounter {
	c := &CPUCounter{}
	_, port, ok := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://"), ":")
	if !ok {
		return c
	}
	procs, _ := os.ReadDir("/proc")
	var etcdURL string
	args := map[int][]string{}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err != nil {
			continue
		}
		a := strings.Split(string(raw), "\x00")
		args[pid] = a
		if strings.HasSuffix(a[0], "kube-apiserver") && slices.Contains(a, "--secure-port="+strings.TrimSuffix(port, "/")) {
			c.apiserver = pid
			for _, arg := range a {
				if v, ok := strings.CutPrefix(arg, "--etcd-servers="); ok {
					etcdURL = v
				}
			}
		}
	}
	for pid, a := range args {
		if etcdURL != "" && strings.HasSuffix(a[0], "etcd") && slices.Contains(a, "--listen-client-urls="+etcdURL) {
			c.etcd = pid
		}
	}
	return c
}

// Read reads the four times now.
func (c *CPUCounter) Read() CPUTimes {
	self, children := procCPU("self")
	apiserver, _ := procCPU(strconv.Itoa(c.apiserver))
	etcd, _ := procCPU(strconv.Itoa(c.etcd))
	busy, idle := machinecpu.Read()
	return CPUTimes{Self: self, Children: children, APIServer: apiserver, Etcd: etcd, Busy: busy, Idle: idle}
}

// procCPU is a process's user and system time, and that of its children it
// waited for (utime, stime, cutime and cstime of /proc/PID/stat, in the
// kernel's 100 ticks a second).
func procCPU(pid string) (own, children time.Duration) {
	if pid == "0" {
		return 0, 0
	}
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0
	}
	// The command name, in parentheses, may hold spaces.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 15 {
		return 0, 0
	}
	tick := func(j int) time.Duration {
		v, _ := strconv.ParseInt(f[j], 10, 64)
		return time.Duration(v) * 10 * time.Millisecond
	}
	return tick(11) + tick(12), tick(13) + tick(14)
}

// Minus is the CPU time between o and t.
func (t CPUTimes) Minus(o CPUTimes) CPUTimes {
	return CPUTimes{t.Self - o.Self, t.Children - o.Children, t.APIServer - o.APIServer, t.Etcd - o.Etcd, t.Busy - o.Busy, t.Idle - o.Idle}
}

// PerRun says how much of each went to a run, over runs runs.
func (t CPUTimes) PerRun(runs int) string {
	per := func(d time.Duration) time.Duration { return (d / time.Duration(runs)).Round(100 * time.Microsecond) }
	s := fmt.Sprintf("CPU per run: kube-apiserver %s, etcd %s, this process %s", per(t.APIServer), per(t.Etcd), per(t.Self))
	if t.Children > 0 {
		s += fmt.Sprintf(", its children %s", per(t.Children))
	}
	if all := t.Busy + t.Idle; all > 0 {
		s += fmt.Sprintf("; the machine %s busy (%.0f %% of its cores' time)", per(t.Busy), 100*float64(t.Busy)/float64(all))
	}
	return s
}
