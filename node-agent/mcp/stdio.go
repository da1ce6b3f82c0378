package mcp

import (
	"context"
	"errors"
	"io"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// MaxMessageBytes bounds one JSON-RPC message read from the agent, on
// every transport.
const MaxMessageBytes = 1 << 20

// ServeStdio serves the token server over newline-delimited JSON-RPC on in
// and out (a stdio MCP server) until the client closes in or ctx ends. Each
// call is recorded with rec. The node-agent serves it on the run's stdio
// MCP socket, which `harnessfacts mcp-stdio`, the agent's stdio MCP
// command inside the sandbox, connects to: the token never enters the
// sandbox, and the receipts stay in the node-agent, where the agent cannot
// forge or erase them. A client that hangs up is a normal end (nil).
func ServeStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser, token string, rec Recorder) error {
	s := newMCPServer(token, v1alpha1.MCPTransportStdio, rec)
	// The SDK's own bound is 16 MiB a message: a get_token call is a few
	// hundred bytes, and every byte of a message sits in the node-agent's
	// memory while it is decoded.
	err := s.Run(ctx, &sdk.IOTransport{Reader: in, Writer: out, MaxLineLength: MaxMessageBytes})
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
