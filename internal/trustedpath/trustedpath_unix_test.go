//go:build unix

package trustedpath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck: another user's link or folder on the way, or a folder on the
// way anyone may write to without the sticky bit, is refused, naming it;
// the caller's own folders and links, and a sticky folder, are not; a
// component that does not exist yet is not judged.
func TestCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a folder and a link of another user's")
	}
	const nobody = 65534
	base := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := mk("own", 0o755, 0)
	theirs := mk("theirs", 0o755, nobody)
	open := mk("open", 0o777, 0)
	sticky := mk("sticky", 0o777|os.ModeSticky, 0)
	link := func(name, to string, uid int) string {
		p := filepath.Join(base, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	theirLink := link("their-link", own, nobody)
	ownLinkToTheirs := link("own-link", theirs, 0)
	for _, c := range []struct{ p, want string }{
		{filepath.Join(own, "x"), ""},
		{filepath.Join(own, "x", "y"), ""},
		{filepath.Join(sticky, "x"), ""},
		{open, ""}, // the last component itself: its maker judges its mode
		{filepath.Join(open, "x"), "may be written by anyone"},
		{theirs, "belongs to uid 65534"},
		{filepath.Join(theirs, "x"), "belongs to uid 65534"},
		{theirLink, "belongs to uid 65534"},
		{filepath.Join(theirLink, "x"), "belongs to uid 65534"},
		{filepath.Join(ownLinkToTheirs, "x"), "belongs to uid 65534"},
	} {
		err := Check(c.p, "the thing")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.p, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.p, err, c.want)
		}
	}
}
