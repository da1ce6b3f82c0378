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
	"fmt"
	"math"
	"mime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

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
	// Unread: an event or a whole body was too large to read (over
	// maxEventBytes or maxJSONBody, or past the parser's Budget), so
	// figures it held were not counted.
	Unread bool
}

// maxJSONBody bounds a whole (not streamed) body the parser keeps to decode;
// a larger one is passed on, uncounted. maxEventBytes bounds one SSE event's
// data.
const (
	maxJSONBody   = 4 << 20
	maxEventBytes = 4 << 20
)

// keptBuffer is the most a parser keeps between events, and what it holds
// without its Budget: a provider's usage events are a few KiB, so they are
// read whatever a run's other answers hold. A larger buffer goes back to
// the Budget once its event is read.
const keptBuffer = 64 << 10

// charged is what a buffer of capacity c takes of a Budget.
func charged(c int) int64 { return int64(max(c-keptBuffer, 0)) }

// Budget bounds the bytes a run's parsers hold at once beyond keptBuffer
// each, whatever its answers are: a provider that streams events of
// megabytes on each of a run's streams at once (a run author's own
// provider) would otherwise hold maxEventBytes of the node-agent's memory
// per stream. An event or body that would take a parser past it is passed
// on unread (Reply.Unread), as one over maxEventBytes is. Safe for
// concurrent use.
type Budget struct{ left atomic.Int64 }

// NewBudget returns a budget of n bytes.
func NewBudget(n int64) *Budget {
	b := &Budget{}
	b.left.Store(n)
	return b
}

// Take takes n bytes of the budget, if it has them; a nil Budget has
// every byte.
func (b *Budget) Take(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	if b.left.Add(-n) >= 0 {
		return true
	}
	b.left.Add(n)
	return false
}

// Give gives back n bytes taken.
func (b *Budget) Give(n int64) {
	if b != nil && n > 0 {
		b.left.Add(n)
	}
}

// Left is what the budget has not given out.
func (b *Budget) Left() int64 { return b.left.Load() }

// Parser reads one response body as it is written to it. It never fails a
// write: a body it cannot read is passed on all the same and counts nothing.
type Parser struct {
	d   Dialect
	sse bool
	// sniffed: whether the body is events or JSON is settled (by its
	// Content-Type, else by its first byte that is not white space).
	sniffed bool
	// bom: how many bytes of a leading byte-order mark were skipped.
	bom    int
	reply  Reply
	budget *Budget
	// final: the figures are the answer's closing ones (Final).
	final bool
	// ended: a Gemini answer's end has been read (a candidate's
	// finishReason, or the prompt's blockReason): figures read from then
	// on are its totals.
	ended bool

	// whole JSON: the body so far; over maxJSONBody (or the budget) it is
	// dropped.
	body     []byte
	overflow bool

	// SSE: the current event's data, written into it as each "data:"
	// line arrives: a line is held only as far as its field name.
	data      []byte
	skipEvent bool
	// field holds a line's first bytes until they tell whether it is a
	// data line (fieldDone); then dataLine says whether the rest goes to
	// data.
	field     []byte
	fieldDone bool
	dataLine  bool
	// afterCR: the last line ended in a CR, so an LF first in the next
	// write belongs to that end.
	afterCR bool
}

// NewParser returns a parser for a response of dialect d with the given
// Content-Type: text/event-stream is read as events; any other body is read
// as one JSON document (an object, or an array of them as Gemini's plain
// stream is) when it starts with { or [, else as events. A provider may
// stream events under another type or none (a web framework's streamed
// response has none unless told), and every CLI reads them as events all
// the same, since it asked for a stream: so must the count. JSON never
// starts with an event stream's field name or colon. Its buffers are taken
// from budget (nil: unbounded but for maxEventBytes and maxJSONBody) and
// given back by Result.
func NewParser(d Dialect, contentType string, budget *Budget) *Parser {
	sse := IsEventStream(contentType)
	return &Parser{d: d, sse: sse, sniffed: sse, budget: budget}
}

// IsEventStream says whether a Content-Type is server-sent events.
func IsEventStream(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}

// grow makes room for n more bytes in buf, within limit, taking what a
// larger buffer needs from the budget; false when it cannot.
func (p *Parser) grow(buf []byte, n, limit int) ([]byte, bool) {
	need := len(buf) + n
	if need > limit {
		return buf, false
	}
	if need <= cap(buf) {
		return buf, true
	}
	// Doubling while small, then by a quarter, as append does: a buffer
	// near its budget is not doubled past it by its event's last bytes.
	c := max(need, 2*cap(buf), 512)
	if cap(buf) >= keptBuffer {
		c = max(need, cap(buf)+cap(buf)/4)
	}
	c = min(c, limit)
	if !p.budget.Take(charged(c) - charged(cap(buf))) {
		return buf, false
	}
	nb := make([]byte, len(buf), c)
	copy(nb, buf)
	return nb, true
}

