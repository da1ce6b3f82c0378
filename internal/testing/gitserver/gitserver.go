// Package gitserver serves git repositories on loopback for tests: the real
// `git http-backend` (Debian's git) behind net/http/cgi, optionally behind
// HTTP basic authentication, with repositories the tests write themselves.
package gitserver

import (
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Server serves the bare repositories under Root at URL/<name>.git.
type Server struct {
	// URL is http://127.0.0.1:<port>.
	URL string
	// Root holds the bare repositories.
	Root string
	// Requests counts the requests served (any path).
	Requests atomic.Int64

	user, password string
	srv            *http.Server
}

// Git is the git binary, or the test is skipped saying what is missing.
func Git(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed (Debian's git package): the git server of this test is the real git http-backend")
	}
	return p
}

// Start serves on loopback until the test ends. With user set, every
// request must carry user and password (HTTP basic authentication).
func Start(t testing.TB, user, password string) *Server {
	t.Helper()
	git := Git(t)
	s := &Server{Root: t.TempDir(), user: user, password: password}
	backend := &cgi.Handler{
		Path: git,
		Args: []string{"http-backend"},
		Dir:  s.Root,
		Env: []string{"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1",
			"HOME=" + s.Root, "GIT_CONFIG_GLOBAL=/dev/null"},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Requests.Add(1)
		if s.user != "" {
			if u, p, ok := r.BasicAuth(); !ok || u != s.user || p != s.password {
				w.Header().Set("WWW-Authenticate", `Basic realm="harnessfacts-test"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		backend.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.URL = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// Repo is a bare repository of a Server.
type Repo struct {
	// URL is the repository's URL.
	URL  string
	dir  string
	work string
	t    testing.TB
}

// Repo makes an empty bare repository name.git. With bySHA, the server
// lets clients fetch any reachable commit by its hash
// (uploadpack.allowReachableSHA1InWant), as the big hosting services do;
// without it, only its branches and tags.
func (s *Server) Repo(t testing.TB, name string, bySHA bool) *Repo {
	t.Helper()
	dir := filepath.Join(s.Root, name+".git")
	run(t, "", "init", "-q", "--bare", dir)
	if bySHA {
		run(t, dir, "config", "uploadpack.allowReachableSHA1InWant", "true")
	}
	work := t.TempDir()
	run(t, work, "init", "-q", "-b", "main")
	return &Repo{URL: s.URL + "/" + name + ".git", dir: dir, work: work, t: t}
}

// Commit replaces the repository's tree with files (path → content; a
// content starting with "symlink:" makes a symbolic link to the rest, one
// starting with "gitlink:" a submodule entry at that commit),
// commits it on main, pushes it and returns the commit's SHA.
func (r *Repo) Commit(files map[string]string, msg string) string {
	r.t.Helper()
	ents, _ := os.ReadDir(r.work)
	for _, e := range ents {
		if e.Name() != ".git" {
			_ = os.RemoveAll(filepath.Join(r.work, e.Name()))
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var gitlinks []string
	for _, p := range paths {
		if sha, ok := strings.CutPrefix(files[p], "gitlink:"); ok {
			gitlinks = append(gitlinks, "160000,"+sha+","+p)
			continue
		}
		full := filepath.Join(r.work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(files[p], "symlink:"); ok {
			if err := os.Symlink(target, full); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	run(r.t, r.work, "add", "-A")
	for _, g := range gitlinks {
		run(r.t, r.work, "update-index", "--add", "--cacheinfo", g)
	}
	run(r.t, r.work, "commit", "-q", "--allow-empty", "-m", msg)
	run(r.t, r.work, "push", "-q", "-f", r.dir, "main")
	return strings.TrimSpace(run(r.t, r.work, "rev-parse", "HEAD"))
}

// Tag tags the last commit and pushes the tag.
func (r *Repo) Tag(name string) {
	r.t.Helper()
	run(r.t, r.work, "tag", "-f", name)
	run(r.t, r.work, "push", "-q", "-f", r.dir, "refs/tags/"+name)
}

// run runs git with no configuration of the machine's or user's.
func run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(Git(t), args...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = []string{"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "PATH=" + os.Getenv("PATH"),
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@test.invalid", "GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@test.invalid",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// String names the server.
func (s *Server) String() string { return fmt.Sprintf("git http-backend at %s", s.URL) }
