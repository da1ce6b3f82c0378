package fixturesource_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/internal/testing/gitserver"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
)

// helloFiles is a fixture folder inside a repository at tasks/hello, with
// files beside it (a kustomization, a README at the repository's root).
func helloFiles(greeting string) map[string]string {
	return map[string]string{
		"README.md":                           "a repository of tasks\n",
		"tasks/hello/fixture.yaml":            "prompt: say hello\nexecutables: [agent.sh]\n",
		"tasks/hello/workspace/greeting.txt":  greeting,
		"tasks/hello/agent.sh":                "#!/bin/sh\necho hi\n",
		"tasks/hello/kustomization.yaml":      "configMapGenerator: []\n",
		"tasks/hello/tests/check.sh":          "grep -q hello greeting.txt\n",
		"tasks/other/fixture.yaml":            "prompt: other\n",
		"tasks/other/workspace/something.txt": "x",
	}
}

// dirDigest is the digest of the same fixture read from a folder on disk:
// a git fixture must hash as the folder does.
func dirDigest(t *testing.T, files map[string]string, prefix string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		rel, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		full := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fix, err := fixture.FromDir(dir, fixture.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return fix.Digest
}

func fileOf(t *testing.T, fix *fixture.Fixture, p string) string {
	t.Helper()
	for _, f := range fix.Files {
		if f.Path == p {
			return string(f.Data)
		}
	}
	t.Fatalf("the fixture has no %s", p)
	return ""
}

// A fixture at a pinned commit is the folder as it was at that commit, not
// as the branch has it now, hashes as the same folder on disk does, and
// is served from the cache the second time, after the repository was asked
// again.
func TestGitFixtureAtThePinnedCommit(t *testing.T) {
	for _, bySHA := range []bool{true, false} {
		name := map[bool]string{true: "fetch-by-sha", false: "branches-only"}[bySHA]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			srv := gitserver.Start(t, "", "")
			repo := srv.Repo(t, "tasks", bySHA)
			old := repo.Commit(helloFiles("hello\n"), "first")
			repo.Commit(helloFiles("changed since\n"), "second")

			cache := fixturesource.NewCache(filepath.Join(t.TempDir(), ".fixtures"), 0, fixturesource.Options{})
			src := fixturesource.Git{URL: repo.URL, Commit: old, Path: "tasks/hello"}
			got, err := cache.Git(ctx, src)
			if err != nil {
				t.Fatal(err)
			}
			if got.Cached {
				t.Error("the first fetch says it came from the cache")
			}
			if g := fileOf(t, got.Fixture, "workspace/greeting.txt"); g != "hello\n" {
				t.Errorf("greeting.txt is %q: not the pinned commit's", g)
			}
			if want := dirDigest(t, helloFiles("hello\n"), "tasks/hello/"); got.Fixture.Digest != want {
				t.Errorf("digest %s, the folder's is %s", got.Fixture.Digest, want)
			}
			for _, f := range got.Fixture.Files {
				if strings.HasPrefix(f.Path, "kustomization") || f.Path == "README.md" || strings.Contains(f.Path, "something") {
					t.Errorf("%s is in the fixture: only the fixture's folder belongs there", f.Path)
				}
				if f.Path == "agent.sh" && f.Mode != 0o755 {
					t.Errorf("agent.sh has mode %o, want the manifest's 0755", f.Mode)
				}
			}
			before := srv.Requests.Load()
			again, err := cache.Git(ctx, src)
			if err != nil {
				t.Fatal(err)
			}
			if !again.Cached || again.Fixture.Digest != got.Fixture.Digest {
				t.Errorf("second read: cached %v digest %s, want the cached %s", again.Cached, again.Fixture.Digest, got.Fixture.Digest)
			}
			if srv.Requests.Load() == before {
				t.Error("a cached fixture was served without asking the repository whether the run may read it")
			}
		})
	}
}