// drop gives buf's bytes back to the budget.
func (p *Parser) drop(buf []byte) []byte {
	p.budget.Give(charged(cap(buf)))
	return nil
}

// Write feeds the next bytes of the body.
func (p *Parser) Write(b []byte) (int, error) {
	n := len(b)
	if !p.sniffed {
		// White space before the first byte is nothing to either: JSON
		// allows it, and in an event stream empty lines end no event.
		// A byte-order mark is no part of the JSON (a server that wrote
		// its answer as UTF-8 "with signature"): JSON decoding refuses it.
		// It may come a byte at a time.
		b = bytes.TrimLeft(b, " \t\r\n")
		for p.bom < len(utf8BOM) && len(b) > 0 && b[0] == utf8BOM[p.bom] {
			p.bom, b = p.bom+1, b[1:]
		}
		b = bytes.TrimLeft(b, " \t\r\n")
		if len(b) == 0 {
			return n, nil
		}
		p.sniffed, p.sse = true, b[0] != '{' && b[0] != '['
	}
	if !p.sse {
		if !p.overflow {
			var ok bool
			if p.body, ok = p.grow(p.body, len(b), maxJSONBody); ok {
				p.body = append(p.body, b...)
			} else {
				// Its figures cannot be read: none read before it
				// (an earlier chunk's) is the answer's last.
				p.overflow, p.reply.Unread, p.final = true, true, false
				p.body = p.drop(p.body)
			}
		}
		return n, nil
	}
	for len(b) > 0 {
		if p.afterCR {
			// A CR ended the last line: an LF right after it is part of
			// that line's end (CRLF), not an empty line of its own.
			p.afterCR = false
			if b[0] == '\n' {
				b = b[1:]
				continue
			}
		}
		i := lineEnd(b)
		if i < 0 {
			p.appendLine(b)
			break
		}
		p.appendLine(b[:i])
		p.endLine()
		p.afterCR = b[i] == '\r'
		b = b[i+1:]
	}
	return n, nil
}

// lineEnd is the index of the first CR or LF in b, -1 when there is none:
// an event stream's lines end in CRLF, LF or a lone CR (the HTML standard's
// event stream format; every SDK of the CLIs reads all three).
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	return i
}

// dataField is what a data line starts with; one space after it is no
// part of the value.
var dataField = []byte("data:")

// appendLine takes the next bytes of a line: its first ones into field,
// until they tell a data line, whose value then goes to data.
func (p *Parser) appendLine(b []byte) {
	if !p.fieldDone {
		k := min(len(b), len(dataField)+1-len(p.field))
		p.field = append(p.field, b[:k]...)
		b = b[k:]
		if len(p.field) < len(dataField)+1 {
			return // the line may still be a data line, or empty
		}
		p.fieldDone, p.dataLine = true, bytes.HasPrefix(p.field, dataField)
		if p.dataLine {
			p.startValue(bytes.TrimPrefix(p.field[len(dataField):], []byte(" ")))
		}
	}
	if p.dataLine {
		p.appendValue(b)
	}
}

// startValue begins a data line's value: data lines join with a newline.
func (p *Parser) startValue(v []byte) {
	if len(p.data) > 0 {
		p.appendValue([]byte{'\n'})
	}
	p.appendValue(v)
}

func (p *Parser) appendValue(v []byte) {
	if p.skipEvent || len(v) == 0 {
		return
	}
	var ok bool
	if p.data, ok = p.grow(p.data, len(v), maxEventBytes); !ok {
		// An event too large to read may carry the closing figures
		// (Gemini's and Chat's last chunk carry the totals): what was
		// read before it is final no longer, until a later event's
		// figures are read.
		p.skipEvent, p.reply.Unread, p.final = true, true, false
		p.data = p.drop(p.data)
		return
	}
	p.data = append(p.data, v...)
}

// endLine ends one SSE line (its CR or LF not part of it): "data:" lines
// join into the event's data, an empty line ends the event; other fields
// (event:, id:, retry:, comments) are not needed, since every dialect names
// its event type in the data too.
func (p *Parser) endLine() {
	field, fieldDone := p.field, p.fieldDone
	p.field, p.fieldDone, p.dataLine = p.field[:0], false, false
	switch {
	case !fieldDone && len(field) == 0:
		p.dispatch()
	case !fieldDone && bytes.HasPrefix(field, dataField):
		// A short data line, ended before its sixth byte.
		p.startValue(bytes.TrimPrefix(field[len(dataField):], []byte(" ")))
	}
}

