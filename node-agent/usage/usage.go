// Package usage reads what a model provider says it served: the tokens
// (input, output, cache reads and writes) and the model that answered, from
// the provider's own response formats (Anthropic Messages, OpenAI Responses
// and Chat Completions, Gemini), whole JSON bodies and server-sent event
// streams alike. A Parser is fed the body as it passes (an io.Writer), so a
// stream is never held whole; a Tally sums a run's responses into the
// API's UsageStatus.
//
// Every figure is normalised to the API's meaning: inputTokens exclude the
// cache (OpenAI and Gemini count cached tokens inside their prompt figure;
// Anthropic does not), outputTokens include reasoning ("thoughts").
package usage

import (
	"bytes"
	"encoding/json"
	"mime"
	"slices"
	"strings"
	"sync"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Dialect is a provider's wire format.
type Dialect string

// The dialects the CLIs speak.
const (
	Anthropic Dialect = "anthropic"
	Responses Dialect = "responses"
	Chat      Dialect = "chat"
	Gemini    Dialect = "gemini"
)

// DialectOf names the dialect of a request path ("" when it is none of
// them): the last path segments decide, so a base URL's own prefix (a
// gateway's, a fake provider's /s/NAME) does not matter.
func DialectOf(path string) Dialect {
	switch {
	case strings.HasSuffix(path, "/v1/messages"):
		return Anthropic
	case strings.HasSuffix(path, "/responses"),
		// Compaction (Codex's remote compaction) answers with one
		// response.compaction object, its usage as a Response's: the
		// model reads the whole conversation, which is billed.
		strings.HasSuffix(path, "/responses/compact"):
		return Responses
	case strings.HasSuffix(path, "/chat/completions"):
		return Chat
	case strings.Contains(path, "/models/") &&
		(strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent")):
		return Gemini
	}
	return ""
}

// Counts are token figures.
type Counts struct {
	Input, Output, CacheRead, CacheWrite int64
}

// MaxCount is the most a count holds: the largest integer that a JSON
// number, and so the signed receipt's statement (a protobuf Struct of
// doubles), carries exactly. Figures beyond it or below zero, from a
// provider's reply or a CLI's output (which the agent can write), cannot
// be right; they are bounded rather than let them make the run's status
// (whose counts are at least 0) or its evidence fail.
const MaxCount = 1<<53 - 1

// Add adds o to c, each count bounded to [0, MaxCount].
func (c *Counts) Add(o Counts) {
	c.Input = boundedSum(c.Input, o.Input)
	c.Output = boundedSum(c.Output, o.Output)
	c.CacheRead = boundedSum(c.CacheRead, o.CacheRead)
	c.CacheWrite = boundedSum(c.CacheWrite, o.CacheWrite)
}

func boundedSum(a, b int64) int64 {
	a, b = min(max(a, 0), MaxCount), min(max(b, 0), MaxCount)
	return min(a+b, MaxCount) // no overflow: both at most 2^53
}

// Total is every token of c (at most 2^55: no overflow).
func (c Counts) Total() int64 { return c.Input + c.Output + c.CacheRead + c.CacheWrite }

// Reply is what one response said it served.
type Reply struct {
	Counts
	// Model is the model the provider said answered ("" when it did not say).
	Model string
	// Found: the response carried usage figures.
	Found bool
	// Failed: the response carried an error (an error event in a stream,
	// a failed response): the provider did not serve a whole answer.
	Failed bool
}

// maxJSONBody bounds a whole (not streamed) body the parser keeps to decode;
// a larger one is passed on, uncounted. maxEventBytes bounds one SSE event.
const (
	maxJSONBody   = 4 << 20
	maxEventBytes = 4 << 20
)

// Parser reads one response body as it is written to it. It never fails a
// write: a body it cannot read is passed on all the same and counts nothing.
type Parser struct {
	d     Dialect
	sse   bool
	reply Reply
	// final: the figures are the answer's closing ones (Final).
	final bool

	// whole JSON: the body so far; over maxJSONBody it is dropped.
	body     bytes.Buffer
	overflow bool

	// SSE: the line being read and the current event's data.
	line      []byte
	data      []byte
	skipEvent bool
}

// NewParser returns a parser for a response of dialect d with the given
// Content-Type: text/event-stream is read as events, anything else as one
// JSON document (an object, or an array of them as Gemini's plain stream is).
func NewParser(d Dialect, contentType string) *Parser {
	return &Parser{d: d, sse: IsEventStream(contentType)}
}

// IsEventStream says whether a Content-Type is server-sent events.
func IsEventStream(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}

// Write feeds the next bytes of the body.
func (p *Parser) Write(b []byte) (int, error) {
	n := len(b)
	if !p.sse {
		if !p.overflow {
			if p.body.Len()+len(b) > maxJSONBody {
				p.overflow = true
				p.body = bytes.Buffer{}
			} else {
				p.body.Write(b)
			}
		}
		return n, nil
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.appendLine(b)
			break
		}
		p.appendLine(b[:i])
		p.endLine()
		b = b[i+1:]
	}
	return n, nil
}

func (p *Parser) appendLine(b []byte) {
	if len(p.line)+len(b) > maxEventBytes {
		p.skipEvent = true
		p.line = p.line[:0]
		return
	}
	p.line = append(p.line, b...)
}

// endLine takes one SSE line: "data:" lines join into the event's data, an
// empty line ends the event; other fields (event:, id:, comments) are not
// needed, since every dialect names its event type in the data too.
func (p *Parser) endLine() {
	line := bytes.TrimSuffix(p.line, []byte("\r"))
	defer func() { p.line = p.line[:0] }()
	if len(line) == 0 {
		p.dispatch()
		return
	}
	if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
		v = bytes.TrimPrefix(v, []byte(" "))
		if len(p.data)+len(v)+1 > maxEventBytes {
			p.skipEvent = true
			return
		}
		if len(p.data) > 0 {
			p.data = append(p.data, '\n')
		}
		p.data = append(p.data, v...)
	}
}

