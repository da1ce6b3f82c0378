// Package prestart begins `harnessfacts run`'s sandbox preflight from its
// init, while the rest of the program's packages initialise.
//
// The preflight (a sandbox start: bwrap's and the kernel's work, and a
// little of this process's) was the last of a local run's start to end,
// beside the run's validation and the redactor's rules on the machine's
// two cores; the packages' initialisation before main (about 10 ms) runs
// on one core and leaves the other idle. The preflight begun there is
// done, or nearly, when the run needs it.
//
// It begins only for `harnessfacts run` without --bwrap (the preflight of
// the default options, bwrap on PATH); the run takes its verdicts where
// its options are those (Preflight), and main waits for it whatever
// happens (Wait), so that no sandbox of it outlives the process.
package prestart

import (
	"context"
	"os"
	"reflect"
	"strings"

	"github.com/harnessfacts/harnessfacts/sandbox"
)

var early struct {
	done  chan struct{} // nil: none was begun
	avail []sandbox.Availability
}

func init() { start(os.Args) }

// start begins the preflight when args are a local run's with the
// default sandbox options.
func start(args []string) {
	if !forRun(args) {
		return
	}
	done := make(chan struct{})
	early.done = done
	go func() {
		defer close(done)
		early.avail = sandbox.Preflight(context.Background(), sandbox.Options{})
	}()
}

// forRun says whether args are `harnessfacts run`'s with the default
// sandbox options (no --bwrap), and not a call for its help.
func forRun(args []string) bool {
	if len(args) < 2 || args[1] != "run" {
		return false
	}
	for _, a := range args[2:] {
		if a == "--bwrap" || strings.HasPrefix(a, "--bwrap=") || a == "-h" || a == "--help" {
			return false
		}
	}
	return true
}

// Preflight is the verdicts of the preflight begun at init, when it was
// begun for opts, once it is done; ok is false otherwise (the caller makes
// its own).
func Preflight(opts sandbox.Options) (avail []sandbox.Availability, ok bool) {
	if early.done == nil || !reflect.DeepEqual(opts, sandbox.Options{}) {
		return nil, false
	}
	<-early.done
	return early.avail, true
}

// Wait waits for the preflight begun at init, if one was.
func Wait() {
	if early.done != nil {
		<-early.done
	}
}
