package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// fullName is the binary that holds every command.
const fullName = "harnessfacts-full"

// fullBinary is harnessfacts-full in the folder of this executable's file
// (links resolved). Only there: a
// harnessfacts-full found elsewhere (on PATH) could be another version, or
// anyone's.
func fullBinary() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		// Linux names the file already; macOS may name the link run.
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return "", fmt.Errorf("locating the harnessfacts binary: %w", err)
	}
	name := fullName
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	p := filepath.Join(filepath.Dir(exe), name)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not beside %s: harnessfacts serves run and version itself and hands every other command to it; install both (make build puts them in bin/)", name, exe)
	}
	return p, nil
}

// handOver runs harnessfacts-full with args, as if it had been run itself,
// and returns the exit code to end with (where the process is not
// replaced by it).
func handOver(args []string) int {
	full, err := fullBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "harnessfacts:", err)
		return 1
	}
	return run(full, args)
}
