package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"slices"
)

// Chat Completions streams carry their usage only when the request asks
// for it (stream_options.include_usage): then one last chunk, with no
// choices, holds it. Aider (through litellm) asks only when it talks to
// OpenAI's own host, so through the gateway it never does, and an agent
// can leave it out on purpose; either way the gateway would count no
// tokens, and a run's token limit would not hold. The gateway asks for it
// on the agent's behalf, and takes that chunk out of the stream the agent
// gets, which is then the stream it asked for.

// request is a model request's body read as the providers read a JSON
// object: keys case-sensitive (Go's struct decoding would match "Tools"
// as "tools"), the last of two keys winning. nil: not a JSON object as Go
// reads it. Its values are the body's own bytes, not copies: a 16 MiB
// request costs its map, not a second 16 MiB.
type request map[string]rawValue

// rawValue is a JSON value as it stands in the body it was decoded from,
// which the gateway holds unchanged while it needs the value.
type rawValue []byte

// UnmarshalJSON keeps b itself: the decoder hands it a piece of the body.
func (r *rawValue) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// MarshalJSON writes the value as it stood.
func (r rawValue) MarshalJSON() ([]byte, error) { return r, nil }

// parseRequest reads body as a request, nil when it is not one.
// An object of more than maxMembers members is not read (nil): each costs
// the map about 70 bytes besides its bytes in the body, so a 16 MiB body of
// a million and a half tiny members held a 100 MiB map, and more again to
// ask for its usage (askForUsage encodes it anew), in the node-agent that
// every run shares. No provider's request has more than a few dozen.
func parseRequest(body []byte) request {
	var req request
	if !json.Valid(body) || members(body) > maxMembers || json.Unmarshal(body, &req) != nil {
		return nil
	}
	return req
}

// maxMembers bounds the members of an object the gateway decodes into a
// map (a request, its stream_options).
const maxMembers = 256

// members is the number of members of raw, a valid JSON value, when it is
// an object, counted up to maxMembers+1; 0 for anything else.
func members(raw []byte) int {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return 0
	}
	n := 0
	for i = skipSpace(raw, i+1); i < len(raw) && raw[i] == '"' && n <= maxMembers; n++ {
		i = skipSpace(raw, stringEnd(raw, i))
		i = skipValue(raw, skipSpace(raw, i+1)) // past the colon, the value
		if i = skipSpace(raw, i); i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return n
}

// askForUsage returns a Chat Completions request body (read as req) that
// asks for the stream's usage, and whether it had to add that: only a JSON
// object whose "stream" is not false that does not ask already. Anything else is
// left as it is, and its answer, if it carries no usage, is an uncounted
// one.
func askForUsage(body []byte, req request) ([]byte, bool) {
	// Anything but false (or none) may be read as a stream: a lenient
	// provider takes "true" or 1 for true.
	if req == nil || isFalse(req["stream"]) {
		return body, false
	}
	raw, has := req["stream_options"]
	if !has {
		// The common case, without a copy of the decoded request: the
		// option added as the object's last key. (Where the agent sent
		// one, a second key would be refused by a strict parser such as
		// serde's, so that case is encoded again below.)
		end := bytes.LastIndexByte(body, '}')
		out := make([]byte, 0, len(body)+len(usageOption)+1)
		out = append(out, body[:end]...)
		out = append(out, ',')
		out = append(out, usageOption...)
		out = append(out, body[end:]...)
		return out, true
	}
	var opts map[string]rawValue
	if !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		// At most maxMembers, as the request's own (parseRequest).
		if members(raw) > maxMembers || json.Unmarshal(raw, &opts) != nil || opts == nil {
			return body, false // not an object: the provider will refuse it
		}
	}
	var include bool
	if json.Unmarshal(opts["include_usage"], &include) == nil && include {
		return body, false
	}
	if opts == nil {
		opts = map[string]rawValue{}
	}
	opts["include_usage"] = rawValue("true")
	b, err := marshalRaw(opts)
	if err != nil {
		return body, false
	}
	// The request is encoded again, so that the provider gets one key of
	// each, exactly what was decided on.
	again := maps.Clone(req)
	again["stream_options"] = b
	out, err := marshalRaw(again)
	if err != nil {
		return body, false
	}
	return out, true
}

const usageOption = `"stream_options":{"include_usage":true}`

