package fixturesource_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/harnessfacts/harnessfacts/internal/testing/gitserver"
	"github.com/harnessfacts/harnessfacts/internal/testing/race"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
)

// bigFixtureFiles is a fixture of n files of 32 MiB that do not compress.
func bigFixtureFiles(n int) map[string][]byte {
	files := map[string][]byte{"fixture.yaml": []byte("prompt: p\n")}
	for i := range n {
		b := make([]byte, 32<<20)
		_, _ = rand.Read(b)
		files[fmt.Sprintf("workspace/blob%d", i)] = b
	}
	return files
}

// fetchPeakEnv names the source the child process fetches.
const fetchPeakEnv = "HARNESSFACTS_TEST_FETCH_PEAK"

// TestFetchPeakChild is the child of TestFetchHoldsTheFixtureOnce: it
// fetches the source its environment names into an empty cache and prints
// its peak resident memory.
func TestFetchPeakChild(t *testing.T) {
	src := os.Getenv(fetchPeakEnv)
	if src == "" {
		t.Skip("the child of TestFetchHoldsTheFixtureOnce")
	}
	cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{})
	var err error
	if url, commit, ok := strings.Cut(src, " "); ok {
		_, err = cache.Git(context.Background(), fixturesource.Git{URL: url, Commit: commit})
	} else {
		_, err = cache.OCI(context.Background(), fixturesource.OCI{Ref: src})
	}
	fmt.Printf("ERR %v\n", err)
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			fmt.Printf("PEAK %s\n", strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
}

// An OCI fixture is held once in the node-agent's memory while it is
// fetched and cached, not two or three times over (the compressed layer,
// the files, the cache entry's tar, buffers grown as they filled): a
// fixture near its documented bound of 256 MiB took 624 MiB, past the
// chart's 512Mi hard bound of the node-agent, which the kernel then
// OOM-killed with every run on its node. Measured in a child process with
// the chart's GOMEMLIMIT, on 96 MiB of files.
func TestFetchHoldsTheFixtureOnce(t *testing.T) {
	if race.Enabled {
		t.Skip("measures a fetch's resident memory, which the race detector multiplies")
	}
	const size = 3 * 32 << 20
	files := bigFixtureFiles(3)
	reg := startRegistry(t, "", "")
	fix, err := fixture.New(files, fixturesource.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := fixturesource.Push(context.Background(), fix, reg.Host+"/fixtures/big:v1")
	if err != nil {
		t.Fatal(err)
	}
	// Git's fetch is not measured here: go-git's pack parser keeps a cache
	// of its own (96 MiB) while it reads a pack, whatever the fixture.
	for name, src := range map[string]string{"oci": ref} {
		t.Run(name, func(t *testing.T) {
			peak, ferr := fetchPeak(t, src)
			if ferr != "<nil>" {
				t.Fatalf("the fetch failed: %s", ferr)
			}
			// The files once, and room for the runtime and the test binary.
			if limit := int64(size) + size/4 + 32<<20; peak > limit {
				t.Errorf("fetching %d MiB of fixture peaked at %d MiB of resident memory, more than %d MiB: the fixture is held more than once", size>>20, peak>>20, limit>>20)
			}
			t.Logf("%d MiB of fixture, peak %d MiB", size>>20, peak>>20)
		})
	}
}

// fetchPeak fetches src in a child process with the chart's GOMEMLIMIT and
// returns its peak resident memory and its error ("<nil>" for none).
func fetchPeak(t *testing.T, src string) (int64, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFetchPeakChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), fetchPeakEnv+"="+src, "GOMEMLIMIT=256MiB")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child: %v\n%s", err, out)
	}
	_, rest, ok := strings.Cut(string(out), "PEAK ")
	kb, perr := strconv.ParseInt(strings.Fields(rest + " x")[0], 10, 64)
	_, ferr, eok := strings.Cut(string(out), "ERR ")
	ferr, _, _ = strings.Cut(ferr, "\n")
	if !ok || perr != nil || !eok {
		t.Fatalf("no peak or error in the child's output:\n%s", out)
	}
	return kb << 10, ferr
}

// A repository whose pack is small but whose objects inflate past the
// bound (a blob of 600 MiB of zeros is a pack of about 600 KiB) is refused
// before anything is inflated into memory. go-git's parser reports the
// inflated sizes only after it has stored every object: the node-agent
// inflated the whole blob first, 2.8 GiB of resident memory for a blob of
// 700 MiB, and the kernel OOM-killed it under the chart's 512Mi bound,
// with every run on its node. Any run author can name such a repository.
func TestGitInflationBombIsRefusedBeforeItInflates(t *testing.T) {
	srv := gitserver.Start(t, "", "")
	repo := srv.Repo(t, "bomb", true)
	commit := repo.Commit(map[string]string{"fixture.yaml": "prompt: p\n", "workspace/zeros": strings.Repeat("\x00", 600<<20)}, "bomb")
	peak, ferr := fetchPeak(t, repo.URL+" "+commit)
	if !strings.Contains(ferr, "more than") {
		t.Errorf("the bomb was not refused: %s", ferr)
	}
	if peak > 64<<20 {
		t.Errorf("refusing the bomb took %d MiB of resident memory: it was inflated first", peak>>20)
	}
	t.Logf("peak %d MiB: %s", peak>>20, ferr)
}

