package adapters

import (
	"bufio"
	"bytes"
	"encoding/json"
	"slices"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// AgentUsage is what a CLI's own output says the provider served: the
// fallback source of status.usage, for runs the model gateway does not
// serve. The agent wrote these figures, so they are only as trustworthy as
// the agent.
type AgentUsage struct {
	usage.Counts
	// Models are the models the output names, in order of appearance.
	Models []string
}

// UsageReader is implemented by adapters whose CLI reports usage in its
// structured output. Usage reads the run's redacted log (stderr mixed in,
// the end perhaps cut off) and says whether it found any figures.
type UsageReader interface {
	Usage(log []byte) (AgentUsage, bool)
}

// jsonLines calls f with each line of log that is a JSON object of at
// most maxLineValues values (see eventLine).
func jsonLines(log []byte, f func(line []byte)) {
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); eventLine(line) {
			f(line)
		}
	}
}

// maxLineValues bounds the JSON values of one line of the log the
// adapters decode. The agent writes the log: decoded into the events'
// structs, an array of tiny values ("0," or "{},") becomes one element of
// up to some 150 bytes each, a hundred times the line, and a line of the
// 8 MiB a run prints by default took the node-agent over 1.4 GiB, past
// its pod's memory bound (every run of the node lost with it). A CLI's
// event holds tens of values, a tool's input or result hundreds at most
// (texts are one string each); a line of more is left out, as a line that
// is not JSON is.
const maxLineValues = 1 << 16

// eventLine says whether line is a JSON object the adapters may decode:
// it starts with '{' and holds at most maxLineValues values, counted
// (within a bound) by its separators and openings outside strings.
func eventLine(line []byte) bool {
	if len(line) == 0 || line[0] != '{' {
		return false
	}
	if len(line) <= maxLineValues {
		return true // fewer bytes than the bound: fewer values
	}
	n := 0
	inString, escaped := false, false
	for _, c := range line {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ',' || c == '[' || c == '{':
			if n++; n > maxLineValues {
				return false
			}
		}
	}
	return true
}

func (u *AgentUsage) addModel(m string) {
	if m != "" && m != "<synthetic>" && len(u.Models) < 8 && !slices.Contains(u.Models, m) {
		u.Models = append(u.Models, m)
	}
}

