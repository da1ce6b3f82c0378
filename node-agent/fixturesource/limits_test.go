package fixturesource_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harnessfacts/harnessfacts/internal/testing/gitserver"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
)

// A node-agent's memory bound, shared by its slots, bounds each git or OCI
// fixture: slots fixtures held twice over (files and the run dir's tmpfs)
// and one fetch in flight must fit beside the node-agent itself.
func TestLimitsForMemory(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		memory    int64
		slots     int
		wantTotal int64
	}{
		{0, 2, fixturesource.DefaultLimits.MaxTotalBytes},         // no bound
		{512 * mi, 2, (512*mi - 64*mi) / 6},                       // the chart's default: 74 MiB
		{4096 * mi, 2, fixturesource.DefaultLimits.MaxTotalBytes}, // room for the default
		{512 * mi, 64, fixture.DefaultMaxTotalBytes},              // never under a ConfigMap's
		{1024 * mi, 4, (1024*mi - 64*mi) / 10},
	} {
		got := fixturesource.LimitsFor(tc.memory, tc.slots)
		if got.MaxTotalBytes != tc.wantTotal {
			t.Errorf("LimitsFor(%d MiB, %d slots): %d bytes in all, want %d", tc.memory/mi, tc.slots, got.MaxTotalBytes, tc.wantTotal)
		}
		if got.MaxFileBytes > got.MaxTotalBytes || got.MaxFileBytes <= 0 {
			t.Errorf("LimitsFor(%d MiB, %d slots): %d bytes a file, over the %d in all", tc.memory/mi, tc.slots, got.MaxFileBytes, got.MaxTotalBytes)
		}
		if tc.memory > 0 && tc.slots > 0 && got.MaxTotalBytes > fixture.DefaultMaxTotalBytes &&
			64*mi+int64(2*tc.slots+2)*got.MaxTotalBytes > tc.memory {
			t.Errorf("LimitsFor(%d MiB, %d slots): %d slots of %d bytes do not fit", tc.memory/mi, tc.slots, tc.slots, got.MaxTotalBytes)
		}
	}
}

// A git fixture over the bound a fetch was given is refused as too large,
// before the node-agent holds it: the bound LimitsFor computes is the one a
// fetch keeps.
func TestGitFixtureHeldToTheMemoryBound(t *testing.T) {
	srv := gitserver.Start(t, "", "")
	repo := srv.Repo(t, "big", true)
	files := helloFiles("hello\n")
	files["tasks/hello/workspace/big.bin"] = strings.Repeat("x", 9<<20)
	commit := repo.Commit(files, "big")
	lim := fixturesource.LimitsFor(64<<20+6*(8<<20), 2) // 8 MiB a fixture
	if lim.MaxTotalBytes != 8<<20 {
		t.Fatalf("the bound is %d bytes, want 8 MiB", lim.MaxTotalBytes)
	}
	cache := fixturesource.NewCache(filepath.Join(t.TempDir(), ".fixtures"), 0, fixturesource.Options{Limits: lim})
	_, err := cache.Git(context.Background(), fixturesource.Git{URL: repo.URL, Commit: commit, Path: "tasks/hello"})
	if !errors.Is(err, fixture.ErrTooLarge) {
		t.Fatalf("a 9 MiB fixture under an 8 MiB bound: %v, want ErrTooLarge", err)
	}
	// Under the default bound the same fixture is fetched.
	big := fixturesource.NewCache(filepath.Join(t.TempDir(), ".fixtures"), 0, fixturesource.Options{})
	if _, err := big.Git(context.Background(), fixturesource.Git{URL: repo.URL, Commit: commit, Path: "tasks/hello"}); err != nil {
		t.Fatalf("the same fixture under the default bound: %v", err)
	}
}
