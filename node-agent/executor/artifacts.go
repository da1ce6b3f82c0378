package executor

import (
	"bytes"

	"github.com/harnessfacts/harnessfacts/node-agent/artifacts"
)

// collectArtifacts collects the requested files from the workspace, redacted,
// bounded, never following a link out. It also returns them raw, to look
// for the token in.
func (a *attempt) collectArtifacts() ([]artifacts.Result, map[string][]byte) {
	paths := a.fix.Manifest.Artifacts
	raw := artifacts.Collect(a.dir.Workspace(), paths, artifacts.Options{MaxBytes: a.limits.MaxArtifactBytes})
	// The token is looked for in what the agent wrote, before redaction
	// could hide it; what is stored is redacted.
	rawData := map[string][]byte{}
	for _, r := range raw {
		if r.Rejected == "" {
			rawData[r.Path] = r.Data
		}
	}
	redacted := artifacts.Collect(a.dir.Workspace(), paths, artifacts.Options{
		MaxBytes: a.limits.MaxArtifactBytes,
		Redact:   a.redactor.Bytes,
	})
	return redacted, rawData
}

func tokenIn(token string, data map[string][]byte) bool {
	for _, d := range data {
		if bytes.Contains(d, []byte(token)) {
			return true
		}
	}
	return false
}