func (p *Parser) dispatch() {
	data, skip := p.data, p.skipEvent
	p.skipEvent = false
	defer func() {
		if cap(p.data) > keptBuffer {
			p.data = p.drop(p.data)
		} else {
			p.data = p.data[:0]
		}
	}()
	if skip || len(data) == 0 || data[0] != '{' {
		return // [DONE], a cut event, a keep-alive
	}
	// Only events that can carry usage, an error or the model are
	// decoded: a long stream is mostly text deltas.
	if !bytes.Contains(data, []byte(`usage`)) && !bytes.Contains(data, []byte(`"error"`)) &&
		(p.reply.Model != "" || !bytes.Contains(data, []byte(`"model`))) &&
		(p.d != Gemini || !bytes.Contains(data, []byte(`Reason"`))) {
		return
	}
	p.event(data)
}

// Result is what the body said, once it has been written whole (or as much
// of it as arrived: a cut stream counts the events that arrived). It gives
// the parser's buffers back to its budget.
func (p *Parser) Result() Reply {
	if !p.sse && !p.overflow && len(p.body) > 0 {
		b := bytes.TrimSpace(p.body)
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
	p.body = p.drop(p.body)
	if p.sse && (len(p.field) > 0 || p.fieldDone) {
		p.endLine()
	}
	if p.sse && len(p.data) > 0 {
		p.dispatch()
	}
	p.data = p.drop(p.data)
	return p.reply
}

// Final says whether the figures of Result are the answer's closing ones:
// not only an Anthropic stream's message_start (its input, and its first
// output token), so that a stream cut before its message_delta, whose
// output no figure counts, is told from a counted one. Nor a Gemini
// stream's chunks before its end: each carries usageMetadata, but only
// the prompt's count (promptTokenCount, totalTokenCount) until the chunk
// with the finishReason, which brings the output's; a stream cut before
// it had its input counted and its output not.
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
	InputTokens              *tokens `json:"input_tokens"`
	OutputTokens             *tokens `json:"output_tokens"`
	CacheReadInputTokens     *tokens `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *tokens `json:"cache_creation_input_tokens"`
}

// set takes the figures u has; message_delta carries only some of them.
func (u *anthropicUsage) setInto(r *Reply) {
	if u == nil {
		return
	}
	r.Found = true
	for _, f := range []struct {
		v   *tokens
		dst *int64
	}{{u.InputTokens, &r.Input}, {u.OutputTokens, &r.Output}, {u.CacheReadInputTokens, &r.CacheRead}, {u.CacheCreationInputTokens, &r.CacheWrite}} {
		if f.v != nil {
			*f.dst = int64(*f.v)
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
	InputTokens        tokens `json:"input_tokens"`
	OutputTokens       tokens `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens tokens `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	// Chat Completions
	PromptTokens        tokens `json:"prompt_tokens"`
	CompletionTokens    tokens `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens tokens `json:"cached_tokens"`
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
			cached = int64(u.InputTokensDetails.CachedTokens)
		}
		// A stream's figures are its closing ones only in its terminal
		// event: a provider that fills response.created's usage (OpenAI
		// sends null there) gives an output of 0 before the text, and a
		// stream cut after its text would have counted none of it.
		p.reply.Found, p.final = true, !p.sse || responsesTerminal(ev.Type)
		p.reply.Counts = Counts{Input: nonNegative(int64(u.InputTokens) - cached), Output: int64(u.OutputTokens), CacheRead: cached}
	}
}

// responsesTerminal says whether a Responses stream event ends the
// response, holding its closing usage.
func responsesTerminal(typ string) bool {
	switch typ {
	case "response.completed", "response.incomplete", "response.failed":
		return true
	}
	return false
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
			cached = int64(u.PromptTokensDetails.CachedTokens)
		}
		p.reply.Found, p.final = true, true
		p.reply.Counts = Counts{Input: nonNegative(int64(u.PromptTokens) - cached), Output: int64(u.CompletionTokens), CacheRead: cached}
	}
}

