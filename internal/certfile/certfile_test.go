package certfile

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
)

func write(t *testing.T, dir string, certPEM, keyPEM []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

func served(t *testing.T, r *Reloading) string {
	t.Helper()
	c, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Subject.CommonName
}

// TestReloadsChangedFiles: files written in place and files swapped in
// through a symbolic link (as a Secret volume renews them) are served at
// the next handshake; files that do not load (half written, or a key of
// another certificate) leave the last good certificate served.
func TestReloadsChangedFiles(t *testing.T) {
	dir := t.TempDir()
	gen := func(name string) (c, k []byte) {
		c, k, err := SelfSigned(name, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	c1, k1 := gen("first")
	write(t, dir, c1, k1)
	r, err := Load(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if got := served(t, r); got != "first" {
		t.Fatalf("served %q", got)
	}

	c2, k2 := gen("second")
	write(t, dir, c2, k2)
	if got := served(t, r); got != "second" {
		t.Fatalf("after the files were rewritten, served %q", got)
	}

	_, k3 := gen("third")
	write(t, dir, c2, k3)
	if got := served(t, r); got != "second" {
		t.Fatalf("with a key of another certificate, served %q", got)
	}
	if err := os.Remove(filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	if got := served(t, r); got != "second" {
		t.Fatalf("with the key missing, served %q", got)
	}

	// A Secret volume: tls.crt -> ..data/tls.crt, ..data -> a dated folder,
	// replaced whole.
	vol := t.TempDir()
	swap := func(name string, c, k []byte) {
		t.Helper()
		d := filepath.Join(vol, "..dated-"+name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, d, c, k)
		tmp := filepath.Join(vol, "..data_tmp")
		if err := os.Symlink(filepath.Base(d), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap("a", c1, k1)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(vol, f)); err != nil {
			t.Fatal(err)
		}
	}
	r, err = Load(filepath.Join(vol, "tls.crt"), filepath.Join(vol, "tls.key"), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if got := served(t, r); got != "first" {
		t.Fatalf("served %q", got)
	}
	swap("b", c2, k2)
	if got := served(t, r); got != "second" {
		t.Fatalf("after the volume's swap, served %q", got)
	}
}

// TestLoadRefusesBadFiles: a server does not start without a certificate.
func TestLoadRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), logr.Discard()); err == nil {
		t.Fatal("missing files loaded")
	}
	c, _, err := SelfSigned("x")
	if err != nil {
		t.Fatal(err)
	}
	_, k, err := SelfSigned("y")
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, c, k)
	if _, err := Load(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), logr.Discard()); err == nil {
		t.Fatal("a key of another certificate loaded")
	}
}
