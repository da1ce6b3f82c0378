package usage

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The bodies are the providers' documented shapes, with every figure
// distinct so that a field read into the wrong place shows.
var cases = []struct {
	name        string
	dialect     Dialect
	contentType string
	body        string
	want        Reply
}{
	{
		name: "anthropic message", dialect: Anthropic, contentType: "application/json",
		body: `{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-8-20261001","content":[{"type":"text","text":"usage: none"}],` +
			`"usage":{"input_tokens":1203,"cache_creation_input_tokens":41,"cache_read_input_tokens":377,"output_tokens":88}}`,
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377, CacheWrite: 41}, Model: "claude-opus-4-8-20261001", Found: true},
	},
	{
		// message_start has the input side and a first output figure;
		// message_delta's output is cumulative and replaces it.
		name: "anthropic stream", dialect: Anthropic, contentType: "text/event-stream; charset=utf-8",
		body: "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-x-1\",\"usage\":{\"input_tokens\":1203,\"cache_creation_input_tokens\":41,\"cache_read_input_tokens\":377,\"output_tokens\":1}}}\r\n\r\n" +
			"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"the model's usage is \\\"usage\\\"\"}}\n\n" +
			": a comment\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":88}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377, CacheWrite: 41}, Model: "claude-x-1", Found: true},
	},
	{
		// The event stream format ends a line with CRLF, LF or a lone CR
		// (the HTML standard; the CLIs' SDKs read all three): the same
		// stream with lone CRs, and with all three mixed, a CRLF across
		// writes too (the chunked reads below).
		name: "anthropic stream, lines ended by a lone CR", dialect: Anthropic, contentType: "text/event-stream",
		body: "event: message_start\rdata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-x-1\",\"usage\":{\"input_tokens\":1203,\"cache_creation_input_tokens\":41,\"cache_read_input_tokens\":377,\"output_tokens\":1}}}\r\r" +
			"event: ping\rdata: {\"type\": \"ping\"}\r\r: comment\r\r" +
			"event: message_delta\rdata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":88}}\r\r" +
			"event: message_stop\rdata: {\"type\":\"message_stop\"}\r\r",
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377, CacheWrite: 41}, Model: "claude-x-1", Found: true},
	},
	{
		// Figures written with a fraction or an exponent are JSON
		// numbers all the same (some servers write every number as a
		// float), and a byte-order mark before a body is no part of it.
		name: "chat whole, figures as floats, after a byte-order mark", dialect: Chat, contentType: "application/json",
		body: "\xef\xbb\xbf{\"model\":\"gpt-m\",\"choices\":[],\"usage\":{\"prompt_tokens\":1580.0,\"completion_tokens\":8.8e1," +
			"\"prompt_tokens_details\":{\"cached_tokens\":377.0}}}",
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gpt-m", Found: true},
	},
	{
		name: "gemini whole, figures as floats", dialect: Gemini, contentType: "application/json",
		body: `{"candidates":[],"modelVersion":"gemini-x","usageMetadata":{"promptTokenCount":1580.0,"candidatesTokenCount":80.4,"thoughtsTokenCount":8,"cachedContentTokenCount":3.77e2}}`,
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gemini-x", Found: true},
	},
	{
		name: "chat stream, line ends mixed", dialect: Chat, contentType: "text/event-stream",
		body: "data: {\"model\":\"gpt-m\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\r\n" +
			"id: 7\r\ndata:{\"model\":\"gpt-m\",\"choices\":[],\r" +
			"data: \"usage\":{\"prompt_tokens\":1580,\"completion_tokens\":88,\r\n" +
			"data: \"prompt_tokens_details\":{\"cached_tokens\":377}}}\n\r" +
			"data: [DONE]\r\n\r\n",
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gpt-m", Found: true},
	},
	{
		name: "responses object", dialect: Responses, contentType: "application/json",
		body: `{"id":"resp_1","object":"response","status":"completed","model":"gpt-6.2-sol-2026","output":[],` +
			`"usage":{"input_tokens":1580,"input_tokens_details":{"cached_tokens":377},"output_tokens":88,"output_tokens_details":{"reasoning_tokens":20},"total_tokens":1668}}`,
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gpt-6.2-sol-2026", Found: true},
	},
	{
		// POST /v1/responses/compact: OpenAI's documented
		// response.compaction, one opaque compaction item out.
		name: "responses compaction", dialect: Responses, contentType: "application/json",
		body: `{"id":"cmp_1","object":"response.compaction","created_at":1764800000,"model":"gpt-6.2-sol-2026",` +
			`"output":[{"type":"message","role":"user","content":[{"type":"input_text","text":"fix the usage test"}]},{"type":"compaction","encrypted_content":"gAAA"}],` +
			`"usage":{"input_tokens":91000,"input_tokens_details":{"cached_tokens":60000},"output_tokens":2100,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":93100}}`,
		want: Reply{Counts: Counts{Input: 31000, Output: 2100, CacheRead: 60000}, Model: "gpt-6.2-sol-2026", Found: true},
	},
	{
		name: "responses stream", dialect: Responses, contentType: "text/event-stream",
		body: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-a\"}}\n\n" +
			"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"message\"}}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"object\":\"response\",\"model\":\"gpt-a\",\"usage\":{\"input_tokens\":1580,\"input_tokens_details\":{\"cached_tokens\":377},\"output_tokens\":88}}}\n\n",
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gpt-a", Found: true},
	},
	{
		name: "chat completion", dialect: Chat, contentType: "application/json",
		body: `{"id":"c","object":"chat.completion","model":"gpt-c","choices":[],"usage":{"prompt_tokens":1580,"completion_tokens":88,"total_tokens":1668,"prompt_tokens_details":{"cached_tokens":377}}}`,
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gpt-c", Found: true},
	},
	{
		name: "chat stream", dialect: Chat, contentType: "text/event-stream",
		body: "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}],\"usage\":null}\n\n" +
			"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
			"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-c\",\"choices\":[],\"usage\":{\"prompt_tokens\":1580,\"completion_tokens\":88,\"prompt_tokens_details\":{\"cached_tokens\":377}}}\n\n" +
			"data: [DONE]\n\n",
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gpt-c", Found: true},
	},
	{
		name: "gemini response", dialect: Gemini, contentType: "application/json; charset=UTF-8",
		body: `{"candidates":[{"content":{"role":"model","parts":[{"text":"hi"}]}}],"usageMetadata":{"promptTokenCount":1580,"candidatesTokenCount":68,"thoughtsTokenCount":20,"cachedContentTokenCount":377,"totalTokenCount":1668},"modelVersion":"gemini-2.5-pro-002"}`,
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gemini-2.5-pro-002", Found: true},
	},
	{
		// Each chunk's usageMetadata is the total so far: the last wins.
		name: "gemini sse stream", dialect: Gemini, contentType: "text/event-stream",
		body: "data: {\"candidates\":[],\"usageMetadata\":{\"promptTokenCount\":1580,\"candidatesTokenCount\":3,\"cachedContentTokenCount\":377},\"modelVersion\":\"gemini-q\"}\r\n\r\n" +
			"data: {\"candidates\":[],\"usageMetadata\":{\"promptTokenCount\":1580,\"candidatesTokenCount\":88,\"cachedContentTokenCount\":377},\"modelVersion\":\"gemini-q\"}\r\n\r\n",
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gemini-q", Found: true},
	},
	{
		name: "gemini json array stream", dialect: Gemini, contentType: "application/json",
		body: `[{"usageMetadata":{"promptTokenCount":1580,"candidatesTokenCount":3,"cachedContentTokenCount":377},"modelVersion":"gemini-q"},` +
			`{"usageMetadata":{"promptTokenCount":1580,"candidatesTokenCount":88,"cachedContentTokenCount":377}}]`,
		want: Reply{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377}, Model: "gemini-q", Found: true},
	},
	{
		name: "an error body counts nothing", dialect: Anthropic, contentType: "application/json",
		body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		want: Reply{Failed: true},
	},
	// A stream that fails on the provider's side is no whole answer:
	// the gateway does not take its missing figures for an evasion.
	{
		name: "responses stream failed", dialect: Responses, contentType: "text/event-stream",
		body: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-r\",\"usage\":null,\"error\":null}}\n\n" +
			"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"model\":\"gpt-r\",\"status\":\"failed\",\"usage\":null,\"error\":{\"code\":\"server_error\"}}}\n\n",
		want: Reply{Model: "gpt-r", Failed: true},
	},
	{
		name: "responses error event", dialect: Responses, contentType: "text/event-stream",
		body: "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"x\"}\n\n",
		want: Reply{Failed: true},
	},
	{
		name: "anthropic error event", dialect: Anthropic, contentType: "text/event-stream",
		body: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
		want: Reply{Failed: true},
	},
	{
		name: "chat error chunk", dialect: Chat, contentType: "text/event-stream",
		body: "data: {\"choices\":[{\"delta\":{\"content\":\"h\"}}]}\n\ndata: {\"error\":{\"message\":\"x\"}}\n\n",
		want: Reply{Failed: true},
	},
	{
		name: "gemini error", dialect: Gemini, contentType: "application/json",
		body: `[{"candidates":[]},{"error":{"code":500,"status":"INTERNAL"}}]`,
		want: Reply{Failed: true},
	},
	{
		// Every chunk of a stream that asked for usage says "usage":null
		// and "error" nowhere: no failure.
		name: "chat stream without usage", dialect: Chat, contentType: "text/event-stream",
		body: "data: {\"model\":\"gpt-c\",\"choices\":[{\"delta\":{}}],\"usage\":null}\n\ndata: [DONE]\n\n",
		want: Reply{Model: "gpt-c"},
	},
	{
		name: "not JSON counts nothing", dialect: Chat, contentType: "text/plain",
		body: "upstream connect error",
	},
	{
		// A stream cut after message_start still counts what arrived.
		name: "anthropic stream cut", dialect: Anthropic, contentType: "text/event-stream",
		body: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":1203,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_to",
		want: Reply{Counts: Counts{Input: 1203, Output: 1}, Model: "claude-x", Found: true},
	},
	{
		// The forms of an SSE line: data without a space after its
		// colon, data in several lines (joined by a newline), data
		// lines shorter than "data: ", comments, other fields, a line
		// ended by CRLF within an LF stream, a field named like data.
		name: "sse lines", dialect: Chat, contentType: "text/event-stream",
		body: ": hi\nid: 1\nevent: chunk\ndatum: {\"usage\":{\"prompt_tokens\":99}}\n" +
			"data:{\"model\":\"gpt-l\",\r\ndata:\ndata: \"usage\":\ndata:{\"prompt_tokens\":5,\n" +
			"data:  \"completion_tokens\":3}}\r\n\r\n" +
			"data\ndata:\n\ndata: [DONE]\n\n",
		want: Reply{Counts: Counts{Input: 5, Output: 3}, Model: "gpt-l", Found: true},
	},
}

