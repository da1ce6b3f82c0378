// Package machinecpu reads how much CPU the whole machine has spent, for
// benchmarks that say what a piece of work costs the machine, the kernel's
// threads (which tear a sandbox's namespaces down, for one) included.
package machinecpu

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// Read is the time all cores have spent busy (user, nice, system, irq,
// softirq, steal) and idle (idle, iowait) since boot, from the first line
// of /proc/stat (in the kernel's 100 ticks a second); zero where it cannot
// be read.
func Read() (busy, idle time.Duration) {
	return read("cpu")
}

// ReadCPU is Read for one core, CPU cpu (its line in /proc/stat).
func ReadCPU(cpu int) (busy, idle time.Duration) {
	return read("cpu" + strconv.Itoa(cpu))
}

func read(name string) (busy, idle time.Duration) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	for line := range bytes.Lines(raw) {
		f := strings.Fields(string(line))
		if len(f) < 9 || f[0] != name {
			continue
		}
		tick := func(j int) time.Duration {
			v, _ := strconv.ParseInt(f[j], 10, 64)
			return time.Duration(v) * 10 * time.Millisecond
		}
		return tick(1) + tick(2) + tick(3) + tick(6) + tick(7) + tick(8), tick(4) + tick(5)
	}
	return 0, 0
}
