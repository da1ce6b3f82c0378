// Package gitleaks_test holds the redactor to gitleaks' own detector: for
// samples of every gitleaks rule, made by the generator gitleaks makes its
// own rules' test cases with, whatever the detector finds in an agent-like
// stream must be gone from what the redactor writes. It is a module of its
// own so that the detector's dependencies stay out of the harnessfacts
// module; `make test` runs it.
package gitleaks_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/lucasjones/reggen"
	"github.com/zricethezav/gitleaks/v8/detect"

	"github.com/harnessfacts/harnessfacts/node-agent/redact"
)

// The detector must be the gitleaks whose rules the redactor uses.
func TestTheDetectorIsTheRedactorsGitleaks(t *testing.T) {
	version := func(gomod string) string {
		data, err := os.ReadFile(gomod)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^\s*github\.com/zricethezav/gitleaks/v8 (\S+)`).FindSubmatch(data)
		if m == nil {
			t.Fatalf("%s does not require gitleaks", gomod)
		}
		return string(m[1])
	}
	if here, there := version("go.mod"), version("../../go.mod"); here != there {
		t.Fatalf("this test uses gitleaks %s, the redactor %s: set test/gitleaks/go.mod to %s and run go mod tidy there", here, there, there)
	}
}

// contexts place a sample in an agent's output: on a line of its own, in
// a shell line, with CRLF line ends, as a YAML value, and JSON-escaped in
// a stream-json message.
var contexts = []func(sample string) string{
	func(x string) string {
		return "2026-12-02T10:00:00Z INFO tool_call name=read_file\n" + x + "\nthe agent goes on\n"
	},
	func(x string) string { return "$ echo done && run --flag " + x + " # ok\n" },
	func(x string) string { return "line one\r\n" + x + "\r\nline three\r\n" },
	func(x string) string { return "config:\n  nested:\n    " + x + "\n  other: 1\n" },
	func(x string) string {
		j, _ := json.Marshal(x)
		return `{"type":"assistant","message":{"content":[{"type":"text","text":` + string(j) + `}]}}` + "\n"
	},
}

func TestRedactsWhatGitleaksFinds(t *testing.T) {
	d, err := detect.NewDetectorDefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	r, err := redact.New(redact.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(d.Config.Rules))
	for id := range d.Config.Rules {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	rng := rand.New(rand.NewPCG(18, 2))
	findings, rules, missed := 0, map[string]bool{}, 0
	for _, id := range ids {
		rule := d.Config.Rules[id]
		if rule.Regex == nil {
			continue
		}
		g, err := reggen.NewGenerator(rule.Regex.String())
		if err != nil {
			t.Fatalf("%s: gitleaks' generator: %v", id, err)
		}
		for i := range 25 {
			g.SetSeed(int64(rng.Uint64()))
			text := contexts[i%len(contexts)](g.Generate(3))
			found := d.DetectString(text)
			if len(found) == 0 {
				continue
			}
			// Through a Writer, in writes of random sizes, as the agent's
			// output comes; every fifth sample after output without
			// keywords, so that it straddles the 256 KiB mark, where the
			// Writer's first batch ends (with the window it holds back
			// made too short, 15 findings are left).
			var out bytes.Buffer
			w := r.NewWriter(&out)
			in, most := []byte(text), 64
			if i%5 == 4 {
				in = append(filler(256<<10-rng.IntN(len(text)+1)), in...)
				most = 32 << 10
			}
			for rest := in; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(most))
				if _, err := w.Write(rest[:n]); err != nil {
					t.Fatal(err)
				}
				rest = rest[n:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				findings++
				rules[f.RuleID] = true
				secret := f.Secret
				if secret == "" {
					secret = f.Match
				}
				if got := out.String(); strings.Contains(got, secret) {
					if missed++; missed <= 20 {
						t.Errorf("%s: gitleaks found %q (rule %s, match %q); the redactor left it in %q", id, secret, f.RuleID, f.Match, got[max(0, len(got)-len(text)-64):])
					}
				}
			}
		}
	}
	t.Logf("%d findings of %d rules in samples of %d; %d left by the redactor", findings, len(rules), len(ids), missed)
	// Not a test that passes for want of findings.
	if len(rules) < 200 {
		t.Errorf("gitleaks found samples of only %d of its %d rules", len(rules), len(ids))
	}
}

// filler is n bytes of log lines in which gitleaks finds nothing.
func filler(n int) []byte {
	line := []byte("2026-12-02T10:00:00Z INFO step done in 12ms, 3 files read\n")
	b := bytes.Repeat(line, n/len(line)+1)
	return b[:n]
}