// rawManifest is a manifest pushed as it is.
type rawManifest []byte

func (r rawManifest) RawManifest() ([]byte, error)        { return r, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// A registry that answers a fixture reference with a manifest of 95 MiB
// (valid JSON, its digest the one pinned: the run author's own registry)
// is refused as it reads past MaxManifestBytes. go-containerregistry
// alone reads up to 100 MiB, and the node-agent then hashed and parsed
// it: 591 MiB of resident memory, past the chart's 512Mi bound.
func TestOCIManifestIsReadWithinItsBound(t *testing.T) {
	reg := startRegistry(t, "", "")
	var sb strings.Builder
	sb.WriteString(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.harnessfacts.fixture.v1",` +
		`"config":{"mediaType":"application/vnd.oci.empty.v1+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},"layers":[],"annotations":{`)
	for i := 0; sb.Len() < 95<<20; i++ {
		fmt.Fprintf(&sb, `"k%d":"v",`, i)
	}
	sb.WriteString(`"z":"z"}}`)
	raw := []byte(sb.String())
	tag, err := name.NewTag(reg.Host + "/fixtures/huge:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(tag, rawManifest(raw)); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	peak, ferr := fetchPeak(t, reg.Host+"/fixtures/huge@sha256:"+hex.EncodeToString(sum[:]))
	if !strings.Contains(ferr, "manifest") || !strings.Contains(ferr, "bytes") {
		t.Errorf("the huge manifest was not refused for its size: %s", ferr)
	}
	if peak > 64<<20 {
		t.Errorf("refusing the manifest took %d MiB of resident memory", peak>>20)
	}
	t.Logf("peak %d MiB: %s", peak>>20, ferr)
}

// hugeRefsServer answers a git client's reference discovery with size
// bytes of references (valid pkt-lines, every one naming the same commit):
// the run author's own git server.
func hugeRefsServer(t *testing.T, size int) string {
	t.Helper()
	pkt := func(w io.Writer, s string) { fmt.Fprintf(w, "%04x%s", len(s)+4, s) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/info/refs") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		bw := bufio.NewWriterSize(w, 1<<20)
		defer bw.Flush()
		pkt(bw, "# service=git-upload-pack\n")
		_, _ = io.WriteString(bw, "0000")
		hash := strings.Repeat("ab", 20)
		pkt(bw, hash+" HEAD\x00multi_ack thin-pack side-band side-band-64k ofs-delta shallow no-progress include-tag\n")
		for n, i := 0, 0; n < size; i++ {
			line := fmt.Sprintf("%s refs/heads/branch-%09d\n", hash, i)
			pkt(bw, line)
			n += len(line) + 4
		}
		_, _ = io.WriteString(bw, "0000")
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/repo.git"
}

// A git server whose reference discovery answers with 240 MiB of
// references (a run author's own) is cut at MaxRefsBytes: go-git keeps
// every reference it reads, and the answer took the fetch to 503-516 MiB
// of resident memory, past the chart's 512Mi bound of the node-agent.
func TestGitRefsAnswerIsReadWithinItsBound(t *testing.T) {
	if race.Enabled {
		t.Skip("measures a fetch's resident memory, which the race detector multiplies")
	}
	url := hugeRefsServer(t, 240<<20)
	peak, ferr := fetchPeak(t, url+" "+strings.Repeat("ab", 20))
	if !strings.Contains(ferr, "references") {
		t.Errorf("the refs answer was not refused for its size: %s", ferr)
	}
	if peak > 128<<20 {
		t.Errorf("refusing the refs answer took %d MiB of resident memory", peak>>20)
	}
	t.Logf("peak %d MiB: %s", peak>>20, ferr)
}

// TestGitFetchEndsWhenTheServerTrickles: a server that sends its answer's
// headers and then a byte now and then is past every wait for headers,
// and held a local run's fixture step for ever. The fetch as a whole is
// bounded (Options.FetchTimeout) and says so.
func TestGitFetchEndsWhenTheServerTrickles(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		w.WriteHeader(http.StatusOK)
		// The service line, then a line of 65,516 bytes that never ends.
		_, _ = io.WriteString(w, "001e# service=git-upload-pack\n0000fff0")
		for {
			w.(http.Flusher).Flush()
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
				_, _ = io.WriteString(w, "a")
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	cache := fixturesource.NewCache(t.TempDir(), 0, fixturesource.Options{FetchTimeout: time.Second})
	start := time.Now()
	_, err := cache.Git(context.Background(), fixturesource.Git{URL: srv.URL + "/repo.git", Commit: strings.Repeat("ab", 20)})
	if err == nil || !errors.Is(err, fixturesource.ErrUnavailable) || !strings.Contains(err.Error(), "did not finish within 1s") {
		t.Errorf("a trickling server: %v, want the fetch's timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the fetch took %s", d)
	}
}
