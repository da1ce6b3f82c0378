// Package oci builds OCI images without a container engine and serves them
// from a registry on a local address, for tests that need real images: a
// real kubelet's pods (test/node), and later the evidence and environment
// work. Images are assembled with go-containerregistry from directories and
// files (a Debian rootfs, a static binary), written as tarballs that
// `ctr images import` loads, or pushed to the Registry.
//
// It is test support: nothing in the product imports it.
package oci

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is every entry's modification time: the same inputs give the same
// layer digest, so an unchanged image is not stored twice.
var epoch = time.Unix(0, 0)

// File is one entry of a layer built by LayerFromFiles.
type File struct {
	// Path inside the image, absolute or relative to its root.
	Path string
	// Mode holds the permission bits; the type comes from the fields below.
	Mode fs.FileMode
	Uid  int
	Gid  int
	// Exactly one of: Content (a regular file), Source (a regular file
	// copied from the host), Link (a symbolic link's target), Hardlink (a
	// hard link's target, as written), Dir (a directory), CharDevice (a
	// character device node 1,3), Fifo.
	Content    []byte
	Source     string
	Link       string
	Hardlink   string
	Dir        bool
	CharDevice bool
	Fifo       bool
	// RawName writes Path into the tar as it is (a leading "/" and ".."
	// kept): for hostile layers.
	RawName bool
	// SetUID sets the setuid bit.
	SetUID bool
}

// LayerFromFiles builds a layer from the given entries, in order.
func LayerFromFiles(dir string, files []File) (v1.Layer, error) {
	path, err := writeLayer(dir, func(tw *tar.Writer) error {
		for _, f := range files {
			if err := writeFile(tw, f); err != nil {
				return fmt.Errorf("%s: %w", f.Path, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return layerFromFile(path)
}

func writeFile(tw *tar.Writer, f File) error {
	name := strings.TrimPrefix(filepath.ToSlash(f.Path), "/")
	if f.RawName {
		name = f.Path
	}
	mode := int64(f.Mode.Perm())
	if f.SetUID {
		mode |= 0o4000
	}
	hdr := &tar.Header{
		Name:    name,
		Mode:    mode,
		Uid:     f.Uid,
		Gid:     f.Gid,
		ModTime: epoch,
		Format:  tar.FormatPAX,
	}
	switch {
	case f.Dir:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case f.Link != "":
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = f.Link
		return tw.WriteHeader(hdr)
	case f.Hardlink != "":
		hdr.Typeflag = tar.TypeLink
		hdr.Linkname = f.Hardlink
		return tw.WriteHeader(hdr)
	case f.CharDevice:
		hdr.Typeflag = tar.TypeChar
		hdr.Devmajor, hdr.Devminor = 1, 3
		return tw.WriteHeader(hdr)
	case f.Fifo:
		hdr.Typeflag = tar.TypeFifo
		return tw.WriteHeader(hdr)
	case f.Source != "":
		src, err := os.Open(f.Source)
		if err != nil {
			return err
		}
		defer src.Close()
		st, err := src.Stat()
		if err != nil {
			return err
		}
		hdr.Typeflag = tar.TypeReg
		hdr.Size = st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		return err
	default:
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(f.Content))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(f.Content)
		return err
	}
}

// HostBinaries are the files of a small image made of this host's
// programs: each binary and the shared libraries ldd says it loads (with
// the dynamic loader), at their host paths, and /bin linked to usr/bin as
// on a merged-/usr host. Enough for a static-busybox-like image when the host
// has no busybox: `sh`, `cat`, `grep` and friends, with a foreign
// /etc/os-release added by the caller.
func HostBinaries(bins ...string) ([]File, error) {
	seen := map[string]bool{}
	var files []File
	add := func(p string) error {
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		if seen[p] {
			return nil
		}
		seen[p] = true
		st, err := os.Stat(target)
		if err != nil {
			return err
		}
		files = append(files, File{Path: p, Source: target, Mode: st.Mode().Perm()})
		return nil
	}
	for _, b := range bins {
		p, err := exec.LookPath(b)
		if err != nil {
			return nil, err
		}
		if p, err = filepath.Abs(p); err != nil {
			return nil, err
		}
		if err := add(p); err != nil {
			return nil, err
		}
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			continue // static
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					if err := add(f); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	dirs := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.Path); d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var out []File
	for _, d := range Sorted(dirs) {
		out = append(out, File{Path: d, Dir: true, Mode: 0o755})
	}
	out = append(out, files...)
	if !dirs["/bin"] && dirs["/usr/bin"] {
		out = append(out, File{Path: "/bin", Link: "usr/bin"}) // /bin/sh, as on a merged-/usr system
	}
	return out, nil
}

// LayerFromDir builds a layer holding the tree under root as the image's
// root (see WriteDirTar); the tar is written once to a new file under dir.
func LayerFromDir(dir, root string) (v1.Layer, error) {
	f, err := os.CreateTemp(dir, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	f.Close()
	if err := WriteDirTar(f.Name(), root); err != nil {
		return nil, err
	}
	return LayerFromTar(f.Name())
}

// LayerFromTar is a layer from an uncompressed tar file, such as one
// WriteDirTar wrote earlier and a caller keeps as a cache.
func LayerFromTar(path string) (v1.Layer, error) { return layerFromFile(path) }

// WriteDirTar writes the tree under root as a layer tar at path: owners,
// modes and symbolic links are kept (hard links become copies); device
// nodes, sockets and pipes are left out, since the runtime provides /dev.
// Modification times are zeroed, so the same tree gives the same digest.
func WriteDirTar(path, root string) error {
	return WriteDirTarSkipping(path, root, nil)
}

// WriteDirTarSkipping is WriteDirTar leaving out the paths (relative to
// root, slash-separated) for which skip says true, and what is below them.
func WriteDirTarSkipping(path, root string, skip func(rel string) bool) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = walkInto(tw, root, skip)
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func walkInto(tw *tar.Writer, root string, skip func(string) bool) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		if skip != nil && skip(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket|fs.ModeNamedPipe) != 0 {
			return nil
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		// Numeric owners only: the names are the host's, not the image's.
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = epoch, time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
}

// writeLayer writes one uncompressed tar into a new file under dir.
func writeLayer(dir string, fill func(*tar.Writer) error) (string, error) {
	f, err := os.CreateTemp(dir, "layer-*.tar")
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(f)
	err = fill(tw)
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func layerFromFile(path string) (v1.Layer, error) {
	// Fast compression, computed once: these layers are large (a rootfs) and
	// the machines small; size on the wire does not matter on loopback.
	return tarball.LayerFromFile(path, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
}

// Config is what an image runs, as in a Dockerfile's ENTRYPOINT, CMD, ENV,
// USER and WORKDIR.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
}

// Build stacks the layers on an empty base and sets the config and the
// platform linux/amd64 (containerd filters out an image without a platform).
func Build(layers []v1.Layer, cfg Config) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	var err error
	for _, l := range layers {
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer}); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint = cfg.Entrypoint
	cf.Config.Cmd = cfg.Cmd
	cf.Config.Env = cfg.Env
	cf.Config.User = cfg.User
	cf.Config.WorkingDir = cfg.WorkingDir
	cf.Config.Labels = cfg.Labels
	cf.Created = v1.Time{Time: epoch}
	return mutate.ConfigFile(img, cf)
}

// WriteTarball writes the images under their references into one tarball
// that `ctr images import` (and `docker load`) accept.
func WriteTarball(path string, images map[string]v1.Image) error {
	refs := make(map[name.Reference]v1.Image, len(images))
	for r, img := range images {
		ref, err := name.ParseReference(r)
		if err != nil {
			return err
		}
		refs[ref] = img
	}
	return tarball.MultiRefWriteToFile(path, refs)
}

// Import loads a tarball into containerd's namespace with ctr, unpacked for
// the default snapshotter, so the kubelet finds the images without a pull.
func Import(ctx context.Context, ctr, address, namespace, tarPath string) error {
	cmd := exec.CommandContext(ctx, ctr, "--address", address, "-n", namespace, "images", "import", "--platform", "linux/amd64", tarPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", tarPath, err, out)
	}
	return nil
}

// Registry is an OCI registry (go-containerregistry's, in memory) serving on
// a local address until Close.
type Registry struct {
	// Host is host:port, the registry part of the references it serves.
	Host string
	srv  *http.Server
	done chan error

	closeOnce sync.Once
	closeErr  error
	// user and password, when set, are required of every request (HTTP
	// basic authentication, as registries behind a pull secret ask).
	user, password string
}

// StartRegistryWithAuth is StartRegistry answering only requests that carry
// user and password (HTTP basic authentication); Push sends them.
func StartRegistryWithAuth(ip, user, password string) (*Registry, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, err
	}
	inner := registry.New(registry.Logger(nopLogger()))
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="harnessfacts-test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, req)
	})
	r := &Registry{
		Host: ln.Addr().String(),
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan error, 1), user: user, password: password,
	}
	go func() { r.done <- r.srv.Serve(ln) }()
	return r, nil
}