// TestParserReadsEveryDialect feeds each body whole, byte by byte and in
// odd chunks: a stream arrives split anywhere, CRLF pairs and multi-byte
// characters included.
func TestParserReadsEveryDialect(t *testing.T) {
	for _, c := range cases {
		for _, chunk := range []int{len(c.body), 1, 7, 64} {
			p := NewParser(c.dialect, c.contentType, nil)
			for b := []byte(c.body); len(b) > 0; {
				n := min(chunk, len(b))
				if w, err := p.Write(b[:n]); w != n || err != nil {
					t.Fatalf("%s: Write = %d, %v", c.name, w, err)
				}
				b = b[n:]
			}
			if diff := cmp.Diff(c.want, p.Result()); diff != "" {
				t.Errorf("%s in chunks of %d (-want +got):\n%s", c.name, chunk, diff)
			}
		}
	}
}

// TestParserReadsAnUnlabelledBody: a provider may stream its events under
// another Content-Type or none (a web framework's streamed response has
// none unless told), and the CLI, which asked for a stream, reads them all
// the same: the count reads each body of the cases as it does when it is
// labelled, whatever the label, with white space before it too. Before,
// such a stream was read as one JSON document and counted nothing, and
// under a token limit the run ended at its first answer.
func TestParserReadsAnUnlabelledBody(t *testing.T) {
	for _, c := range cases {
		for _, ct := range []string{"", "application/octet-stream", "application/json", "text/plain; charset=utf-8"} {
			for _, lead := range []string{"", "\r\n \n"} {
				for _, chunk := range []int{len(c.body) + len(lead), 1, 7} {
					p := NewParser(c.dialect, ct, nil)
					for b := []byte(lead + c.body); len(b) > 0; {
						n := min(chunk, len(b))
						if w, err := p.Write(b[:n]); w != n || err != nil {
							t.Fatalf("%s: Write = %d, %v", c.name, w, err)
						}
						b = b[n:]
					}
					if diff := cmp.Diff(c.want, p.Result()); diff != "" {
						t.Errorf("%s as %q after %q, in chunks of %d (-want +got):\n%s", c.name, ct, lead, chunk, diff)
					}
				}
			}
		}
	}
}

