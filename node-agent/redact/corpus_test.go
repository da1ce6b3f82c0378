package redact

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// corpus makes n bytes of text like an agent's output: logs, code, JSON
// events and prose, with hashes and paths, and no secrets.
func corpus(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the agent reads file edits function returns error value test passes build step config server client request response handler token budget model turn tool call result output key they money")
	var b strings.Builder
	for b.Len() < n {
		switch rng.IntN(5) {
		case 0:
			fmt.Fprintf(&b, "2026-11-30T11:%02d:%02dZ INFO tool_call name=read_file path=src/pkg%d/main.go bytes=%d\n", rng.IntN(60), rng.IntN(60), rng.IntN(100), rng.IntN(100000))
		case 1:
			fmt.Fprintf(&b, "func (s *Server) handle%d(w http.ResponseWriter, r *http.Request) error { return s.next(w, r) }\n", rng.IntN(1000))
		case 2:
			fmt.Fprintf(&b, `{"type":"assistant","message":{"content":[{"type":"text","text":"I will %s the %s now."}]},"usage":{"input_tokens":%d}}`+"\n", words[rng.IntN(len(words))], words[rng.IntN(len(words))], rng.IntN(9999))
		case 3:
			for i := 0; i < 12; i++ {
				b.WriteString(words[rng.IntN(len(words))])
				b.WriteByte(' ')
			}
			b.WriteString("done.\n")
		default:
			fmt.Fprintf(&b, "commit %016x%016x: tests passed in %d.%03ds\n", rng.Uint64(), rng.Uint64(), rng.IntN(60), rng.IntN(1000))
		}
	}
	return b.String()[:n]
}
