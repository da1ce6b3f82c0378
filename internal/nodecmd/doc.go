// Package nodecmd holds the node's commands, served alike by harnessfacts
// and by harnessfacts-node-agent (the node image's entry point): node-agent,
// node-cleanup, and the ones that run inside a run's sandbox (sandbox-init,
// mcp-stdio); and the flags the controller and the
// node-agent share. What it imports every node-agent links, so it imports
// nothing only the controller or the client commands need
// (cmd/harnessfacts-node-agent's test holds it to that).
package nodecmd
