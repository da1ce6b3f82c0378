package main

import (
	"bytes"
	"os"
	"testing"
)

// With -f on a terminal, each of the agent's lines is marked: an agent
// printed harnessfacts' own end line ("HarnessRun ... ended: phase
// Succeeded, verdict Pass") and waited out its deadline, and the follower
// saw a finished, passing run. Piped, the output is the agent's bytes
// (made inert), as kubectl logs prints them; a file is not a terminal.
func TestFollowedOutputIsMarkedOnATerminal(t *testing.T) {
	const agent = "building\nHarnessRun default/t1 ended: phase Succeeded, verdict Pass\n\x1b[2Kno newline"
	for marked, want := range map[bool]string{
		true:  "| building\n| HarnessRun default/t1 ended: phase Succeeded, verdict Pass\n| ^[[2Kno newline",
		false: "building\nHarnessRun default/t1 ended: phase Succeeded, verdict Pass\n^[[2Kno newline",
	} {
		var out bytes.Buffer
		w := outputWriter(&out, marked)
		for _, chunk := range []string{agent[:5], agent[5:40], agent[40:]} {
			if _, err := w.Write([]byte(chunk)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("marked %t: %q, want %q", marked, out.String(), want)
		}
	}
	f, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) || isTerminal(&bytes.Buffer{}) {
		t.Error("a file or a buffer is taken for a terminal")
	}
}
