// Package startgc holds the garbage collector back while a local run
// starts. Linked into both harnessfacts binaries through internal/runcmd,
// it acts only for `harnessfacts run`, and only where the user set neither GOGC nor
// GOMEMLIMIT; the run calls Resume as its agent starts.
//
// Such a run is a short process whose start (HarnessRun's schema and CEL
// rules, the redactor's rules, the executor's preflight) allocates about
// 20 MB, little of which lives on; with the default GOGC the collector ran
// five times in its first 50 ms, on the same two cores as the validation and
// the sandbox preflight, and its assists and write barriers slowed them.
// Measured (`harnessfacts run` of the hello fixture, static builds, medians
// of 30 alternated runs, load 1.2–1.5): 97–103 ms against 107–115 without
// it; the run's peak RSS is about 5 MiB higher (71–72 against 66.5–67 MiB,
// the same binary run with GOGC=100).
//
// The package's init runs before the packages whose inits allocate most
// (k8s.io/..., sigs.k8s.io/..., which sort after it: a Go program
// initializes the first package by import path whose imports are done),
// as go.uber.org/automaxprocs sets GOMAXPROCS in its init.
//
// A start that allocates far more than usual (a large run file, fixture
// or environment image) must still be collected: once maxHeld bytes were
// allocated, the collector resumes by itself. That bound is watched rather
// than set as a soft memory limit (debug.SetMemoryLimit): a limit would make
// the collector run again and again while a large live heap stayed near it,
// where resuming gives the usual pacing back.
package startgc

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// defaultMaxHeld is how many bytes may be allocated while the collector is
// held back: ten times what a run's start allocates.
const defaultMaxHeld = 256 << 20

// maxHeld is defaultMaxHeld, or what a test sets.
var maxHeld atomic.Uint64

// watchEvery is how often the allocated bytes are read while held: at a
// gigabyte a second, 5 MB past maxHeld at most.
const watchEvery = 5 * time.Millisecond

var (
	mu     sync.Mutex
	held   bool
	resume chan struct{} // closed by Resume
	// What Resume gives back: GOGC before start.
	gcPercent int
)

func init() {
	maxHeld.Store(defaultMaxHeld)
	start(os.Args)
}

// start holds the collector back when args are those of `harnessfacts run`.
func start(args []string) {
	if len(args) < 2 || args[1] != "run" || os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if held {
		return
	}
	gcPercent = debug.SetGCPercent(-1)
	held, resume = true, make(chan struct{})
	go watch(resume)
}

// watch resumes the collector once maxHeld bytes were allocated since the
// process began, unless Resume came first.
func watch(resumed <-chan struct{}) {
	allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-resumed:
			return
		case <-t.C:
			metrics.Read(allocs)
			if allocs[0].Value.Uint64() >= maxHeld.Load() {
				Resume()
				return
			}
		}
	}
}

// Resume gives the collector back its setting (the default, GOGC 100), as
// the agent starts: from then on the process lives as long as the agent, and
// its heap must follow what lives. Resume is safe to call more than once and
// where nothing was held.
func Resume() {
	mu.Lock()
	defer mu.Unlock()
	if !held {
		return
	}
	held = false
	close(resume)
	debug.SetGCPercent(gcPercent)
}

// Held says whether the collector is held back now.
func Held() bool {
	mu.Lock()
	defer mu.Unlock()
	return held
}
