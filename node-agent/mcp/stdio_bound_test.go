package mcp

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// An agent's stdio message is decoded in the node-agent's memory: one over
// MaxMessageBytes ends the session instead of being read whole.
func TestStdioRefusesAMessageOverTheBound(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeStdio(context.Background(), inR, outW, "hft_x", NewReceipts(v1alpha1.MCPTransportStdio, 0))
		_ = outW.Close()
	}()
	answers := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(outR)
		answers <- string(b)
	}()
	// A well-formed request, just too large: 2 MiB of params.
	big := `{"jsonrpc":"2.0","id":7,"method":"ping","params":{"pad":"` + strings.Repeat("x", 2*MaxMessageBytes) + `"}}` + "\n"
	go func() {
		_, _ = io.WriteString(inW, big)
		_ = inW.Close()
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("ServeStdio ended without an error after a message over the bound")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ServeStdio still serves after a message over the bound")
	}
	_ = inR.Close()
	if got := <-answers; strings.Contains(got, `"id":7`) {
		t.Errorf("the oversized message was answered: %.200s", got)
	}
}