// StartRegistry serves a registry on ip (e.g. "127.0.0.1") at a free port.
func StartRegistry(ip string) (*Registry, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, err
	}
	r := &Registry{
		Host: ln.Addr().String(),
		srv:  &http.Server{Handler: registry.New(registry.Logger(nopLogger())), ReadHeaderTimeout: 10 * time.Second},
		done: make(chan error, 1),
	}
	go func() { r.done <- r.srv.Serve(ln) }()
	return r, nil
}

// Push stores img as repo:tag (repo without the registry host) and returns
// the full reference, pinned by digest.
func (r *Registry) Push(ctx context.Context, img v1.Image, repo, tag string) (string, error) {
	ref, err := name.ParseReference(r.Host+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		return "", err
	}
	opts := []remote.Option{remote.WithContext(ctx)}
	if r.user != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: r.user, Password: r.password}))
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		return "", err
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return r.Host + "/" + repo + ":" + tag + "@" + d.String(), nil
}

// Close stops the registry; later calls return the first one's error.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := r.srv.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			// A client still holds a connection it is not using (a busy
			// machine's keep-alive): cut it, the registry is stopping.
			err = r.srv.Close()
		}
		if serr := <-r.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		r.closeErr = err
	})
	return r.closeErr
}

// ContainerdHosts writes containerd's hosts.toml for this registry under
// certsDir (containerd's registry config_path), so containerd pulls from it
// over plain HTTP, which it otherwise refuses for a non-loopback address.
func (r *Registry) ContainerdHosts(certsDir string) error {
	d := filepath.Join(certsDir, r.Host)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+r.Host, "http://"+r.Host)
	return os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(toml), 0o644)
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// Files lists every path in img's flattened file system with its tar
// header, for tests of what an image must contain.
func Files(img v1.Image) (map[string]*tar.Header, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]*tar.Header{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out["/"+strings.TrimSuffix(strings.TrimPrefix(hdr.Name, "./"), "/")] = hdr
	}
}

// Sorted returns the keys of m in order, for messages.
func Sorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
