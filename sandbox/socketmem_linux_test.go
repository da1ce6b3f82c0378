package sandbox

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"

	"github.com/harnessfacts/harnessfacts/internal/testing/race"
)

// socketFillHelperEnv makes the test binary the socket filler: it opens
// loopback TCP connections in its own network namespace and writes into
// each until it would block, reading none, until it has written the MiB
// the variable says (or opened 4000 connections); then it says "DONE",
// holds them 2 s and exits 0. With socketFillCacheEnv it first writes
// that many MiB to a file of its working directory, to fill its page
// cache.
const (
	socketFillHelperEnv = "HF_TEST_SOCKET_FILL_MIB"
	socketFillCacheEnv  = "HF_TEST_SOCKET_FILL_CACHE_MIB"
)

func socketFillHelper(mib string) int {
	target, err := strconv.ParseInt(mib, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	target <<= 20
	if cache := os.Getenv(socketFillCacheEnv); cache != "" {
		n, err := strconv.Atoi(cache)
		if err == nil {
			err = os.WriteFile("cache-fill", make([]byte, n<<20), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Printf("cache=%d MiB\n", n)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var keep []net.Conn
	buf := make([]byte, 64<<10)
	var written int64
	for len(keep) < 2*4000 && written < target {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		s, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		keep = append(keep, c, s)
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		// Until the socket would block: the send queue, and the far
		// end's receive queue, which nothing reads.
		_ = rc.Write(func(fd uintptr) bool {
			for written < target {
				n, err := unix.Write(int(fd), buf)
				if err != nil || n <= 0 {
					break
				}
				written += int64(n)
			}
			return true
		})
		if len(keep)%20 == 0 {
			fmt.Printf("conns=%d written=%d MiB\n", len(keep)/2, written>>20)
		}
	}
	fmt.Printf("DONE conns=%d written=%d MiB\n", len(keep)/2, written>>20)
	time.Sleep(2 * time.Second)
	return 0
}

// hostTCPPages is the TCP memory of the whole host, in pages: the "mem"
// of /proc/net/sockstat's TCP line, which the kernel holds against
// net.ipv4.tcp_mem for every network namespace together.
func hostTCPPages(t testing.TB) int64 {
	t.Helper()
	v, err := readHostTCPPages()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func readHostTCPPages() (int64, error) {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "TCP:" {
			continue
		}
		for i := 1; i+1 < len(f); i += 2 {
			if f[i] == "mem" {
				return strconv.ParseInt(f[i+1], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no TCP mem in /proc/net/sockstat:\n%s", b)
}

// On cgroup v1 a memory cgroup is charged nothing for TCP socket buffers
// unless it has a TCP limit of its own, and then on a counter apart from
// its memory, which its memory limit does not bound: an agent under a
// 128 MiB limit held 612 MiB of loopback TCP buffers in its own network
// namespace (and could have taken the node's net.ipv4.tcp_mem, which
// starves every TCP socket of the node) while its cgroup showed 3 MiB, and
// its run passed. The run is killed at its memory limit, as an OOM kill,
// said to be its socket buffers, and the node's TCP memory comes back.
// The filler stops at 160 MiB written (about 40 connections), far below
// this host's tcp_mem, whatever the runner does.
func TestBwrapSocketBuffersCountInTheMemoryLimit(t *testing.T) {
	r := requireBwrapHost(t)
	if cgroups.Mode() == cgroups.Unified {
		t.Skip("cgroup v2 here: socket buffers are charged to memory.current, under memory.max, with the rest of the run's memory")
	}
	const limit = 48 << 20
	const fill = 160 // MiB
	spec := runDir(t, testBase(t))
	bin := filepath.Join(spec.Dir, "socket-fill")
	copyExecutable(t, bin)
	spec.Argv = []string{bin}
	spec.Env = append(spec.Env, fmt.Sprintf("%s=%d", socketFillHelperEnv, fill))
	spec.Limits = Limits{MemoryBytes: limit, Timeout: 60 * time.Second}

	page := int64(os.Getpagesize())
	before := hostTCPPages(t)
	var peak atomic.Int64
	peak.Store(before)
	done := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if p, err := readHostTCPPages(); err == nil && p > peak.Load() {
				peak.Store(p)
			}
		}
	})
	res, out := run(t, r, spec)
	close(done)
	sampling.Wait()
	grew := (peak.Load() - before) * page
	t.Logf("run: exit %d, signal %d, OOM %v (%s), peak %d MiB; the host's TCP memory grew by up to %d MiB; output:\n%s",
		res.ExitCode, res.Signal, res.OOMKilled, res.OOMCause, res.PeakMemory>>20, grew>>20, lastLines(out, 3))
	if !res.OOMKilled || !strings.Contains(res.OOMCause, "TCP socket buffers") {
		t.Errorf("not killed at its memory limit for its socket buffers: %+v", res)
	}
	if res.Signal != int(unix.SIGKILL) || res.TimedOut {
		t.Errorf("want killed by SIGKILL before the timeout: %+v", res)
	}
	if strings.Contains(out, "DONE") {
		t.Errorf("the filler wrote all of its %d MiB under a %d MiB limit", fill, limit>>20)
	}
	// Between two polls the kernel lets the buffers pass the limit by
	// what the filler adds in 50 ms (here about 10 MiB for this filler; a
	// C program opening connections as fast as it can added 60–130 MiB):
	// three times the limit is still short of what the filler holds
	// unbounded (about 165 MiB).
	if grew > 3*limit {
		t.Errorf("the host's TCP memory grew by %d MiB under a run limited to %d MiB", grew>>20, limit>>20)
	}
	// Its sockets went with it: the host's TCP memory comes back (others'
	// connections may hold a few pages more meanwhile).
	var now int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if now = hostTCPPages(t); (now-before)*page < 4<<20 || time.Now().After(deadline) {
			break
		}
	}
	if (now-before)*page >= 4<<20 {
		t.Errorf("the host's TCP memory is %d pages after the run, %d before it", now, before)
	}
}

// copyExecutable copies the test binary to path (the sandbox masks /tmp,
// where go test keeps it, and the run's uid could not reach it there).
func copyExecutable(t testing.TB, path string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// The run's file cache fills its memory counter to the limit in the
// ordinary course, and the kernel reclaims it as needed: a run whose file
// cache is full and that holds a few MiB of socket buffers is not killed
// (its cache is left out when the sum passes the limit).
func TestBwrapFileCacheAndSocketBuffersUnderTheLimitLive(t *testing.T) {
	if race.Enabled {
		t.Skip("a run near its memory limit: the race detector multiplies the memory of the Go process it runs")
	}
	r := requireBwrapHost(t)
	if cgroups.Mode() == cgroups.Unified {
		t.Skip("cgroup v2 here: the kernel reclaims the file cache for socket buffers under memory.max")
	}
	const limit = 48 << 20
	spec := runDir(t, testBase(t))
	bin := filepath.Join(spec.Dir, "socket-fill")
	copyExecutable(t, bin)
	spec.Argv = []string{bin}
	spec.Env = append(spec.Env, socketFillHelperEnv+"=8", socketFillCacheEnv+"=96")
	spec.Limits = Limits{MemoryBytes: limit, Timeout: 60 * time.Second}
	res, out := run(t, r, spec)
	t.Logf("run: exit %d, OOM %v (%s), peak %d MiB; output:\n%s", res.ExitCode, res.OOMKilled, res.OOMCause, res.PeakMemory>>20, lastLines(out, 3))
	if res.ExitCode != 0 || res.OOMKilled || !strings.Contains(out, "DONE") {
		t.Errorf("a run with its file cache full and 8 MiB of socket buffers was killed: %+v", res)
	}
}
