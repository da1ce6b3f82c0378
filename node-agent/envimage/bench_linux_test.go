package envimage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/harnessfacts/harnessfacts/sandbox"
	"github.com/harnessfacts/harnessfacts/test/oci"
)

// BenchmarkEnvironmentStart: what an environment image adds to a sandbox's
// start, in the same run: `true` in today's sandbox (the node's root,
// read-only), in an image already in the cache (overlay mount, bwrap,
// unmount), and in an image pulled and unpacked first (a fresh cache each
// time). The image is hack/environment-rootfs.sh's Debian trixie minbase
// (about 80 MB unpacked), served from a registry on loopback. Root only.
//
//	go test -run '^$' -bench EnvironmentStart -benchtime 5x ./node-agent/envimage/
func BenchmarkEnvironmentStart(b *testing.B) {
	if os.Getuid() != 0 {
		b.Skip("mounting an overlay needs root")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(repo, "hack", "environment-rootfs.sh")).Output()
	if err != nil {
		b.Fatalf("hack/environment-rootfs.sh: %v", err)
	}
	layer, err := oci.LayerFromDir(b.TempDir(), strings.TrimSpace(string(out)))
	if err != nil {
		b.Fatal(err)
	}
	img, err := oci.Build([]v1.Layer{layer}, oci.Config{})
	if err != nil {
		b.Fatal(err)
	}
	reg, err := oci.StartRegistry("127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	ref, err := reg.Push(context.Background(), img, "bench/env", "v1")
	if err != nil {
		b.Fatal(err)
	}
	r, err := sandbox.NewBwrapRunner(sandbox.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const uid = 60121
	base := b.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, root string) {
		b.Helper()
		work := filepath.Join(base, "work")
		_ = os.MkdirAll(work, 0o755)
		res, err := r.Run(context.Background(), sandbox.Spec{Argv: []string{"true"}, Dir: work,
			Env: []string{"PATH=/usr/bin:/bin"}, ReadWrite: []string{work}, Root: root, UID: uid, GID: uid})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exit %d: %v", res.ExitCode, err)
		}
	}
	start := func(b *testing.B, cache *Cache) {
		b.Helper()
		im, release, err := cache.Get(context.Background(), ref, PullOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer release()
		dir, err := os.MkdirTemp(base, "env-")
		if err != nil {
			b.Fatal(err)
		}
		ov, err := Mount(im.Root, dir, uid, uid)
		if err != nil {
			b.Fatal(err)
		}
		run(b, ov.Root)
		if err := ov.Unmount(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("today", func(b *testing.B) {
		for range b.N {
			run(b, "")
		}
	})
	b.Run("cached", func(b *testing.B) {
		cache, err := NewCache(b.TempDir(), 0)
		if err != nil {
			b.Fatal(err)
		}
		start(b, cache) // the pull, outside the timing
		b.ResetTimer()
		for range b.N {
			start(b, cache)
		}
	})
	b.Run("first-pull", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			cache, err := NewCache(filepath.Join(b.TempDir(), "c"), 0)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start(b, cache)
			b.StopTimer()
			_ = os.RemoveAll(cache.Dir())
			b.StartTimer()
		}
	})
}