func TestDialectOf(t *testing.T) {
	for path, want := range map[string]Dialect{
		"/v1/messages":          Anthropic,
		"/s/hello/v1/messages":  Anthropic,
		"/v1/responses":         Responses,
		"/v1/responses/compact": Responses,
		"/v1/chat/completions":  Chat,
		"/v1beta/models/gemini-2.5-pro:streamGenerateContent": Gemini,
		"/v1beta/models/g:generateContent":                    Gemini,
		"/v1beta/models/g:countTokens":                        "",
		"/v1/messages/count_tokens":                           "",
		"/v1/models":                                          "",
	} {
		if got := DialectOf(path); got != want {
			t.Errorf("DialectOf(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestOversizedBodiesAreNotHeld(t *testing.T) {
	p := NewParser(Chat, "application/json", nil)
	big := strings.Repeat("x", 1<<20)
	_, _ = p.Write([]byte(`{"x":"`))
	for range 5 {
		_, _ = p.Write([]byte(big))
	}
	if len(p.body) != 0 || !p.overflow {
		t.Fatalf("a whole body over %d bytes is held (%d bytes)", maxJSONBody, len(p.body))
	}
	if got := p.Result(); got.Found || !got.Unread {
		t.Errorf("an oversized body read %+v, want nothing found and Unread", got)
	}
	s := NewParser(Anthropic, "text/event-stream", nil)
	_, _ = s.Write([]byte("data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5},\"x\":\""))
	for range 5 {
		_, _ = s.Write([]byte(big))
	}
	if cap(s.data) > maxEventBytes {
		t.Fatalf("an SSE event of over %d bytes is held (%d)", maxEventBytes, cap(s.data))
	}
	_, _ = s.Write([]byte("\"}\n\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n"))
	if got := s.Result(); got.Output != 9 || !got.Unread {
		t.Errorf("after an oversized event the stream reads %+v, want output 9 and Unread", got)
	}
}

// TestParsersHoldWithinTheirBudget: parsers sharing a budget hold no more
// than it beyond keptBuffer each; the event that would pass it is not
// read, the others are, and every byte goes back once they are done.
func TestParsersHoldWithinTheirBudget(t *testing.T) {
	const budget = 2 << 20
	b := NewBudget(budget)
	event := func(tokens int, pad int) string {
		return fmt.Sprintf("data: {\"type\":\"response.completed\",\"response\":{\"output\":\"%s\",\"usage\":{\"input_tokens\":%d,\"output_tokens\":1}}}\n\n",
			strings.Repeat("y", pad), tokens)
	}
	var ps []*Parser
	for i := range 3 {
		p := NewParser(Responses, "text/event-stream", b)
		ps = append(ps, p)
		ev := event(10+i, 1<<20+i)
		_, _ = p.Write([]byte(ev[:len(ev)-2])) // held: the event has not ended
	}
	if left := b.Left(); left < 0 || left > budget-2*(1<<20-keptBuffer) {
		t.Fatalf("the budget has %d bytes left with two 1 MiB events held", left)
	}
	if held := cap(ps[2].data); held > keptBuffer {
		t.Errorf("the third event is held (%d bytes) past the budget", held)
	}
	// Small events are read whatever the budget holds.
	rest := b.Left()
	if !b.Take(rest) {
		t.Fatal("the budget refused what it had left")
	}
	small := NewParser(Responses, "text/event-stream", b)
	_, _ = small.Write([]byte(event(7, 10)))
	if r := small.Result(); r.Input != 7 || r.Unread {
		t.Errorf("a small event beside two held ones reads %+v", r)
	}
	b.Give(rest)
	for i, p := range ps {
		_, _ = p.Write([]byte("\n\n"))
		r := p.Result()
		if got, want := r.Input, int64(10+i); i < 2 && (got != want || r.Unread) {
			t.Errorf("parser %d reads %+v, want input %d", i, r, want)
		}
		if i == 2 && (r.Found || !r.Unread) {
			t.Errorf("the event past the budget reads %+v, want it unread", r)
		}
	}
	if b.Left() != budget {
		t.Errorf("the budget has %d bytes left once every parser is done, want %d", b.Left(), budget)
	}
}

func TestTallySumsReplies(t *testing.T) {
	var tl Tally
	for i, r := range []Reply{
		{Counts: Counts{Input: 1203, Output: 88, CacheRead: 377, CacheWrite: 41}, Model: "m-1", Found: true},
		{Counts: Counts{Input: 11, Output: 7, CacheRead: 5, CacheWrite: 3}, Model: "m-2", Found: true},
		{Counts: Counts{Input: 2}, Model: "m-1", Found: true},
		{}, // an answer without figures
	} {
		tl.Request()
		tl.Add(r)
		_ = i
	}
	got := tl.Status(harnessv1.UsageFromGateway, "m")
	want := &harnessv1.UsageStatus{Source: harnessv1.UsageFromGateway, ModelRequested: "m", Models: []string{"m-1", "m-2"},
		Requests: 4, UncountedResponses: 1, InputTokens: 1216, OutputTokens: 95, CacheReadTokens: 382, CacheWriteTokens: 44}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got.TotalTokens() != 1216+95+382+44 {
		t.Errorf("TotalTokens %d", got.TotalTokens())
	}
	// Split by model, for pricing.
	wantBy := []ModelCounts{{Model: "m-1", Counts: Counts{Input: 1205, Output: 88, CacheRead: 377, CacheWrite: 41}},
		{Model: "m-2", Counts: Counts{Input: 11, Output: 7, CacheRead: 5, CacheWrite: 3}}}
	if diff := cmp.Diff(wantBy, tl.ByModel()); diff != "" {
		t.Errorf("by model (-want +got):\n%s", diff)
	}
}

// TestTallyBoundsItsModels: a provider may name any model, of any length,
// in each answer; the tally keeps the first 64 apart (each name cut at 256
// bytes) and the rest together.
func TestTallyBoundsItsModels(t *testing.T) {
	var tl Tally
	long := strings.Repeat("m", 1<<20)
	for i := range 1000 {
		tl.Add(Reply{Counts: Counts{Input: 1}, Model: fmt.Sprintf("%d-%s", i, long), Found: true})
	}
	tl.Add(Reply{Counts: Counts{Input: 1}, Model: "m", Found: true})
	by := tl.ByModel()
	if len(by) != maxPricedModels+1 {
		t.Fatalf("%d models kept apart, want %d and the others together", len(by), maxPricedModels)
	}
	var total int64
	for _, m := range by {
		if len(m.Model) > maxModelName {
			t.Errorf("a model's name of %d bytes kept", len(m.Model))
		}
		total += m.Input
	}
	if other := by[0]; other.Model != OtherModels || other.Input != 1001-maxPricedModels || total != 1001 {
		t.Errorf("the others: %+v, total %d", other, total)
	}
	for _, m := range tl.Status(harnessv1.UsageFromGateway, "").Models {
		if len(m) > maxModelName {
			t.Errorf("status names a model of %d bytes", len(m))
		}
	}
}

// A provider's or a CLI's figure below zero or past what a JSON number
// carries exactly is bounded: a negative count would make the run's
// terminal status write fail (its counts are at least 0), and one past
// 2^53 the signed receipt's statement (doubles).
func TestCountsAreBounded(t *testing.T) {
	var c Counts
	c.Add(Counts{Input: -5, Output: 1<<53 + 1, CacheRead: 1 << 62, CacheWrite: 7})
	c.Add(Counts{Input: 3, Output: 1 << 62, CacheRead: 1 << 62, CacheWrite: -1 << 62})
	if want := (Counts{Input: 3, Output: MaxCount, CacheRead: MaxCount, CacheWrite: 7}); c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
	var tally Tally
	tally.Add(Reply{Counts: Counts{Input: -1, Output: 1<<63 - 1}, Found: true})
	if st := tally.Status("Gateway", ""); st.InputTokens != 0 || st.OutputTokens != MaxCount {
		t.Errorf("status %+v", st)
	}
}

// TestParserFinal: an Anthropic stream's figures are final only with its
// message_delta (message_start's output is its first token), a Responses
// stream's only in its terminal event; the other dialects' (cumulative in
// each event) once they are found at all.
func TestParserFinal(t *testing.T) {
	start := "data: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"
	for _, c := range []struct {
		d     Dialect
		ct    string
		body  string
		final bool
	}{
		{Anthropic, "text/event-stream", start, false},
		{Anthropic, "text/event-stream", start + "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":90}}\n\n", true},
		{Anthropic, "application/json", `{"type":"message","usage":{"input_tokens":1,"output_tokens":2}}`, true},
		{Chat, "text/event-stream", "data: {\"choices\":[{\"delta\":{}}]}\n\n", false},
		{Chat, "text/event-stream", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n", true},
		{Responses, "text/event-stream", "data: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n", false},
		// A provider that fills response.created's usage: not final
		// until the response's end.
		{Responses, "text/event-stream", "data: {\"type\":\"response.created\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n" +
			"data: {\"type\":\"response.output_text.delta\",\"delta\":\"a long answer\"}\n\n", false},
		{Responses, "text/event-stream", "data: {\"type\":\"response.created\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":9}}}\n\n", true},
		{Responses, "text/event-stream", "data: {\"type\":\"response.incomplete\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":9}}}\n\n", true},
		{Responses, "application/json", `{"object":"response","usage":{"input_tokens":5,"output_tokens":9}}`, true},
		// Gemini's chunks before its end carry the prompt's count alone;
		// the chunk with the finishReason (or a refused prompt's
		// blockReason) has the totals.
		{Gemini, "text/event-stream", "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a long answer\"}]},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":3,\"totalTokenCount\":3}}\n\n", false},
		{Gemini, "text/event-stream", "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":3}}\n\n" +
			"data: {\"candidates\":[{\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":9}}\n\n", true},
		// The end, then the figures in a chunk of their own.
		{Gemini, "text/event-stream", "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]},\"finishReason\":\"MAX_TOKENS\"}]}\n\n" +
			"data: {\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":9}}\n\n", true},
		// Figures that count output are closing ones without a
		// finishReason (a provider that omits it, or counts the output
		// as it goes).
		{Gemini, "text/event-stream", "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":1}}\n\n", true},
		// The figures before the end are not its closing ones.
		{Gemini, "text/event-stream", "data: {\"usageMetadata\":{\"promptTokenCount\":3}}\n\n" +
			"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]},\"finishReason\":\"STOP\"}]}\n\n", false},
		{Gemini, "application/json", `{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":3,"totalTokenCount":3}}`, true},
		{Gemini, "application/json", `{"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":9}}`, true},
		{Gemini, "application/json", `[{"candidates":[{"content":{"parts":[{"text":"a"}]}}],"usageMetadata":{"promptTokenCount":3}},` +
			`{"candidates":[{"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":9}}]`, true},
	} {
		p := NewParser(c.d, c.ct, nil)
		_, _ = p.Write([]byte(c.body))
		p.Result()
		if p.Final() != c.final {
			t.Errorf("%s %q: final %v, want %v", c.d, c.body, p.Final(), c.final)
		}
	}
}

// TestTallyHoldsNoLongModelNames: a name cut to 256 bytes must not keep
// the provider's whole name alive. A provider naming a new model of
// megabytes in each answer (each read within the budget, one at a time)
// made the tally keep 64 + 8 of them whole: a cut name was a substring
// sharing the decoded name's memory.
func TestTallyHoldsNoLongModelNames(t *testing.T) {
	var tl Tally
	b := NewBudget(16 << 20)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 100 {
		p := NewParser(Chat, "text/event-stream", b)
		_, _ = fmt.Fprintf(p, "data: {\"model\":\"%03d-%s\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n", i, strings.Repeat("m", 1<<20))
		tl.Add(p.Result())
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if by := tl.ByModel(); len(by) != maxPricedModels+1 {
		t.Fatalf("%d models kept apart", len(by))
	}
	if held := int64(after.HeapAlloc) - int64(before.HeapAlloc); held > 8<<20 {
		t.Errorf("the tally of 72 names cut to %d bytes holds %d MiB", maxModelName, held>>20)
	}
}
