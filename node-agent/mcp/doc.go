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
//   - Body: larger than Options.MaxBodyBytes is 413.
//
// Shutdown the server when the run ends.
//
// Stdio. Two ways, both giving the same tool and the same Receipt format:
//
//   - BridgeStdio (recommended): the agent's stdio MCP command (a future
//     `harnessfacts mcp-stdio` subcommand run inside the sandbox with
//     HARNESSFACTS_MCP_URL) forwards each JSON-RPC line to the run's HTTP
//     server. The token never enters the sandbox, and the calls are
//     recorded by the node-agent's own server, labelled Stdio, where the
//     agent cannot forge or erase them.
//   - ServeStdio: the whole server over stdin/stdout in the stdio process
//     itself, for when no HTTP server can be reached. That process is not
//     the node-agent, so it reports its calls through a receipt file: a
//     FileRecorder appends one JSON line per call to a file in the run dir,
//     read back by the node-agent with ReadReceiptFile after the agent
//     exits. The token must then reach that process (through a file or an
//     inherited descriptor, never its command line, which is world-readable
//     on a node); if it runs in the sandbox, the agent could read that file
//     or edit the receipts, so prefer the bridge there.
//
// Environment the node-agent gives the agent (see Env):
//
//	HARNESSFACTS_MCP_TRANSPORT   None, HTTP or Stdio
//	HARNESSFACTS_MCP_URL         HTTP: the endpoint, http://127.0.0.1:<port>/mcp/<secret>
//
// Every call, answered or refused, becomes a Receipt (time, transport, tool,
// outcome). Calls beyond Options.MaxCalls (the run's limits.maxDecisions)
// are refused with a tool error and still counted.
package mcp
