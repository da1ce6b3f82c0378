//go:build windows

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
)

// run starts full as a child with this process's console, standard
// streams and environment (Windows has no exec that keeps the process),
// and returns its exit code. A Ctrl-C reaches both processes, the child
// being in the same console: this one leaves it to the child and waits.
func run(full string, args []string) int {
	signal.Ignore(os.Interrupt)
	cmd := exec.Command(full, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "harnessfacts: running %s: %v\n", full, err)
		return 1
	}
}
