package executor

import (
	"io"

	"github.com/harnessfacts/harnessfacts/node-agent/artifacts"
	"github.com/harnessfacts/harnessfacts/node-agent/mcp"
)

// collectArtifacts collects the requested files from the workspace, each
// read once and streamed: the token is looked for in what the agent wrote,
// before redaction could hide it; what is hashed and stored is redacted;
// at most artifacts.DefaultKeep of content is held in memory, whatever
// limits.maxArtifactBytes allows. tokenSeen says whether the run's MCP
// token was in one of them.
func (a *attempt) collectArtifacts() (results []artifacts.Result, tokenSeen bool) {
	watchers := map[string]*mcp.TokenWatcher{}
	opts := artifacts.Options{
		MaxBytes:     a.limits.MaxArtifactBytes,
		RedactWriter: func(w io.Writer) io.WriteCloser { return a.redactor.NewWriter(w) },
	}
	if a.mcp.token != "" {
		opts.Raw = func(path string) io.Writer {
			w := mcp.NewTokenWatcher(a.mcp.token)
			watchers[path] = w
			return w
		}
	}
	results = artifacts.Collect(a.dir.Workspace(), a.fix.Manifest.Artifacts, opts)
	for _, r := range results {
		if w := watchers[r.Path]; w != nil && r.Rejected == "" {
			tokenSeen = tokenSeen || w.Seen()
		}
	}
	return results, tokenSeen
}