func (p *Parser) dispatch() {
	data, skip := p.data, p.skipEvent
	p.data, p.skipEvent = p.data[:0], false
	if skip || len(data) == 0 || data[0] != '{' {
		return // [DONE], a cut event, a keep-alive
	}
	// Only events that can carry usage, an error or the model are
	// decoded: a long stream is mostly text deltas.
	if !bytes.Contains(data, []byte(`usage`)) && !bytes.Contains(data, []byte(`"error"`)) &&
		(p.reply.Model != "" || !bytes.Contains(data, []byte(`"model`))) {
		return
	}
	p.event(data)
}

// Result is what the body said, once it has been written whole (or as much
// of it as arrived: a cut stream counts the events that arrived).
func (p *Parser) Result() Reply {
	if !p.sse && !p.overflow && p.body.Len() > 0 {
		b := bytes.TrimSpace(p.body.Bytes())
		p.body = bytes.Buffer{}
		if len(b) > 0 && b[0] == '[' {
			var arr []json.RawMessage
			if json.Unmarshal(b, &arr) == nil {
				for _, e := range arr {
					p.event(e)
				}
			}
		} else {
			p.event(b)
		}
	}
	if p.sse && len(p.line) > 0 {
		p.endLine()
	}
	if p.sse && len(p.data) > 0 {
		p.dispatch()
	}
	return p.reply
}

// Final says whether the figures of Result are the answer's closing ones:
// not only an Anthropic stream's message_start (its input, and its first
// output token), so that a stream cut before its message_delta, whose
// output no figure counts, is told from a counted one. A Gemini stream's
// figures are its total so far, final wherever it is cut.
func (p *Parser) Final() bool { return p.final }

// event reads one JSON object: a whole response or one streamed event. Each
// dialect's figures are cumulative within a response, so a later event's
// replace an earlier one's.
func (p *Parser) event(data []byte) {
	switch p.d {
	case Anthropic:
		p.anthropic(data)
	case Responses:
		p.responses(data)
	case Chat:
		p.chat(data)
	case Gemini:
		p.gemini(data)
	}
}

type anthropicUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
}

// set takes the figures u has; message_delta carries only some of them.
func (u *anthropicUsage) setInto(r *Reply) {
	if u == nil {
		return
	}
	r.Found = true
	for _, f := range []struct {
		v   *int64
		dst *int64
	}{{u.InputTokens, &r.Input}, {u.OutputTokens, &r.Output}, {u.CacheReadInputTokens, &r.CacheRead}, {u.CacheCreationInputTokens, &r.CacheWrite}} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
}

