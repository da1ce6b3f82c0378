package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The hand-over is an exec: the command harnessfacts hands over runs in
// the same process (what the controller image relies on, its entry point
// being /harnessfacts, PID 1 of its container), and a signal sent to that
// process reaches the command itself.
func TestHandOverKeepsTheProcess(t *testing.T) {
	dir := buildBoth(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	fixtures := filepath.Join(filepath.Dir(filepath.Dir(wd)), "fixtures")
	cmd := exec.Command(filepath.Join(dir, "harnessfacts"), "fake-provider", "--fixtures", fixtures, "--listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Its first line says it listens: its signal handler is in place.
	listening := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		listening <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	want := filepath.Join(dir, "harnessfacts-full")
	exe := ""
	for deadline := time.Now().Add(10 * time.Second); exe != want; {
		select {
		case err := <-exited:
			t.Fatalf("harnessfacts fake-provider exited: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs %q, want %q", cmd.Process.Pid, exe, want)
		}
		exe, _ = os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
	}
	select {
	case line := <-listening:
		if !strings.HasPrefix(line, "fake-provider listening on ") {
			t.Fatalf("harnessfacts fake-provider said %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("harnessfacts fake-provider never said it listens")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM: %v, want harnessfacts-full's own clean stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("SIGTERM did not stop the handed-over command")
	}
}