// A commit the repository does not have is refused with a reason that
// names it, whether the server fetches by hash or only serves branches.
func TestGitWrongCommitIsRefused(t *testing.T) {
	for _, bySHA := range []bool{true, false} {
		ctx := context.Background()
		srv := gitserver.Start(t, "", "")
		repo := srv.Repo(t, "tasks", bySHA)
		repo.Commit(helloFiles("hello\n"), "first")
		missing := strings.Repeat("ab", 20)
		cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
		_, err := cache.Git(ctx, fixturesource.Git{URL: repo.URL, Commit: missing, Path: "tasks/hello"})
		if !errors.Is(err, fixturesource.ErrUnavailable) || !strings.Contains(err.Error(), missing) {
			t.Fatalf("bySHA %v: err %v, want ErrUnavailable naming the commit", bySHA, err)
		}
		t.Logf("bySHA %v: %v", bySHA, err)
		if len(cache.Cached()) != 0 {
			t.Error("a refused fetch left a cache entry")
		}
	}
	cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
	for _, c := range []string{"main", "ABABABABABABABABABABABABABABABABABABABAB", "abc"} {
		if _, err := cache.Git(context.Background(), fixturesource.Git{URL: "http://127.0.0.1:1/x.git", Commit: c}); !errors.Is(err, fixturesource.ErrUnavailable) || !strings.Contains(err.Error(), "full commit SHA") {
			t.Errorf("commit %q: %v", c, err)
		}
	}
}

// A private repository: refused without credentials and with a wrong
// password, fetched with the right ones; and a cached copy is never served
// to a run without them.
func TestGitCredentials(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.Start(t, "x-access-token", "s3cret-token")
	repo := srv.Repo(t, "private", true)
	c := repo.Commit(helloFiles("hello\n"), "first")
	cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
	src := fixturesource.Git{URL: repo.URL, Commit: c, Path: "tasks/hello"}
	cases := []struct {
		name, user, pass, want string
	}{
		{"no credentials", "", "", "asks for credentials"},
		{"a wrong password", "x-access-token", "wrong", "refused the credentials"},
		{"the right token", "x-access-token", "s3cret-token", ""},
		{"no credentials, once cached", "", "", "asks for credentials"},
		{"a wrong password, once cached", "x-access-token", "wrong", "refused the credentials"},
	}
	for _, tc := range cases {
		s := src
		s.Username, s.Password = tc.user, tc.pass
		res, err := cache.Git(ctx, s)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		case tc.want != "" && res != nil:
			t.Errorf("%s: got a fixture", tc.name)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") || err != nil && strings.Contains(err.Error(), "wrong") {
			t.Errorf("%s: the error quotes a password: %v", tc.name, err)
		}
	}
}

// A hostile repository: a link in the fixture's folder, a file or a fetch
// beyond the bounds, a sub-path that is not there.
func TestGitHostileRepositories(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.Start(t, "", "")
	cases := []struct {
		name  string
		files map[string]string
		path  string
		opts  fixturesource.Options
		want  error
	}{
		{"a link out of the fixture", map[string]string{"fixture.yaml": "prompt: p\n", "workspace/passwd": "symlink:/etc/passwd"}, "", fixturesource.Options{}, fixture.ErrNotRegular},
		{"a link inside the fixture", map[string]string{"fixture.yaml": "prompt: p\n", "workspace/a": "x", "workspace/b": "symlink:a"}, "", fixturesource.Options{}, fixture.ErrNotRegular},
		{"a submodule", map[string]string{"fixture.yaml": "prompt: p\n", "workspace/vendor/lib": "gitlink:" + strings.Repeat("1", 40)}, "", fixturesource.Options{}, fixture.ErrNotRegular},
		{"a file too large", map[string]string{"fixture.yaml": "prompt: p\n", "workspace/big": strings.Repeat("x", 4096)}, "",
			fixturesource.Options{Limits: fixture.Limits{MaxFileBytes: 1024}}, fixture.ErrTooLarge},
		{"too many files", map[string]string{"fixture.yaml": "prompt: p\n", "workspace/a": "a", "workspace/b": "b", "workspace/c": "c"}, "",
			fixturesource.Options{Limits: fixture.Limits{MaxFiles: 2}}, fixture.ErrTooLarge},
		{"a pack beyond the fetch's bound", map[string]string{"fixture.yaml": "prompt: p\n", "workspace/noise": noise(64 << 10)}, "",
			fixturesource.Options{MaxPackBytes: 16 << 10}, fixturesource.ErrUnavailable},
		{"objects inflating beyond the bound", map[string]string{"fixture.yaml": "prompt: p\n", "workspace/zeros": strings.Repeat("0", 1<<20)}, "",
			fixturesource.Options{MaxInflatedBytes: 64 << 10}, fixturesource.ErrUnavailable},
		{"no such folder", map[string]string{"fixture.yaml": "prompt: p\n"}, "tasks/missing", fixturesource.Options{}, fixture.ErrMissingManifest},
		{"no fixture.yaml", map[string]string{"workspace/a": "x"}, "", fixturesource.Options{}, fixture.ErrMissingManifest},
	}
	for i, tc := range cases {
		repo := srv.Repo(t, "hostile"+string(rune('a'+i)), true)
		c := repo.Commit(tc.files, tc.name)
		cache := fixturesource.NewCache(t.TempDir(), 0, tc.opts)
		_, err := cache.Git(ctx, fixturesource.Git{URL: repo.URL, Commit: c, Path: tc.path})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
			continue
		}
		t.Logf("%s: %v", tc.name, err)
	}
}

