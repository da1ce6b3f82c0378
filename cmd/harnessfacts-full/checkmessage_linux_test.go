package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// A check's output that is not UTF-8 (the agent wrote a byte a check
// prints) or whose 512-byte tail is cut inside a character (a runner's 400
// check marks) is a valid UTF-8 message, and the run's own signed evidence
// verifies. Before, the receipt held the raw bytes: sealed and signed, and
// refused by its own verifier ("receipt.json: not in canonical form"), on a
// cluster by the controller's store gate too.
func TestCheckOutputOfAnyBytesLeavesVerifiableEvidence(t *testing.T) {
	for name, tc := range map[string]struct{ agent, check string }{
		"not UTF-8":    {`printf 'answer: caf\351\n' > answer.txt`, "cat answer.txt; exit 1"},
		"cut mid-rune": {"true", `i=0; while [ $i -lt 400 ]; do printf '\342\234\223'; i=$((i+1)); done; exit 1`},
	} {
		t.Run(name, func(t *testing.T) {
			base := openDir(t)
			fix := filepath.Join(base, "fixtures", "utf")
			if err := os.MkdirAll(filepath.Join(fix, "workspace"), 0o755); err != nil {
				t.Fatal(err)
			}
			files := map[string]string{
				filepath.Join(fix, "workspace", "a.txt"): "hi\n",
				filepath.Join(fix, "fixture.yaml"): "prompt: do nothing\nmcp:\n  transport: None\nchecks:\n- name: shows-answer\n" +
					"  shell: " + strconv.Quote(tc.check) + "\nlimits:\n  episodeSeconds: 60\n  probeSeconds: 20\n",
				filepath.Join(base, "run.yaml"): "apiVersion: harnessfacts.io/v1alpha1\nkind: HarnessRun\nmetadata:\n  name: utf\n  namespace: default\n" +
					"spec:\n  agent:\n    adapter: exec\n    command: [sh, -c, " + strconv.Quote(tc.agent) + "]\n  fixture:\n    configMapRef:\n      name: utf\n",
			}
			for p, c := range files {
				if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ev, key := filepath.Join(base, "ev"), filepath.Join(base, "keys", "evidence-key.pem")
			out, _ := exec.Command(harnessfactsBinary(t), "run", "-q", "-f", filepath.Join(base, "run.yaml"), "--run-root", filepath.Join(base, "runs"),
				"--evidence", ev, "--evidence-key", key, "--fixtures", filepath.Join(base, "fixtures")).CombinedOutput()
			raw, err := os.ReadFile(filepath.Join(ev, "receipt.json"))
			if err != nil {
				t.Fatalf("no evidence: %v\n%s", err, out)
			}
			var r struct {
				Checks []struct{ Message string } `json:"checks"`
			}
			if err := json.Unmarshal(raw, &r); err != nil || len(r.Checks) != 1 {
				t.Fatalf("receipt: %v %s", err, raw)
			}
			if m := r.Checks[0].Message; !utf8.ValidString(m) || strings.ContainsRune(m, utf8.RuneError) && name == "cut mid-rune" {
				t.Errorf("the check's message is not valid UTF-8 from a character's start: %q", m)
			}
			if out, err := exec.Command(harnessfactsBinary(t), "evidence", "verify", ev, "--key", strings.TrimSuffix(key, ".pem")+".pub").CombinedOutput(); err != nil {
				t.Errorf("the run's own signed evidence does not verify: %v\n%s", err, out)
			}
		})
	}
}
