package fixturesource_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/harnessfacts/harnessfacts/internal/testing/gitserver"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
)

// BenchmarkGitFixture compares, in the same run, the first fetch of a git
// fixture (a fresh cache each time: the reference advertisement, the pack
// of one commit, the tree read) with a start from the node's cache (the
// reference advertisement that checks the run may read the repository,
// and the cached tar read back and hashed). The repository is served by
// git http-backend on loopback: no network latency, so the ratio is a
// floor of what a remote server costs.
func BenchmarkGitFixture(b *testing.B) {
	srv := gitserver.Start(b, "", "")
	repo := srv.Repo(b, "bench", true)
	files := map[string]string{"fixture.yaml": "prompt: p\n"}
	for i := range 200 {
		files[fmt.Sprintf("workspace/src/f%03d.go", i)] = noise(4 << 10)
	}
	commit := repo.Commit(files, "bench")
	src := fixturesource.Git{URL: repo.URL, Commit: commit}
	ctx := context.Background()
	b.Run("first-fetch", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			cache := fixturesource.NewCache(filepath.Join(b.TempDir(), fmt.Sprint(i)), 0, fixturesource.Options{})
			if res, err := cache.Git(ctx, src); err != nil || res.Cached {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		cache := fixturesource.NewCache(b.TempDir(), 0, fixturesource.Options{})
		if _, err := cache.Git(ctx, src); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if res, err := cache.Git(ctx, src); err != nil || !res.Cached {
				b.Fatal(err)
			}
		}
	})
}
