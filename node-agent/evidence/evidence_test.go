package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/artifacts"
	"github.com/harnessfacts/harnessfacts/node-agent/mcp"
)

func art(path, content string) artifacts.Result {
	sum := sha256.Sum256([]byte(content))
	return artifacts.Result{Path: path, Data: []byte(content), Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}
}

func sampleReceipt() Receipt {
	code := int32(0)
	mem := resource.MustParse("2Gi")
	start := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))
	return Receipt{
		Run:            RunRef{Namespace: "default", Name: "hello", UID: "1234", Attempt: 1},
		SpecDigest:     "sha256:" + strings.Repeat("a", 64),
		FixtureDigest:  "sha256:" + strings.Repeat("b", 64),
		HarnessVersion: "v0.1.0",
		Agent:          Agent{Adapter: v1alpha1.AdapterExec, CLIVersion: "sh"},
		Node:           "node-1",
		Sandbox:        v1alpha1.SandboxStatus{Mode: "bwrap"},
		Limits:         v1alpha1.Limits{EpisodeSeconds: 60, ProbeSeconds: 20, Memory: &mem, MaxDecisions: 5000},
		Timings:        Timings{Started: start, Finished: start.Add(3 * time.Second), AgentMilliseconds: 2500},
		Exit:           Exit{ExitCode: &code},
		MCP: MCP{Summary: mcp.Summary{Transport: v1alpha1.MCPTransportHTTP, Calls: 1, TokenIssued: true,
			Receipts: []mcp.Receipt{{Time: start.UTC(), Transport: v1alpha1.MCPTransportHTTP, Tool: "get_token", Outcome: mcp.OutcomeIssued}}}, TokenSeen: true},
		Network: &v1alpha1.NetworkStatus{Egress: v1alpha1.EgressProviderOnly, Allowed: 3, Denied: 1, DeniedHosts: []string{"elsewhere.example:443"}},
		Checks:  []v1alpha1.CheckResult{{Name: "greeting-edited", Passed: true, ExitCode: &code, DurationMilliseconds: 4}},
	}
}

func sampleArtifacts() []artifacts.Result {
	return []artifacts.Result{
		art("greeting.txt", "hello, harness\n"),
		art("out/token.txt", "hft_x\n"),
		{Path: "passwd", Rejected: "a symbolic link: links are not followed"},
		art("bin.dat", "\xff\xfe\x00binary"),
	}
}