// Usage reads Claude Code's stream-json: the result event (the last line
// of a finished run) totals the session; a log cut before it sums the
// assistant events' usage, one per message id (a reply's content blocks
// repeat its message and usage).
func (ClaudeCode) Usage(log []byte) (AgentUsage, bool) {
	type claudeUsage struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	}
	counts := func(u *claudeUsage) usage.Counts {
		return usage.Counts{Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CacheReadInputTokens, CacheWrite: u.CacheCreationInputTokens}
	}
	var out AgentUsage
	var result *usage.Counts
	perMessage := map[string]usage.Counts{}
	var order []string
	jsonLines(log, func(line []byte) {
		var ev struct {
			Type    string       `json:"type"`
			Usage   *claudeUsage `json:"usage"`
			Message *struct {
				ID    string       `json:"id"`
				Model string       `json:"model"`
				Usage *claudeUsage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		switch ev.Type {
		case "assistant":
			if m := ev.Message; m != nil && m.Model != "<synthetic>" {
				out.addModel(m.Model)
				if m.Usage != nil {
					if _, ok := perMessage[m.ID]; !ok {
						order = append(order, m.ID)
					}
					perMessage[m.ID] = counts(m.Usage)
				}
			}
		case "result":
			if ev.Usage != nil {
				c := counts(ev.Usage)
				result = &c
			}
		}
	})
	switch {
	case result != nil:
		out.Counts = *result
	case len(order) > 0:
		for _, id := range order {
			out.Add(perMessage[id])
		}
	default:
		return out, false
	}
	return out, true
}

// Usage reads Codex's --json events: each turn.completed carries the
// turn's usage, whose input_tokens include the cached ones.
func (Codex) Usage(log []byte) (AgentUsage, bool) {
	var out AgentUsage
	found := false
	jsonLines(log, func(line []byte) {
		var ev struct {
			Type  string `json:"type"`
			Usage *struct {
				InputTokens       int64 `json:"input_tokens"`
				CachedInputTokens int64 `json:"cached_input_tokens"`
				OutputTokens      int64 `json:"output_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(line, &ev) != nil || ev.Type != "turn.completed" || ev.Usage == nil {
			return
		}
		found = true
		out.Add(usage.Counts{Input: max(ev.Usage.InputTokens-ev.Usage.CachedInputTokens, 0), Output: ev.Usage.OutputTokens, CacheRead: ev.Usage.CachedInputTokens})
	})
	return out, found
}

// Usage reads Gemini CLI's stream-json result event: its stats total the
// session ("input" is the prompt without the cache, "cached" the cache,
// per model under "models"). Its output_tokens leave out the model's
// thoughts, which Gemini bills as output and counts in total_tokens: the
// output is what the total holds beyond the prompt (geminiOutput), as the
// gateway counts it from the provider's own figures.
func (Gemini) Usage(log []byte) (AgentUsage, bool) {
	var out AgentUsage
	found := false
	jsonLines(log, func(line []byte) {
		var ev struct {
			Type  string `json:"type"`
			Stats *struct {
				OutputTokens int64                      `json:"output_tokens"`
				InputTokens  int64                      `json:"input_tokens"`
				TotalTokens  int64                      `json:"total_tokens"`
				Cached       int64                      `json:"cached"`
				Input        int64                      `json:"input"`
				Models       map[string]json.RawMessage `json:"models"`
			} `json:"stats"`
		}
		if json.Unmarshal(line, &ev) != nil || ev.Type != "result" || ev.Stats == nil {
			return
		}
		found = true
		out.Counts = usage.Counts{Input: ev.Stats.Input, Output: geminiOutput(ev.Stats.OutputTokens, ev.Stats.InputTokens, ev.Stats.TotalTokens), CacheRead: ev.Stats.Cached}
		models := make([]string, 0, len(ev.Stats.Models))
		for m := range ev.Stats.Models {
			models = append(models, m)
		}
		slices.Sort(models)
		for _, m := range models {
			out.addModel(m)
		}
	})
	return out, found
}

// openCodeTokens is the tokens object of OpenCode's step_finish events,
// read by both its usage and its trajectory.
type openCodeTokens struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	Reasoning int64 `json:"reasoning"`
	Cache     struct {
		Read  int64 `json:"read"`
		Write int64 `json:"write"`
	} `json:"cache"`
}

// Usage reads OpenCode's --format json events: each step_finish part
// carries its step's tokens.
func (OpenCode) Usage(log []byte) (AgentUsage, bool) {
	var out AgentUsage
	found := false
	jsonLines(log, func(line []byte) {
		var ev struct {
			Type string `json:"type"`
			Part struct {
				Tokens *openCodeTokens `json:"tokens"`
			} `json:"part"`
		}
		if json.Unmarshal(line, &ev) != nil || ev.Type != "step_finish" || ev.Part.Tokens == nil {
			return
		}
		found = true
		tk := ev.Part.Tokens
		out.Add(usage.Counts{Input: tk.Input, Output: tk.Output + tk.Reasoning, CacheRead: tk.Cache.Read, CacheWrite: tk.Cache.Write})
	})
	return out, found
}

var (
	_ UsageReader = ClaudeCode{}
	_ UsageReader = Codex{}
	_ UsageReader = Gemini{}
	_ UsageReader = OpenCode{}
)

// RequestedModel is the model a run asks for: spec.agent.model, else the
// adapter's default where it names one (the CLI's own default otherwise,
// which the adapter does not know: "").
func RequestedModel(adapter harnessv1.Adapter, model string) string {
	if model != "" {
		return model
	}
	switch adapter {
	case harnessv1.AdapterCodex:
		return CodexDefaultModel
	case harnessv1.AdapterGemini:
		return GeminiDefaultModel
	}
	return ""
}

// geminiOutput is a Gemini CLI session's output tokens, its thoughts
// included: what total_tokens holds beyond the prompt (input_tokens, the
// cache included), never less than output_tokens.
func geminiOutput(output, input, total int64) int64 {
	return max(output, total-input)
}