// noise is n bytes that do not compress.
func noise(n int) string {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = 'a' + byte(x%26)
	}
	return string(b)
}

// The cache stays within its bound, dropping the least recently used.
func TestCacheEvictsTheLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.Start(t, "", "")
	repo := srv.Repo(t, "many", true)
	var commits []string
	for i := range 4 {
		commits = append(commits, repo.Commit(map[string]string{"fixture.yaml": "prompt: p\n", "workspace/n": noise(8<<10) + string(rune('a'+i))}, "c"))
	}
	// About two entries' worth.
	cache := fixturesource.NewCache(t.TempDir(), 20<<10, fixturesource.Options{})
	for _, c := range commits {
		if _, err := cache.Git(ctx, fixturesource.Git{URL: repo.URL, Commit: c}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(cache.Cached()); n < 1 || n > 2 {
		t.Errorf("the cache holds %d entries, want at most the 2 that fit", n)
	}
	res, err := cache.Git(ctx, fixturesource.Git{URL: repo.URL, Commit: commits[3]})
	if err != nil || !res.Cached {
		t.Errorf("the newest fixture was evicted (cached %v, err %v)", res != nil && res.Cached, err)
	}
	res, err = cache.Git(ctx, fixturesource.Git{URL: repo.URL, Commit: commits[0]})
	if err != nil || res.Cached {
		t.Errorf("the oldest fixture is still cached (err %v)", err)
	}
}

// A run author names the fixture's URL and the node-agent dials it from the
// node: the instance metadata service and link-local addresses are refused
// at connect, for git and for OCI fixtures.
func TestFetchesRefuseTheMetadataService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Setenv("HTTP_PROXY", "")
	t.Setenv("HTTPS_PROXY", "")
	cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
	commit := strings.Repeat("ab", 20)
	for _, u := range []string{"http://169.254.169.254/latest/x.git", "https://169.254.10.1/x.git"} {
		_, err := cache.Git(ctx, fixturesource.Git{URL: u, Commit: commit})
		if !errors.Is(err, fixturesource.ErrUnavailable) || !strings.Contains(err.Error(), "refusing to connect") {
			t.Errorf("git %s: %v, want ErrUnavailable with the refusal", u, err)
		}
	}
	_, err := cache.OCI(ctx, fixturesource.OCI{Ref: "169.254.169.254/fixtures/x@sha256:" + strings.Repeat("0", 64)})
	if !errors.Is(err, fixturesource.ErrUnavailable) || !strings.Contains(err.Error(), "refusing to connect") {
		t.Errorf("oci: %v, want ErrUnavailable with the refusal", err)
	}
	if len(cache.Cached()) != 0 {
		t.Error("a refused fetch left a cache entry")
	}
}