func seal(t *testing.T, output string, arts []artifacts.Result, limit int) *Bundle {
	t.Helper()
	b, err := SealLog(sampleReceipt(), BytesLog(output), arts, limit)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReceiptDigestIsStableAndCanonical(t *testing.T) {
	b1 := seal(t, "edited greeting.txt\n", sampleArtifacts(), 0)
	b2 := seal(t, "edited greeting.txt\n", sampleArtifacts(), 0)
	if b1.Digest != b2.Digest || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(b1.Digest) {
		t.Fatalf("digests %s, %s: want one stable sha256:<hex>", b1.Digest, b2.Digest)
	}
	if Sum(b1.ReceiptJSON) != b1.Digest {
		t.Fatal("the digest is not the sha256 of the receipt's bytes")
	}
	r, err := parseReceipt(b1.ReceiptJSON)
	if err != nil {
		t.Fatalf("the receipt does not read back: %v", err)
	}
	if r.Timings.Started.Location() != time.UTC || r.Artifacts[2].Stored || !r.Artifacts[0].Stored || r.Output.Digest != Sum([]byte("edited greeting.txt\n")) {
		t.Fatalf("receipt = %+v", r)
	}
	if r.Network == nil || r.Network.Denied != 1 || r.Network.DeniedHosts[0] != "elsewhere.example:443" {
		t.Fatalf("receipt network = %+v", r.Network)
	}
	// A receipt written before the network section existed still reads.
	old := sampleReceipt()
	old.Network = nil
	ob, err := SealLog(old, BytesLog("x"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := parseReceipt(ob.ReceiptJSON); err != nil || r.Network != nil || strings.Contains(string(ob.ReceiptJSON), `"network"`) {
		t.Fatalf("a receipt without network: %v %+v", err, r)
	}
	b3 := seal(t, "edited greeting.txt!\n", sampleArtifacts(), 0)
	if b3.Digest == b1.Digest {
		t.Fatal("a different output gives the same receipt digest")
	}
}

func TestRoundTripAndTamper(t *testing.T) {
	b := seal(t, "edited greeting.txt\ngot token hft_x\n", sampleArtifacts(), 0)

	type form struct {
		name   string
		verify func(t *testing.T, tamper func(parts map[string][]byte)) *Report
	}
	dirForm := form{"folder", func(t *testing.T, tamper func(map[string][]byte)) *Report {
		dir := filepath.Join(t.TempDir(), "evidence")
		if err := b.WriteDir(dir); err != nil {
			t.Fatal(err)
		}
		parts := map[string][]byte{}
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(dir, p)
				parts[filepath.ToSlash(rel)], _ = os.ReadFile(p)
			}
			return nil
		})
		before := map[string]bool{}
		for k := range parts {
			before[k] = true
		}
		tamper(parts)
		for k := range before {
			if _, ok := parts[k]; !ok {
				must(t, os.Remove(filepath.Join(dir, filepath.FromSlash(k))))
			}
		}
		for k, v := range parts {
			p := filepath.Join(dir, filepath.FromSlash(k))
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			must(t, os.WriteFile(p, v, 0o644))
		}
		rep, err := VerifyDir(dir, b.Digest)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}}
	cmForm := form{"configmap", func(t *testing.T, tamper func(map[string][]byte)) *Report {
		data, bin := b.ConfigMapData()
		// The tamper functions speak of folder names; map ConfigMap keys
		// (artifact-NN) to them and back.
		view := map[string][]byte{}
		isBin := map[string]bool{}
		for k, v := range data {
			view[folderName(k, b)] = []byte(v)
		}
		for k, v := range bin {
			view[folderName(k, b)] = v
			isBin[k] = true
		}
		tamper(view)
		data, bin = map[string]string{}, map[string][]byte{}
		for name, v := range view {
			k := cmName(name, b)
			if isBin[k] {
				bin[k] = v
			} else {
				data[k] = string(v)
			}
		}
		return VerifyConfigMap(data, bin, b.Digest)
	}}

	tampers := []struct {
		name   string
		tamper func(parts map[string][]byte)
		part   string // the part Verify must name (folder name; the ConfigMap key is mapped)
	}{
		{"nothing", func(map[string][]byte) {}, ""},
		{"output edited", func(p map[string][]byte) { p[OutputName] = append(p[OutputName], 'x') }, OutputName},
		{"artifact edited", func(p map[string][]byte) { p["artifacts/greeting.txt"] = []byte("hello, world\n") }, "artifacts/greeting.txt"},
		{"binary artifact edited", func(p map[string][]byte) { p["artifacts/bin.dat"] = []byte("\xff") }, "artifacts/bin.dat"},
		{"artifact removed", func(p map[string][]byte) { delete(p, "artifacts/out/token.txt") }, "artifacts/out/token.txt"},
		{"file added", func(p map[string][]byte) { p["extra.txt"] = []byte("x") }, "extra.txt"},
		{"receipt edited", func(p map[string][]byte) {
			p[ReceiptName] = []byte(strings.Replace(string(p[ReceiptName]), `"tokenSeen":true`, `"tokenSeen":false`, 1))
		}, ReceiptName},
		{"digest file edited", func(p map[string][]byte) { p[DigestName] = []byte("sha256:" + strings.Repeat("0", 64)) }, DigestName},
		{"receipt missing", func(p map[string][]byte) { delete(p, ReceiptName) }, ReceiptName},
	}
	for _, f := range []form{dirForm, cmForm} {
		for _, tc := range tampers {
			t.Run(f.name+"/"+tc.name, func(t *testing.T) {
				rep := f.verify(t, tc.tamper)
				if tc.part == "" {
					if !rep.OK() || rep.Digest != b.Digest || rep.Receipt == nil {
						t.Fatalf("untouched evidence does not verify: %v", rep.Err())
					}
					return
				}
				if rep.OK() {
					t.Fatal("tampered evidence verifies")
				}
				want := tc.part
				if f.name == "configmap" {
					want = cmName(tc.part, b)
				}
				for _, p := range rep.Problems {
					if p.Part == want {
						return
					}
				}
				t.Fatalf("problems %v do not name %s", rep.Problems, want)
			})
		}
	}
}

func folderName(key string, b *Bundle) string {
	for i, a := range b.Receipt.Artifacts {
		if key == artifactKey(i) {
			return ArtifactsDir + "/" + a.Path
		}
	}
	return key
}

func cmName(part string, b *Bundle) string {
	for i, a := range b.Receipt.Artifacts {
		if part == ArtifactsDir+"/"+a.Path {
			return artifactKey(i)
		}
	}
	return part
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestVerifyDirRefusesALinkedPart(t *testing.T) {
	b := seal(t, "out\n", sampleArtifacts(), 0)
	dir := filepath.Join(t.TempDir(), "evidence")
	must(t, b.WriteDir(dir))
	// Replace output.log by a link to an identical file elsewhere: the
	// digest would match, but evidence is files, not links.
	elsewhere := filepath.Join(t.TempDir(), "output.log")
	must(t, os.WriteFile(elsewhere, b.Output, 0o644))
	must(t, os.Remove(filepath.Join(dir, OutputName)))
	if err := os.Symlink(elsewhere, filepath.Join(dir, OutputName)); err != nil {
		t.Skipf("cannot make a symbolic link here: %v", err)
	}
	rep, err := VerifyDir(dir, b.Digest)
	must(t, err)
	if rep.OK() || rep.Problems[0].Part != OutputName || !strings.Contains(rep.Problems[0].Detail, "not a regular file") {
		t.Fatalf("problems = %v, want output.log refused as not a regular file", rep.Problems)
	}
	if err := b.WriteDir(dir); err == nil {
		t.Fatal("WriteDir wrote into a folder that is not empty")
	}
}
