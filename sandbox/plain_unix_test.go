//go:build unix

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPlainEnvironmentIsExactlyTheSpec(t *testing.T) {
	t.Setenv("HF_TEST_HOST_ONLY", "must-not-leak")
	dir := openDir(t)
	var out bytes.Buffer
	p := &PlainRunner{Reason: "bwrap: not found"}
	res, err := p.Run(context.Background(), Spec{
		Argv:      []string{"env"},
		Dir:       dir,
		ReadWrite: []string{dir},
		Env:       []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8"},
		Stdout:    &out,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: %+v, %v", res, err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("environment (-want +got):\n%s", d)
	}
	if res.Mode != ModePlain || !strings.Contains(res.Warning, "UNSANDBOXED") ||
		!strings.Contains(res.Warning, "read the node's files") || !strings.Contains(res.Warning, "reach the network") ||
		!strings.Contains(res.Warning, "bwrap: not found") {
		t.Errorf("warning %q", res.Warning)
	}
}

func TestPlainLooksUpTheCommandInTheSpecPath(t *testing.T) {
	_, err := (&PlainRunner{}).Run(context.Background(), Spec{Argv: []string{"true"}, Dir: "/", Env: []string{"PATH=/nonexistent"}})
	if err == nil || !strings.Contains(err.Error(), "not found in the PATH") {
		t.Fatalf("Run with a PATH lacking the command: %v", err)
	}
}

func TestPlainTimeoutKillsTheProcessGroup(t *testing.T) {
	marker := "HF_MARKER=plain-" + randomToken(t)
	dir := openDir(t)
	start := time.Now()
	res, err := (&PlainRunner{}).Run(context.Background(), Spec{
		Argv:   []string{"sh", "-c", "trap '' TERM; (trap '' TERM; sleep 1000) & sleep 1000"},
		Dir:    dir,
		Env:    []string{"PATH=/usr/bin:/bin", marker},
		Limits: Limits{Timeout: time.Second},
	})
	if err != nil || !res.TimedOut || res.Signal == 0 {
		t.Fatalf("Run: %+v, %v", res, err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("the kill took %v", time.Since(start))
	}
	// SIGKILL is delivered asynchronously to the group's other members.
	n := processesWithMarker(marker)
	for deadline := time.Now().Add(5 * time.Second); n != 0 && time.Now().Before(deadline); n = processesWithMarker(marker) {
		time.Sleep(10 * time.Millisecond)
	}
	if n != 0 {
		t.Fatalf("%d processes of the group survived", n)
	}
}

func TestPlainCancelReturnsContextError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := (&PlainRunner{}).Run(ctx, Spec{Argv: []string{"sleep", "1000"}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
}
