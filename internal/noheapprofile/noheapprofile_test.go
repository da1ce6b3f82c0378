package noheapprofile_test

import (
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	_ "github.com/harnessfacts/harnessfacts/internal/noheapprofile"
)

// The packages that sort before this one (the standard library's among
// them) were initialized, and may have been sampled, before its init. After
// it, the runtime samples once more on each P (Go 1.26 records the
// allocation at which a P sees the rate change) and then never: 256 MiB
// allocated here would be about 512 samples at the default rate.
func TestSamplingIsOff(t *testing.T) {
	if runtime.MemProfileRate != 0 {
		t.Fatalf("runtime.MemProfileRate is %d after the import, want 0", runtime.MemProfileRate)
	}
	var keep [][]byte
	for range 256 {
		keep = append(keep, make([]byte, 1<<20))
		keep = keep[:min(len(keep), 8)]
	}
	// A heap profile shows the state as of the last completed cycle but one.
	runtime.GC()
	runtime.GC()
	n, _ := runtime.MemProfile(nil, true)
	records := make([]runtime.MemProfileRecord, n+16)
	n, ok := runtime.MemProfile(records, true)
	if !ok {
		t.Fatalf("the heap profile grew past %d records", len(records))
	}
	var sampled int64
	for _, r := range records[:n] {
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.HasSuffix(f.Function, ".TestSamplingIsOff") {
				sampled += r.AllocObjects
				break
			}
			if !more {
				break
			}
		}
	}
	if sampled > int64(runtime.GOMAXPROCS(0)) {
		t.Fatalf("%d of this test's allocations were sampled, want at most one for each of %d Ps", sampled, runtime.GOMAXPROCS(0))
	}
	runtime.KeepAlive(keep)
}

// Each binary that links a heap-profile reader imports the package: the
// linker would not turn the sampling off there (the others have it off by
// the linker already).
func TestEveryBinaryThatCouldProfileImportsIt(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "../../cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 4 {
		t.Fatalf("go list ../../cmd/... named %d commands", len(lines))
	}
	profiling := 0
	for _, l := range lines {
		f := strings.Fields(l)
		deps := f[1:]
		if !slices.Contains(deps, "runtime/pprof") && !slices.Contains(deps, "net/http/pprof") {
			continue
		}
		profiling++
		if !slices.Contains(deps, "github.com/harnessfacts/harnessfacts/internal/noheapprofile") {
			t.Errorf("%s links a heap profile reader and samples for it: import internal/noheapprofile", f[0])
		}
	}
	if profiling == 0 {
		t.Error("no command links a heap profile reader: the package is no longer needed")
	}
}
