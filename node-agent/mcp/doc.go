// Package mcp is a run's MCP token server: one tool, get_token, that hands
// the agent the run's random token. The token appearing in the agent's
// output or artifacts (TokenSeen) proves the agent really called the tool.
//
// HTTP (StartHTTP): MCP streamable HTTP on 127.0.0.1 only, a random port and
// an unpredictable per-run path (Server.URL); any other path is 404. Every
// request is checked before the MCP SDK sees it:
//   - Origin: absent or a loopback origin (http://127.0.0.1:*, localhost,
//     [::1]) is allowed; any other Origin (a web page the agent browses) is 403.
//   - Host: only 127.0.0.1:<port> or localhost:<port> (the listener's port
//     or Options.ExtraPorts); anything else (DNS rebinding) is 403.
//   - Body: larger than Options.MaxBodyBytes is 413; a JSON-RPC batch (an
//     array) is 400.
//
// A run's calls decoded and not yet answered are MaxCallsInFlight over all
// its HTTP connections or stdio sessions (Calls): more wait.
//
// Shutdown the server when the run ends.
//
// Stdio (ServeStdio): the same tool over newline-delimited JSON-RPC. The
// node-agent serves it on the run's stdio MCP socket, a 0600 socket of the
// run's uid; the agent's stdio MCP command, `harnessfacts mcp-stdio` inside
// the sandbox, connects to it. The token reaches the sandbox only as the
// tool's answer, and the calls are recorded by the node-agent, where the
// agent cannot forge or erase them.
//
// The adapters hand the endpoint to each CLI in its own MCP settings; the
// exec adapter in the environment (node-agent/adapters/exec.go):
//
//	HARNESSFACTS_MCP_URL      HTTP: the endpoint, http://127.0.0.1:<port>/<secret path>
//	HARNESSFACTS_MCP_COMMAND  Stdio: a JSON array, the argv serving MCP on stdio
//
// Every call, answered or refused, becomes a Receipt (time, transport, tool,
// outcome). Calls beyond Options.MaxCalls (the run's limits.maxDecisions)
// are refused with a tool error and still counted.
package mcp