// anthropic: a Message object (type "message"), or the stream's
// message_start (the message with its usage so far) and message_delta
// (cumulative usage: output, and in newer streams input and cache too).
func (p *Parser) anthropic(data []byte) {
	var ev struct {
		Type    string          `json:"type"`
		Model   string          `json:"model"`
		Usage   *anthropicUsage `json:"usage"`
		Message *struct {
			Model string          `json:"model"`
			Usage *anthropicUsage `json:"usage"`
		} `json:"message"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if ev.Type == "error" {
		p.reply.Failed = true
	}
	switch ev.Type {
	case "message":
		p.setModel(ev.Model)
		ev.Usage.setInto(&p.reply)
		p.final = p.reply.Found
	case "message_start":
		if ev.Message != nil {
			p.setModel(ev.Message.Model)
			ev.Message.Usage.setInto(&p.reply)
		}
	case "message_delta":
		ev.Usage.setInto(&p.reply)
		p.final = p.reply.Found
	}
}

type openAIUsage struct {
	// Responses
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	// Chat Completions
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// responses: a Response object, or the stream's terminal events
// (response.completed, .incomplete, .failed) holding it.
func (p *Parser) responses(data []byte) {
	type response struct {
		Object string          `json:"object"`
		Model  string          `json:"model"`
		Usage  *openAIUsage    `json:"usage"`
		Error  json.RawMessage `json:"error"`
	}
	var ev struct {
		response
		Type     string    `json:"type"`
		Response *response `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	r := &ev.response
	if ev.Response != nil {
		r = ev.Response
	}
	if ev.Type == "error" || ev.Type == "response.failed" || isSet(r.Error) {
		p.reply.Failed = true
	}
	p.setModel(r.Model)
	if u := r.Usage; u != nil {
		cached := int64(0)
		if u.InputTokensDetails != nil {
			cached = u.InputTokensDetails.CachedTokens
		}
		p.reply.Found, p.final = true, true
		p.reply.Counts = Counts{Input: nonNegative(u.InputTokens - cached), Output: u.OutputTokens, CacheRead: cached}
	}
}

// chat: a chat.completion object, or the stream's chunks, the last of which
// carries the usage (stream_options.include_usage).
func (p *Parser) chat(data []byte) {
	var ev struct {
		Model string          `json:"model"`
		Usage *openAIUsage    `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if isSet(ev.Error) {
		p.reply.Failed = true
	}
	p.setModel(ev.Model)
	if u := ev.Usage; u != nil {
		cached := int64(0)
		if u.PromptTokensDetails != nil {
			cached = u.PromptTokensDetails.CachedTokens
		}
		p.reply.Found, p.final = true, true
		p.reply.Counts = Counts{Input: nonNegative(u.PromptTokens - cached), Output: u.CompletionTokens, CacheRead: cached}
	}
}

// gemini: a GenerateContentResponse, whole or one chunk of a stream; each
// chunk's usageMetadata is the total so far.
func (p *Parser) gemini(data []byte) {
	var ev struct {
		ModelVersion  string `json:"modelVersion"`
		UsageMetadata *struct {
			PromptTokenCount        int64 `json:"promptTokenCount"`
			CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
			CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
			ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
			ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
		} `json:"usageMetadata"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if isSet(ev.Error) {
		p.reply.Failed = true
	}
	p.setModel(ev.ModelVersion)
	if u := ev.UsageMetadata; u != nil {
		p.reply.Found, p.final = true, true
		p.reply.Counts = Counts{
			Input:     nonNegative(u.PromptTokenCount + u.ToolUsePromptTokenCount - u.CachedContentTokenCount),
			Output:    u.CandidatesTokenCount + u.ThoughtsTokenCount,
			CacheRead: u.CachedContentTokenCount,
		}
	}
}

func (p *Parser) setModel(m string) {
	if m != "" && p.reply.Model == "" {
		p.reply.Model = m
	}
}

func nonNegative(v int64) int64 { return max(v, 0) }

// isSet: a JSON value other than null.
func isSet(v json.RawMessage) bool {
	return len(v) > 0 && !bytes.Equal(v, []byte("null"))
}

// maxModels is UsageStatus.models' bound.
const maxModels = 8

// Tally sums a run's replies; it is safe for concurrent use.
type Tally struct {
	mu       sync.Mutex
	requests int64
	counts   Counts
	// uncounted are the replies that carried no figures.
	uncounted int64
	models    []string
	// byModel splits counts by the model the reply named ("" for none),
	// for pricing.
	byModel map[string]Counts
}

// Request counts one request to the provider.
func (t *Tally) Request() {
	t.mu.Lock()
	t.requests++
	t.mu.Unlock()
}

// Add adds one reply's figures and model; a reply that carried no figures
// is counted as such.
func (t *Tally) Add(r Reply) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !r.Found {
		t.uncounted++
	}
	t.counts.Add(r.Counts)
	if r.Counts != (Counts{}) {
		if t.byModel == nil {
			t.byModel = map[string]Counts{}
		}
		c := t.byModel[r.Model]
		c.Add(r.Counts)
		t.byModel[r.Model] = c
	}
	if m := r.Model; m != "" && len(t.models) < maxModels && !slices.Contains(t.models, m) {
		t.models = append(t.models, truncate(m, 256))
	}
}

// ByModel is the figures so far split by the model each reply named (""
// for replies that named none), in order of the models' names.
func (t *Tally) ByModel() []ModelCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ModelCounts, 0, len(t.byModel))
	for m, c := range t.byModel {
		out = append(out, ModelCounts{Model: m, Counts: c})
	}
	slices.SortFunc(out, func(a, b ModelCounts) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// ModelCounts are one model's figures.
type ModelCounts struct {
	Model string
	Counts
}

// Requests is the number of requests so far.
func (t *Tally) Requests() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.requests
}

// Counts are the figures so far.
func (t *Tally) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts
}

// Status is the tally as the API's UsageStatus, from source, for a run that
// asked for modelRequested.
func (t *Tally) Status(source harnessv1.UsageSource, modelRequested string) *harnessv1.UsageStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return &harnessv1.UsageStatus{
		Source: source, ModelRequested: truncate(modelRequested, 256), Models: slices.Clone(t.models),
		Requests: t.requests, UncountedResponses: t.uncounted, InputTokens: t.counts.Input, OutputTokens: t.counts.Output,
		CacheReadTokens: t.counts.CacheRead, CacheWriteTokens: t.counts.CacheWrite,
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