// gemini: a GenerateContentResponse, whole or one chunk of a stream. Each
// chunk's usageMetadata replaces the last; they are the answer's totals
// only from its end on (a candidate's finishReason, or the prompt's
// blockReason when it was refused): the chunks before carry the prompt's
// count alone.
func (p *Parser) gemini(data []byte) {
	var ev struct {
		Candidates []struct {
			FinishReason string `json:"finishReason"`
		} `json:"candidates"`
		PromptFeedback *struct {
			BlockReason string `json:"blockReason"`
		} `json:"promptFeedback"`
		ModelVersion  string `json:"modelVersion"`
		UsageMetadata *struct {
			PromptTokenCount        tokens `json:"promptTokenCount"`
			CandidatesTokenCount    tokens `json:"candidatesTokenCount"`
			CachedContentTokenCount tokens `json:"cachedContentTokenCount"`
			ThoughtsTokenCount      tokens `json:"thoughtsTokenCount"`
			ToolUsePromptTokenCount tokens `json:"toolUsePromptTokenCount"`
		} `json:"usageMetadata"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if isSet(ev.Error) {
		p.reply.Failed = true
	}
	for _, c := range ev.Candidates {
		p.ended = p.ended || c.FinishReason != "" && c.FinishReason != "FINISH_REASON_UNSPECIFIED"
	}
	if ev.PromptFeedback != nil && ev.PromptFeedback.BlockReason != "" && ev.PromptFeedback.BlockReason != "BLOCK_REASON_UNSPECIFIED" {
		p.ended = true
	}
	p.setModel(ev.ModelVersion)
	if u := ev.UsageMetadata; u != nil {
		p.reply.Counts = Counts{
			Input:     nonNegative(boundedSum(int64(u.PromptTokenCount), int64(u.ToolUsePromptTokenCount)) - int64(u.CachedContentTokenCount)),
			Output:    boundedSum(int64(u.CandidatesTokenCount), int64(u.ThoughtsTokenCount)),
			CacheRead: int64(u.CachedContentTokenCount),
		}
		// Figures that count output are taken as closing too: a
		// provider that omits the finishReason, or sends the output's
		// running count in each chunk, is not judged to have hidden its
		// output; a cut answer's are then what was generated up to the
		// cut.
		p.reply.Found, p.final = true, p.ended || p.reply.Output > 0
	}
}

func (p *Parser) setModel(m string) {
	if m != "" && p.reply.Model == "" {
		p.reply.Model = truncate(m, maxModelName)
	}
}

func nonNegative(v int64) int64 { return max(v, 0) }

// utf8BOM is the byte-order mark some servers write before a UTF-8 body.
const utf8BOM = "\xef\xbb\xbf"

// tokens is a token figure as a provider writes it: a JSON number, which
// some servers write with a fraction or an exponent (12.0, 1.2e3). It is
// rounded to a whole token: decoded as an int64, such a figure made the
// whole event unreadable, and the answer uncounted (under a token limit,
// the run's end). Beyond int64 it is held at its bound.
type tokens int64

func (t *tokens) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*t = tokens(n)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) {
		return fmt.Errorf("token figure %.32s is not a number", b)
	}
	switch {
	case f >= math.MaxInt64:
		*t = math.MaxInt64
	case f <= math.MinInt64:
		*t = math.MinInt64
	default:
		*t = tokens(math.Round(f))
	}
	return nil
}

// isSet: a JSON value other than null.
func isSet(v json.RawMessage) bool {
	return len(v) > 0 && !bytes.Equal(v, []byte("null"))
}

// maxModels is UsageStatus.models' bound; maxModelName a model's name's.
const (
	maxModels    = 8
	maxModelName = 256
)

// MayBeCut says whether a model's name of Tally's may have been cut to its
// bound (256 bytes, less a rune's bytes that did not fit whole): a credential
// the cut went through is no longer whole in it.
func MayBeCut(name string) bool { return len(name) > maxModelName-utf8.UTFMax }

// maxPricedModels bounds the models a Tally keeps the figures of apart
// (ByModel), for pricing: a provider may name any model in each answer.
// The figures of the models beyond it are kept together as OtherModels.
const maxPricedModels = 64

// OtherModels is ByModel's name for the figures of the models beyond the
// first 64 a run's answers named: no price table has it, so such a run
// gets no estimated cost.
const OtherModels = "(models beyond the first 64 named)"

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
		m := truncate(r.Model, maxModelName)
		if _, ok := t.byModel[m]; !ok && len(t.byModel) >= maxPricedModels {
			m = OtherModels
		}
		c := t.byModel[m]
		c.Add(r.Counts)
		t.byModel[m] = c
	}
	if m := truncate(r.Model, maxModelName); m != "" && len(t.models) < maxModels && !slices.Contains(t.models, m) {
		t.models = append(t.models, m)
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

// truncate cuts s to at most n bytes of valid UTF-8. A cut name is a copy:
// a substring would keep the whole of s alive (a provider's name of
// megabytes, for as long as the run's tally keeps it).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.Clone(strings.ToValidUTF8(s[:n], ""))
}
