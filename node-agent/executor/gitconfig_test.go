//go:build linux

package executor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// gitIn runs git in dir as a check's sandbox would (its environment for
// git, a fresh home, no global config) and returns its exit code.
func gitIn(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_GLOBAL=/dev/null"}, checkGitConfig...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	case err != nil:
		t.Fatal(err)
	}
	return 0, string(out)
}

// gitRepo makes a repository in dir with protected.txt committed.
func gitRepo(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "protected.txt"), []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", "."}, {"add", "."}, {"-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "base"}} {
		if code, out := gitIn(t, dir, args...); code != 0 {
			t.Fatalf("git %v: %d %s", args, code, out)
		}
	}
}

// The agent's ways to have git in a check run its command or hide a
// change, all through the repository's own config.
const hostileGitConfig = `[filter "hide"]
	clean = git show HEAD:protected.txt
[diff]
	external = /bin/true
[core]
	pager = /bin/true
	attributesFile = /dev/null
	repositoryformatversion = 0
	bare = false
[alias]
	diff2 = !true
[include]
	path = /dev/null
[remote "origin"]
	url = https://example.invalid/r.git
	fetch = +refs/heads/*:refs/remotes/origin/*
[branch "main"]
	remote = origin
`

func plantHostileConfig(t *testing.T, gitdir, workspace string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(gitdir, "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(hostileGitConfig); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	for name, body := range map[string]string{".gitattributes": "protected.txt filter=hide\n", "protected.txt": "tampered\n"} {
		if err := os.WriteFile(filepath.Join(workspace, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGitConfigOfTheWorkspaceIsSafeForChecks: a clean filter in the
// repository's own config hides a change from `git diff` (checked first,
// so that the test shows the attack works); with the config sanitized, the
// check sees the change, and the keys that say what the repository is are
// kept.
func TestGitConfigOfTheWorkspaceIsSafeForChecks(t *testing.T) {
	ws := t.TempDir()
	gitRepo(t, ws)
	plantHostileConfig(t, filepath.Join(ws, ".git"), ws)
	if code, out := gitIn(t, ws, "diff", "--quiet", "--", "protected.txt"); code != 0 {
		t.Fatalf("the planted filter did not hide the change (exit %d, %s): the test shows nothing", code, out)
	}
	notes, err := sanitizeGitConfig(ws)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "dropped 6 keys from .git/config") {
		t.Errorf("notes %q", notes)
	}
	if code, out := gitIn(t, ws, "diff", "--quiet", "--", "protected.txt"); code != 1 {
		t.Errorf("git diff --quiet exits %d (%s) on a changed file, want 1", code, out)
	}
	if code, out := gitIn(t, ws, "diff", "--", "protected.txt"); code != 0 || !strings.Contains(out, "+tampered") {
		t.Errorf("git diff: exit %d, %q", code, out)
	}
	for key, want := range map[string]string{"remote.origin.url": "https://example.invalid/r.git", "branch.main.remote": "origin", "core.bare": "false"} {
		if code, out := gitIn(t, ws, "config", "--get", key); code != 0 || strings.TrimSpace(out) != want {
			t.Errorf("git config %s: %d %q, want %q", key, code, out, want)
		}
	}
	for _, key := range []string{"filter.hide.clean", "diff.external", "core.pager", "alias.diff2", "include.path"} {
		if code, out := gitIn(t, ws, "config", "--get", key); code == 0 {
			t.Errorf("git config %s still %q", key, out)
		}
	}
	// Sanitized again (the next check), nothing changes.
	if notes, err := sanitizeGitConfig(ws); err != nil || len(notes) != 0 {
		t.Errorf("a second pass: %q, %v", notes, err)
	}
}

// TestGitConfigEveryWayToTheRepository: a gitdir file inside the workspace
// is followed and its config sanitized, as are a commondir's and a
// submodule's; what leads out of the workspace (a link, a gitdir file to
// elsewhere or through /proc) is removed, so that git finds no repository.
func TestGitConfigEveryWayToTheRepository(t *testing.T) {
	t.Run("gitdir file inside", func(t *testing.T) {
		ws := t.TempDir()
		gitRepo(t, ws)
		if err := os.Rename(filepath.Join(ws, ".git"), filepath.Join(ws, ".hidden")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: .hidden\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		plantHostileConfig(t, filepath.Join(ws, ".hidden"), ws)
		if code, _ := gitIn(t, ws, "diff", "--quiet", "--", "protected.txt"); code != 0 {
			t.Fatal("the planted filter did not hide the change through a gitdir file")
		}
		if _, err := sanitizeGitConfig(ws); err != nil {
			t.Fatal(err)
		}
		if code, out := gitIn(t, ws, "diff", "--quiet", "--", "protected.txt"); code != 1 {
			t.Errorf("git diff --quiet exits %d (%s), want 1", code, out)
		}
	})
	t.Run("commondir and submodule configs", func(t *testing.T) {
		ws := t.TempDir()
		gitRepo(t, ws)
		for _, d := range []string{".git/modules/sub", ".common"} {
			if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, d, "config"), []byte(hostileGitConfig), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(ws, ".git", "commondir"), []byte("../.common\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := sanitizeGitConfig(ws); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{".git/modules/sub", ".common"} {
			b, _ := os.ReadFile(filepath.Join(ws, d, "config"))
			if strings.Contains(string(b), "filter") || !strings.Contains(string(b), "origin") {
				t.Errorf("%s/config after: %q", d, b)
			}
		}
	})
	t.Run("many files beside the configs", func(t *testing.T) {
		// Git LFS keeps its objects in .git/lfs, hooks and info are
		// small, but all of it is no config: a repository with more LFS
		// objects than the walk's bound is sanitized all the same.
		ws := t.TempDir()
		gitRepo(t, ws)
		plantHostileConfig(t, filepath.Join(ws, ".git"), ws)
		lfs := filepath.Join(ws, ".git", "lfs", "objects")
		if err := os.MkdirAll(lfs, 0o755); err != nil {
			t.Fatal(err)
		}
		// And as many files at the git dir's top, which is not listed
		// (its configs are looked up by name).
		for i := range maxGitDirEntries + 10 {
			for _, d := range []string{lfs, filepath.Join(ws, ".git")} {
				if err := os.WriteFile(filepath.Join(d, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := sanitizeGitConfig(ws); err != nil {
			t.Fatal(err)
		}
		if code, out := gitIn(t, ws, "diff", "--quiet", "--", "protected.txt"); code != 1 {
			t.Errorf("git diff --quiet exits %d (%s), want 1", code, out)
		}
	})
	out := map[string]func(ws string) error{
		".git a link": func(ws string) error {
			if err := os.Rename(filepath.Join(ws, ".git"), filepath.Join(ws, ".hidden")); err != nil {
				return err
			}
			return os.Symlink(".hidden", filepath.Join(ws, ".git"))
		},
		"gitdir through /proc": func(ws string) error {
			if err := os.Rename(filepath.Join(ws, ".git"), filepath.Join(ws, ".hidden")); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: /proc/self/cwd/.hidden\n"), 0o644)
		},
		"gitdir outside": func(ws string) error {
			other := filepath.Join(filepath.Dir(ws), filepath.Base(ws)+"-other")
			if err := os.Rename(filepath.Join(ws, ".git"), other); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: "+other+"\n"), 0o644)
		},
		"a link in the gitdir's path": func(ws string) error {
			if err := os.Rename(filepath.Join(ws, ".git"), filepath.Join(ws, ".hidden")); err != nil {
				return err
			}
			if err := os.Symlink(filepath.Join(ws, ".hidden"), filepath.Join(ws, "abs")); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: abs\n"), 0o644)
		},
	}
	for name, move := range out {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			gitRepo(t, ws)
			plantHostileConfig(t, filepath.Join(ws, ".git"), ws)
			if err := move(ws); err != nil {
				t.Fatal(err)
			}
			if code, _ := gitIn(t, ws, "diff", "--quiet", "--", "protected.txt"); code != 0 {
				t.Fatal("the planted filter did not hide the change: the test shows nothing")
			}
			notes, err := sanitizeGitConfig(ws)
			if err != nil || len(notes) != 1 || !strings.HasPrefix(notes[0], "removed .git") {
				t.Fatalf("notes %q, %v", notes, err)
			}
			if code, out := gitIn(t, ws, "diff", "--quiet", "--", "protected.txt"); code == 0 {
				t.Errorf("git diff --quiet passes (%s) after .git was removed", out)
			}
		})
	}
}

// TestGitChecksFindNoBareRepositoryUnnamed: the workspace made a bare
// repository itself (its config beside HEAD, objects and refs) is not
// found by git in a check.
func TestGitChecksFindNoBareRepositoryUnnamed(t *testing.T) {
	ws := t.TempDir()
	gitRepo(t, ws)
	for _, n := range []string{"HEAD", "objects", "refs", "config"} {
		if err := os.Rename(filepath.Join(ws, ".git", n), filepath.Join(ws, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(ws, ".git")); err != nil {
		t.Fatal(err)
	}
	if code, out := gitIn(t, ws, "rev-parse", "--git-dir"); code == 0 {
		t.Errorf("git found a repository in the bare workspace: %s", out)
	}
}

func TestKeptGitConfig(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"[core]\n\tbare\n\tfilemode = true\n", "[core]\n\tbare\n\tfilemode = \"true\"\n"},
		{"[CORE]\n\tBare = false\n[Filter \"x\"]\n\tclean = evil\n", "[core]\n\tbare = \"false\"\n"},
		// An includeIf: dropped. The old form of a subsection is not read
		// by this parser: the config is replaced.
		{"[includeIf \"gitdir:/\"]\n\tpath = x\n[core]\n\tbare = false\n", "[core]\n\tbare = \"false\"\n"},
		{"[filter.hide]\n\tclean = evil\n", minimalGitConfig},
		// A subsection's name and a value with quotes and backslashes.
		{"[remote \"a\\\"b\"]\n\turl = \"x\\\\y\\\"z\"\n", "[remote \"a\\\"b\"]\n\turl = \"x\\\\y\\\"z\"\n"},
		// A remote's key outside a subsection, a core key inside one.
		{"[remote]\n\turl = x\n[core \"x\"]\n\tbare = true\n", ""},
		// A value with a control character is no value git writes.
		{"[user]\n\tname = \"a\\tb\"\n\temail = e\n", "[user]\n\temail = \"e\"\n"},
		{"not [ a config", minimalGitConfig},
	} {
		got, _ := keptGitConfig([]byte(c.in))
		if string(got) != c.want {
			t.Errorf("keptGitConfig(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestGitChecksSeeNoReplacedObjects: a check that compares the workspace
// with the base commit by its id sees that commit, not the one the agent
// put in its place with `git replace`.
func TestGitChecksSeeNoReplacedObjects(t *testing.T) {
	ws := t.TempDir()
	gitRepo(t, ws)
	_, base := gitIn(t, ws, "rev-parse", "HEAD")
	base = strings.TrimSpace(base)
	if err := os.WriteFile(filepath.Join(ws, "protected.txt"), []byte("tampered\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qam", "x"}, {"replace", base, "HEAD"}} {
		if code, out := gitIn(t, ws, args...); code != 0 {
			t.Fatalf("git %v: %d %s", args, code, out)
		}
	}
	cmd := exec.Command("git", "diff", "--quiet", base, "--", "protected.txt")
	cmd.Dir, cmd.Env = ws, []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_GLOBAL=/dev/null"}
	if err := cmd.Run(); err != nil {
		t.Fatalf("without the checks' environment the replacement did not hide the change (%v): the test shows nothing", err)
	}
	if code, out := gitIn(t, ws, "diff", "--quiet", base, "--", "protected.txt"); code != 1 {
		t.Errorf("git diff --quiet %s exits %d (%s), want 1: the replacement hid the change", base, code, out)
	}
}

// TestGitConfigDirsReadAsGitReadsThem: the sanitizer finds the config git
// reads, not one beside it. A commondir holds a bare path (no "gitdir: "
// prefix; only its trailing newlines are dropped) read whole, and git
// resolves a gitdir's or a commondir's ".." after a link where the link
// leads, not by the path's text. Each layout first fools git's diff.
func TestGitConfigDirsReadAsGitReadsThem(t *testing.T) {
	mkdirs := func(t *testing.T, ws string, dirs ...string) {
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	// commonAt moves the repository's common part (objects, refs and the
	// hostile config) to dir, decoy being the folder the text names.
	commonAt := func(t *testing.T, ws, dir, commondir string, decoy ...string) {
		mkdirs(t, ws, append([]string{dir}, decoy...)...)
		for _, n := range []string{"objects", "refs", "config"} {
			if err := os.Rename(filepath.Join(ws, ".git", n), filepath.Join(ws, dir, n)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(ws, ".git", "commondir"), []byte(commondir), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, layout := range map[string]func(t *testing.T, ws string){
		"a commondir with a gitdir: prefix": func(t *testing.T, ws string) {
			commonAt(t, ws, ".git/gitdir: evil", "gitdir: evil\n", ".git/evil")
		},
		"a commondir over 4 KiB": func(t *testing.T, ws string) {
			commonAt(t, ws, ".git/evil", strings.Repeat("./", 2100)+"evil\n")
		},
		"a commondir's .. after a link": func(t *testing.T, ws string) {
			commonAt(t, ws, ".git/x/evil", "l/../evil\n", ".git/x/y", ".git/evil")
			if err := os.Symlink("x/y", filepath.Join(ws, ".git", "l")); err != nil {
				t.Fatal(err)
			}
		},
		"a gitdir file's .. after a link": func(t *testing.T, ws string) {
			mkdirs(t, ws, "a/b", "store")
			if err := os.Rename(filepath.Join(ws, ".git"), filepath.Join(ws, "a", "store")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("a/b", filepath.Join(ws, "l")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: l/../store\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			gitRepo(t, ws)
			plantHostileConfig(t, filepath.Join(ws, ".git"), ws)
			layout(t, ws)
			if code, out := gitIn(t, ws, "diff", "--quiet", "--", "protected.txt"); code != 0 {
				t.Fatalf("the planted filter did not hide the change (exit %d, %s): the test shows nothing", code, out)
			}
			notes, err := sanitizeGitConfig(ws)
			if err != nil {
				t.Fatal(err)
			}
			if code, out := gitIn(t, ws, "diff", "--quiet", "--", "protected.txt"); code == 0 {
				t.Errorf("git diff --quiet passes (%s) after the sanitizer (%q): it read another config than git", out, notes)
			}
		})
	}
}

// TestGitConfigOfNestedRepositories: `git status` at the workspace's top
// runs `git status` in each populated gitlink with that repository's own
// config: a clean filter there ran the agent's command in the check.
func TestGitConfigOfNestedRepositories(t *testing.T) {
	ws := t.TempDir()
	gitRepo(t, ws)
	sub := filepath.Join(ws, "a")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	gitRepo(t, sub)
	ran := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{{"add", "a"}, {"-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "sub"}} {
		if code, out := gitIn(t, ws, args...); code != 0 {
			t.Fatalf("git %v: %d %s", args, code, out)
		}
	}
	f, err := os.OpenFile(filepath.Join(sub, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("[filter \"run\"]\n\tclean = \"echo ran >> " + ran + "; cat\"\n")
	_ = f.Close()
	for name, body := range map[string]string{"a/.gitattributes": "protected.txt filter=run\n", "a/protected.txt": "tampered\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, ws, "status", "--porcelain")
	if _, err := os.Stat(ran); err != nil {
		t.Fatal("git status did not run the nested repository's filter: the test shows nothing")
	}
	_ = os.Remove(ran)
	notes, err := sanitizeGitConfig(ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status", "--porcelain"}, {"diff-files", "--quiet"}, {"diff-index", "--quiet", "HEAD"}} {
		gitIn(t, ws, args...)
		if _, err := os.Stat(ran); err == nil {
			t.Errorf("git %v ran the nested repository's filter after the sanitizer (%q)", args, notes)
			_ = os.Remove(ran)
		}
	}
}

// TestGitlinksOfEveryIndexVersion: the gitlinks are read from an index as
// real git writes it in versions 2, 3 (an entry with extended flags) and 4
// (names compressed against the one before); a version 4 index whose
// names grow by each entry's suffix is refused, not held.
func TestGitlinksOfEveryIndexVersion(t *testing.T) {
	for _, v := range []string{"2", "3", "4"} {
		t.Run("v"+v, func(t *testing.T) {
			ws := t.TempDir()
			gitRepo(t, ws)
			for _, d := range []string{"lib/a", "lib/b"} {
				sub := filepath.Join(ws, d)
				if err := os.MkdirAll(sub, 0o755); err != nil {
					t.Fatal(err)
				}
				gitRepo(t, sub)
				if code, out := gitIn(t, ws, "add", d); code != 0 {
					t.Fatalf("git add %s: %d %s", d, code, out)
				}
			}
			args := [][]string{{"add", "--intent-to-add", "new.txt"}, {"update-index", "--index-version", v}}
			if err := os.WriteFile(filepath.Join(ws, "new.txt"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, a := range args {
				if code, out := gitIn(t, ws, a...); code != 0 {
					t.Fatalf("git %v: %d %s", a, code, out)
				}
			}
			root, err := os.OpenRoot(ws)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = root.Close() }()
			links, err := gitlinksIn(root, ".git", new(int64(maxGitIndexes)))
			if err != nil || strings.Join(links, ",") != "lib/a,lib/b" {
				t.Errorf("gitlinks %q, %v; want lib/a, lib/b", links, err)
			}
		})
	}
	t.Run("v4 names growing", func(t *testing.T) {
		dir := t.TempDir()
		var b bytes.Buffer
		b.WriteString("DIRC")
		_ = binary.Write(&b, binary.BigEndian, uint32(4))
		const entries = 100
		_ = binary.Write(&b, binary.BigEndian, uint32(entries))
		suffix := bytes.Repeat([]byte("n"), 4<<10)
		for range entries {
			b.Write(make([]byte, 40+20+2)) // stat data, hash, flags
			b.WriteByte(0)                 // strip nothing of the name before
			b.Write(suffix)
			b.WriteByte(0)
		}
		if err := os.MkdirAll(filepath.Join(dir, ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".git", "index"), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = root.Close() }()
		if _, err := gitlinksIn(root, ".git", new(int64(maxGitIndexes))); err == nil || !strings.Contains(err.Error(), "over") {
			t.Errorf("a v4 index whose names grow to %d KiB: %v, want refused", entries*4, err)
		}
	})
}

// TestGitConfigVisitsEachGitDirOnce: a gitdir file may name a git dir that
// was already sanitized, here the top one, from a gitlink of that same
// git dir's index, and so on down a chain of folders. Each git dir is
// sanitized and its index read once, so the chain ends at its first link
// instead of being followed past the bound on nested repositories.
func TestGitConfigVisitsEachGitDirOnce(t *testing.T) {
	ws := t.TempDir()
	gitRepo(t, ws)
	if code, out := gitIn(t, ws, "update-index", "--add", "--cacheinfo", "160000,"+strings.Repeat("1", 40)+",a"); code != 0 {
		t.Fatalf("git update-index: %d %s", code, out)
	}
	dir, up := ws, ".git"
	for range maxGitlinks + 2 {
		dir, up = filepath.Join(dir, "a"), "../"+up
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".git"), []byte("gitdir: "+up+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if notes, err := sanitizeGitConfig(ws); err != nil {
		t.Fatalf("a chain of worktrees naming the top git dir: %v (%q)", err, notes)
	}
}