// A fixture folder committed with the evidence of local runs made in it
// (evidence/NAME/TIME and the link evidence/NAME/latest) is read as the
// folder on disk is: the evidence is beside the fixture, link and all.
func TestGitLeavesOutLocalEvidence(t *testing.T) {
	srv := gitserver.Start(t, "", "")
	repo := srv.Repo(t, "with-evidence", true)
	// A folder that only shares a beside-file's name is the fixture's,
	// from git as from the folder.
	files := map[string]string{"fixture.yaml": "prompt: p\n", "workspace/a": "a\n", "run.yaml/inner.txt": "x\n"}
	want := dirDigest(t, files, "")
	files["evidence/hello/20261204T000000Z/receipt.json"] = "{}\n"
	files["evidence/hello/latest"] = "symlink:20261204T000000Z"
	c := repo.Commit(files, "with a local run's evidence")
	got, err := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{}).Git(context.Background(), fixturesource.Git{URL: repo.URL, Commit: c})
	if err != nil {
		t.Fatal(err)
	}
	if got.Fixture.Digest != want || len(got.Fixture.Files) != 3 {
		t.Fatalf("%d files, digest %s; want the 3 files without the evidence, %s", len(got.Fixture.Files), got.Fixture.Digest, want)
	}
}

// gitIn runs git in dir with stdin, for trees the repository helper cannot
// write (a tree that names another tree many times).
func gitIn(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(gitserver.Git(t), args...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a.invalid", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@a.invalid"}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A tree bomb: eight objects, each tree naming the one below it 64 times,
// 64^6 paths. Under a folder that is left out (a local run's evidence) it
// is not entered; anywhere else every entry counts toward maxEntries; and
// the run's end stops the walk. Before, the walk went on for hours under
// evidence/, uncounted, past the run's deadline, holding the cache's lock.
func TestGitTreeBomb(t *testing.T) {
	srv := gitserver.Start(t, "", "")
	for _, under := range []string{"evidence", "workspace"} {
		t.Run(under, func(t *testing.T) {
			repo := srv.Repo(t, "bomb-"+under, true)
			repo.Commit(map[string]string{"fixture.yaml": "prompt: p\n"}, "first")
			bare := filepath.Join(srv.Root, "bomb-"+under+".git")
			blob := gitIn(t, bare, "prompt: p\n", "hash-object", "-w", "--stdin")
			tree := gitIn(t, bare, "100644 blob "+blob+"\tx\n", "mktree")
			for range 6 {
				var b strings.Builder
				for i := range 64 {
					fmt.Fprintf(&b, "040000 tree %s\td%02d\n", tree, i)
				}
				tree = gitIn(t, bare, b.String(), "mktree")
			}
			root := gitIn(t, bare, "100644 blob "+blob+"\tfixture.yaml\n040000 tree "+tree+"\t"+under+"\n", "mktree")
			commit := gitIn(t, bare, "", "commit-tree", root, "-m", "bomb")
			gitIn(t, bare, "", "update-ref", "refs/heads/main", commit)

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{}).Git(ctx, fixturesource.Git{URL: repo.URL, Commit: commit})
			if ctx.Err() != nil {
				t.Fatalf("the walk ran to the deadline: %v", err)
			}
			switch under {
			case "evidence":
				if err != nil || len(res.Fixture.Files) != 1 {
					t.Fatalf("got %v, %v; want the fixture of fixture.yaml alone", res, err)
				}
			default:
				if !errors.Is(err, fixture.ErrTooLarge) {
					t.Fatalf("err %v, want %v", err, fixture.ErrTooLarge)
				}
			}
		})
	}
}

// TestGitQuotesNoAnswerOfAnotherService: a run author points a git
// fixture at an internal service whose answer to the reference
// advertisement begins with four hex digits (a token, an id): go-git
// quotes the "line" it could not read, and the run's status showed the
// service's words. The fetch says only that the answer is not git's.
func TestGitQuotesNoAnswerOfAnotherService(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		_, _ = io.WriteString(w, "0040INTERNAL-SECRET-deadbeef-token-value-0123456789abcdef0123456789\n")
	}))
	defer srv.Close()
	cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
	_, err := cache.Git(context.Background(), fixturesource.Git{URL: srv.URL + "/internal/repo.git", Commit: strings.Repeat("a", 40)})
	if err == nil || strings.Contains(err.Error(), "SECRET") || !errors.Is(err, fixturesource.ErrUnavailable) {
		t.Fatalf("fetching from a service that is not git: %v", err)
	}
}