// marshalRaw encodes v without escaping HTML characters, so that the
// agent's text reaches the provider byte for byte as it wrote it.
func marshalRaw(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// usageChunkFilter passes a Chat Completions event stream through, event
// by event, without the chunks that hold only the usage (an empty choices
// array and a usage object): the ones the gateway asked for. Each event
// goes on as soon as its blank line has arrived. An event longer than
// maxFilteredEvent is no usage chunk: it goes on as it arrives, and the
// filter holds events again after its end. Lines end in CRLF, LF or a
// lone CR, as the event stream format allows.
type usageChunkFilter struct {
	src     io.ReadCloser
	pending []byte // bytes of the event not yet ended
	ready   []byte // bytes that may go to the reader
	err     error
	// passing: the event being read is longer than maxFilteredEvent and
	// goes on as it arrives; tail is its last endSpan bytes, where its
	// end may begin.
	passing bool
	tail    []byte
	// scanned is where the search for the pending event's end goes on.
	scanned int
	buf     []byte
}

// endSpan is how far back from the last byte read an event's end not yet
// known may begin, and the byte before it (which tells a CRLF's LF).
const endSpan = 4

// maxFilteredEvent is the most of an event the filter holds to tell a
// usage chunk, which is well under 2 KiB (an id, the model, the figures).
const maxFilteredEvent = 64 << 10

func newUsageChunkFilter(src io.ReadCloser) *usageChunkFilter {
	return &usageChunkFilter{src: src, buf: make([]byte, 32<<10)}
}

func (f *usageChunkFilter) Read(p []byte) (int, error) {
	for len(f.ready) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		n, err := f.src.Read(f.buf)
		f.take(f.buf[:n])
		if err != nil {
			// What is left is passed on as it is: a cut event is the
			// provider's, not a usage chunk the gateway can tell.
			f.ready = append(f.ready, f.pending...)
			f.pending = nil
			f.err = err
		}
	}
	n := copy(p, f.ready)
	f.ready = f.ready[n:]
	if len(f.ready) == 0 {
		f.ready = nil
	}
	return n, nil
}

// take adds b to the event being read and moves every ended event to
// ready, unless it is a usage chunk.
func (f *usageChunkFilter) take(b []byte) {
	if f.passing {
		// The tail's first byte is searched before: it only tells
		// whether an LF after it ends a CRLF.
		w := append(slices.Clip(f.tail), b...)
		end := eventEnd(w, 1)
		if end < 0 {
			f.ready = append(f.ready, b...)
			f.tail = append(f.tail[:0], w[len(w)-endSpan:]...)
			return
		}
		// The end is known from a byte of b: it was not, from the tail.
		j := end - len(f.tail)
		f.ready = append(f.ready, b[:j]...)
		b, f.passing, f.tail = b[j:], false, f.tail[:0]
	}
	f.pending = append(f.pending, b...)
	passed := false
	for {
		end := eventEnd(f.pending, f.scanned)
		if end < 0 {
			// The next search starts where an event's end could begin
			// among the bytes still to come: each byte is searched once.
			f.scanned = max(len(f.pending)-endSpan+1, 0)
			break
		}
		ev := f.pending[:end]
		if !isUsageChunk(ev) {
			f.ready = append(f.ready, ev...)
		}
		f.pending, f.scanned, passed = f.pending[end:], 0, true
	}
	if len(f.pending) > maxFilteredEvent {
		f.passing = true
		f.ready = append(f.ready, f.pending...)
		f.tail = append(f.tail[:0], f.pending[len(f.pending)-endSpan:]...)
		f.pending, f.scanned = nil, 0
		return
	}
	if passed {
		// Keep the next event's bytes at the start of a buffer of their
		// own, so that pending does not grow with what was passed on.
		f.pending = append([]byte(nil), f.pending...)
	}
}

func (f *usageChunkFilter) Close() error { return f.src.Close() }

// eventEnd is the length of the first whole event in b, its blank line
// included, or -1; the search starts at from, and b[from-1], where there
// is one, is read only to tell whether an LF at from is a CRLF's. A line
// ends in CRLF, LF or a lone CR, and an empty line ends an event. A CR
// last in b may be the first half of a CRLF, so an end made of one is known
// only once the next byte has come: an end not yet known begins at
// len(b)-3 or later.
func eventEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		k := bytes.IndexAny(b[i:], "\r\n")
		if k < 0 {
			return -1
		}
		i += k
		if b[i] == '\n' && i > 0 && b[i-1] == '\r' {
			continue // the LF of a CRLF, whose CR was the line's end
		}
		e := lineBreakEnd(b, i)
		switch {
		case e < 0 || e >= len(b):
			return -1 // what follows the line's end is still to come
		case b[e] == '\n' || b[e] == '\r':
			return lineBreakEnd(b, e)
		}
	}
	return -1
}

// lineBreakEnd is where the line break at b[i] (CR or LF) ends: past a
// CRLF, an LF, or a CR that the next byte shows is alone; -1 when a CR is
// last in b.
func lineBreakEnd(b []byte, i int) int {
	switch {
	case b[i] == '\n':
		return i + 1
	case i+1 >= len(b):
		return -1
	case b[i+1] == '\n':
		return i + 2
	}
	return i + 1
}

// isUsageChunk says whether an SSE event's data is a chunk with an empty
// choices array and a usage object.
func isUsageChunk(ev []byte) bool {
	var data []byte
	for len(ev) > 0 {
		// Lines end in CRLF, LF or a lone CR.
		line, rest := ev, []byte(nil)
		if i := bytes.IndexAny(ev, "\r\n"); i >= 0 {
			line, rest = ev[:i], ev[i+1:]
			if ev[i] == '\r' {
				rest = bytes.TrimPrefix(rest, []byte("\n"))
			}
		}
		ev = rest
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	if !bytes.Contains(data, []byte(`"usage"`)) {
		return false
	}
	var chunk struct {
		Choices *[]json.RawMessage `json:"choices"`
		Usage   json.RawMessage    `json:"usage"`
	}
	if json.Unmarshal(data, &chunk) != nil {
		return false
	}
	return chunk.Choices != nil && len(*chunk.Choices) == 0 &&
		len(chunk.Usage) > 0 && !bytes.Equal(chunk.Usage, []byte("null"))
}
