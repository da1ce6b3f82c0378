package oci

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// An image built from a directory and from files keeps owners, modes and
// links, survives a tarball and a registry round trip, and carries its
// config and platform.
func TestBuildTarballAndRegistry(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\n"), 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	base, err := LayerFromDir(tmp, root)
	if err != nil {
		t.Fatal(err)
	}
	top, err := LayerFromFiles(tmp, []File{
		{Path: "/etc", Dir: true, Mode: 0o755},
		{Path: "/etc/passwd", Content: []byte("nonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n"), Mode: 0o644},
		{Path: "/app", Content: []byte("binary"), Mode: 0o755, Uid: 65532, Gid: 65532},
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build([]v1.Layer{base, top}, Config{Entrypoint: []string{"/app"}, Cmd: []string{"serve"}, User: "65532:65532", Env: []string{"PATH=/usr/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, img v1.Image) {
		t.Helper()
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != "amd64" || cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/app" {
			t.Fatalf("config: %+v %+v", cf.Config, cf.Platform())
		}
		files, err := Files(img)
		if err != nil {
			t.Fatal(err)
		}
		if h := files["/usr/bin/tool"]; h == nil || h.Mode&0o777 != 0o751 {
			t.Fatalf("/usr/bin/tool: %+v (files %v)", h, Sorted(files))
		}
		if h := files["/bin"]; h == nil || h.Linkname != "usr/bin" {
			t.Fatalf("/bin: %+v", h)
		}
		if h := files["/app"]; h == nil || h.Uid != 65532 || h.Size != int64(len("binary")) {
			t.Fatalf("/app: %+v", h)
		}
	}
	check(t, img)

	tarPath := filepath.Join(tmp, "images.tar")
	if err := WriteTarball(tarPath, map[string]v1.Image{"localhost/test/app:1": img}); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("localhost/test/app:1")
	fromTar, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatal(err)
	}
	check(t, fromTar)

	reg, err := StartRegistry("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ref, err := reg.Push(context.Background(), img, "test/app", "1")
	if err != nil {
		t.Fatal(err)
	}
	pulledRef, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(pulledRef)
	if err != nil {
		t.Fatal(err)
	}
	check(t, pulled)
	want, _ := img.Digest()
	got, _ := pulled.Digest()
	if want != got {
		t.Fatalf("digest after the registry: %s, want %s", got, want)
	}
	if err := reg.ContainerdHosts(filepath.Join(tmp, "certs.d")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(tmp, "certs.d", reg.Host, "hosts.toml")); err != nil || len(b) == 0 {
		t.Fatalf("hosts.toml: %v", err)
	}
}
