package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// HeaderTransport is set by BridgeStdio on what it forwards, so that the
// server records those calls as Stdio. It is a label for receipts only: it
// grants nothing.
const HeaderTransport = "Harnessfacts-Mcp-Transport"

// MaxMessageBytes bounds one JSON-RPC message read from the agent, on
// every transport.
const MaxMessageBytes = 1 << 20

const maxMessage = MaxMessageBytes

// BridgeStdio is a stdio MCP server for the agent that forwards every
// message to the run's HTTP token server at url and writes the answers
// back: run it as the agent's stdio MCP command inside the sandbox (for
// example `harnessfacts mcp-stdio`, given HARNESSFACTS_MCP_URL). The token
// then never has to be put in the sandbox, and the calls are recorded by
// the node-agent's own server (as transport Stdio), which the agent cannot
// forge. It returns nil when in ends. client may be nil.
func BridgeStdio(ctx context.Context, in io.Reader, out io.Writer, url string, client *http.Client) error {
	if client == nil {
		client = http.DefaultClient
	}
	rd := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := readLine(rd)
		if len(bytes.TrimSpace(line)) > 0 {
			if ferr := forward(ctx, client, url, line, out); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readLine reads one newline-terminated message of at most maxMessage bytes.
func readLine(rd *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := rd.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxMessage {
			return nil, fmt.Errorf("an MCP message longer than %d bytes", maxMessage)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func forward(ctx context.Context, client *http.Client, url string, msg []byte, out io.Writer) error {
	var head struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(msg, &head)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(msg))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(HeaderTransport, "Stdio")
	resp, err := client.Do(req)
	if err != nil {
		return reply(out, head.ID, fmt.Sprintf("the MCP token server cannot be reached: %v", err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
	if err != nil {
		return reply(out, head.ID, fmt.Sprintf("reading the MCP token server's answer: %v", err))
	}
	if resp.StatusCode/100 != 2 {
		return reply(out, head.ID, fmt.Sprintf("the MCP token server answered %s: %s", resp.Status, strings.TrimSpace(string(body))))
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 { // a notification: nothing to answer
		return nil
	}
	_, err = out.Write(append(body, '\n'))
	return err
}

// reply writes a JSON-RPC error for a request (a notification gets none).
func reply(out io.Writer, id json.RawMessage, msg string) error {
	if len(id) == 0 || string(id) == "null" {
		return nil
	}
	b, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"error":   map[string]any{"code": -32603, "message": msg},
	})
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}
