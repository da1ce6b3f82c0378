// Package runcmd is `harnessfacts run`: one HarnessRun on this machine,
// validated as the API server would, run by the node-agent's executor, its
// evidence written to a folder. Both harnessfacts binaries serve it; it
// links no Kubernetes client, so that the small one starts quickly (see
// cmd/harnessfacts).
package runcmd
