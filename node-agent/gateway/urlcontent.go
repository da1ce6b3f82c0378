package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// scanURLParts finds, in one pass over raw (a JSON value of a body the
// gateway has already read as valid JSON), the first object that is a
// content part the provider would fetch from a URL (urlPart). It decodes
// nothing but the few member values it compares: a request of 16 MiB of
// tiny objects, decoded whole into maps, would take hundreds of megabytes
// of the node-agent's memory, which every run shares.
//
// A member the scan looks at counts wherever it stands in its object, and
// every time it stands there: a provider may read the first or the last of
// a repeated key, so any of them that names a URL does.
//
// The scan is linear in the body and holds a fixed amount per object: an
// object with more "type" members than maxTypes, or more members named
// "…_url" than maxURLMembers, is not read (no content part has more than
// one or two), and the scan stops at the first part it refuses.
//
// It returns what it found, or an error for a request it will not read
// (such an object; anything but valid JSON, which cannot reach it).
func scanURLParts(d usage.Dialect, raw []byte) (found string, err error) {
	s := partScanner{b: raw, d: d}
	defer func() {
		switch recover().(type) {
		case nil:
		case stopScan:
			found, err = s.found, s.unread
		default:
			// Not reachable with valid JSON; refused rather than passed.
			found, err = "", errors.New("a part the gateway could not read")
		}
	}()
	s.value(skipSpace(raw, 0))
	return s.found, nil
}

// stopScan ends a scan that found what it refuses (a panic the scan
// recovers from: the recursion unwinds at once).
type stopScan struct{}

// The most "type" members, and members named "…_url", one object may
// have before the request is refused.
const (
	maxTypes      = 4
	maxURLMembers = 8
)

// refuse ends the scan with what.
func (s *partScanner) refuse(what string) {
	s.found = what
	panic(stopScan{})
}

// unreadable ends the scan with a part it will not read.
func (s *partScanner) unreadable(why string) {
	s.unread = errors.New(why)
	panic(stopScan{})
}

type partScanner struct {
	b      []byte
	d      usage.Dialect
	found  string
	unread error
	// quiet counts the values being read that are no content: a tool
	// call's own input (Anthropic's tool_use "input", Gemini's
	// functionCall "args" and functionResponse "response"), which the
	// agent's tools define and the provider fetches nothing of. Objects in
	// them are read for their end only.
	quiet int
}

// quietKey says whether key's value is no content, in dialect d.
func quietKey(d usage.Dialect, key []byte) bool {
	switch d {
	case usage.Anthropic:
		return string(key) == "input"
	case usage.Gemini:
		switch string(key) {
		case "args", "response":
			return true
		}
	}
	return false
}

// part is what an object's members say that urlPart needs. Its slices are
// pieces of the body (or, for the rare escaped one, its decoding): a scan
// copies nothing.
type part struct {
	// typ is the first "type" member's string, moreTypes any later ones
	// (a repeated key): the usual single one costs no allocation.
	typ       []byte
	moreTypes [][]byte
	// sourceURL: a "source" member is an object of type "url" (Anthropic).
	sourceURL bool
	// url is the last "url" member (Chat's image_url object).
	url []byte
	// urls are the members whose key ends in "_url": their raw string, or
	// their object's "url" (Chat's image_url, Responses' image_url and
	// file_url).
	urls []member
	// fileData names a fileData or file_data member whose object has a
	// fileUri or file_uri (Gemini); hasURI: this object has one.
	fileData string
	hasURI   bool
	// fileRef: a "file_data" or "file_url" member names a URL (an
	// OpenAI-compatible file part's file object); fileByURL: a "file"
	// member is such an object.
	fileRef, fileByURL bool
	ntypes             int
}

type member struct{ key, val []byte }

// value reads the value at i and returns the index after it, and, for an
// object, what its members say.
func (s *partScanner) value(i int) (int, part, bool) {
	switch s.b[i] {
	case '{':
		end, p := s.object(i)
		return end, p, true
	case '[':
		i = skipSpace(s.b, i+1)
		if s.b[i] == ']' {
			return i + 1, part{}, false
		}
		for {
			i, _, _ = s.value(i)
			i = skipSpace(s.b, i)
			if s.b[i] == ']' {
				return i + 1, part{}, false
			}
			i = skipSpace(s.b, i+1) // past the comma
		}
	case '"':
		return stringEnd(s.b, i), part{}, false
	}
	// A number, true, false or null.
	for i < len(s.b) {
		switch s.b[i] {
		case ',', ']', '}', ' ', '\t', '\r', '\n':
			return i, part{}, false
		}
		i++
	}
	return i, part{}, false
}

func (s *partScanner) object(i int) (int, part) {
	var p part
	i = skipSpace(s.b, i+1)
	if s.b[i] == '}' {
		return i + 1, p
	}
	for {
		kEnd := stringEnd(s.b, i)
		key := rawString(s.b[i:kEnd])
		i = skipSpace(s.b, kEnd)
		i = skipSpace(s.b, i+1) // past the colon
		start := i
		var child part
		var isObj bool
		quiet := quietKey(s.d, key)
		if quiet {
			s.quiet++
		}
		i, child, isObj = s.value(i)
		if quiet {
			s.quiet--
		}
		val := s.b[start:i]
		if s.quiet > 0 {
			i = skipSpace(s.b, i)
			if s.b[i] == '}' {
				break
			}
			i = skipSpace(s.b, i+1) // past the comma
			continue
		}
		switch string(key) {
		case "type":
			if p.ntypes++; p.ntypes > maxTypes {
				s.unreadable("a part with more than " + strconv.Itoa(maxTypes) + " type members")
			}
			if t := rawString(val); p.typ == nil {
				p.typ = t
			} else {
				p.moreTypes = append(p.moreTypes, t)
			}
		case "file":
			if isObj && child.fileRef {
				p.fileByURL = true
			}
		case "source":
			if isObj && child.hasType("url") {
				p.sourceURL = true
			}
		case "url":
			if p.url == nil || isURL(val) {
				p.url = val // any one that is a URL, of a repeated key
			}
		case "fileData", "file_data":
			switch {
			case isObj && child.hasURI: // Gemini's file by URI
				p.fileData = string(key)
			case string(key) == "file_data" && isURL(val): // an OpenAI-compatible file's
				p.fileRef = true
			}
		case "fileUri", "file_uri":
			p.hasURI = true
		}
		if bytes.HasSuffix(key, []byte("_url")) {
			if len(p.urls) == maxURLMembers {
				s.unreadable("a part with more than " + strconv.Itoa(maxURLMembers) + " members named *_url")
			}
			u := val
			if isObj {
				u = child.url
			}
			p.urls = append(p.urls, member{key, u})
			if string(key) == "file_url" && isURL(u) {
				p.fileRef = true
			}
		}
		i = skipSpace(s.b, i)
		if s.b[i] == '}' {
			break
		}
		i = skipSpace(s.b, i+1) // past the comma
	}
	if s.quiet == 0 {
		if what := urlPart(s.d, &p); what != "" {
			s.refuse(what)
		}
	}
	return i + 1, p
}

// urlPart says what the content part p is when the provider would fetch it
// from a URL.
func urlPart(d usage.Dialect, p *part) string {
	switch d {
	case usage.Anthropic:
		if p.sourceURL {
			return label(p.typ) + " content from a URL"
		}
	case usage.Chat:
		// image_url, and the video_url, audio_url, file_url parts that
		// OpenAI-compatible providers take: whatever the part's type says.
		// vLLM fetches a part without a type by its image_url, audio_url
		// or video_url member, and an input_image part's image_url given
		// as a string.
		for _, m := range p.urls {
			if isURL(m.val) {
				return label(m.key) + " content from a URL"
			}
		}
		// An OpenAI-compatible file part: {"type":"file","file":{"file_data"
		// or "file_url": a URL}} (a provider such as OpenRouter fetches it).
		if p.fileByURL && p.hasType("file") {
			return "file content from a URL"
		}
	case usage.Responses:
		// input_image, and any other item with an image by URL
		// (computer_screenshot); input_file's file_url.
		for _, m := range p.urls {
			switch {
			case string(m.key) == "image_url" && isURL(m.val):
				return label(p.typ) + " content from a URL"
			case string(m.key) == "file_url" && len(rawString(m.val)) > 0:
				return label(p.typ) + " content from a URL"
			}
		}
	case usage.Gemini:
		if p.fileData != "" {
			return p.fileData + " content from a URI"
		}
	}
	return ""
}

// label names a part by its type in the refusal, the agent's own words
// kept short.
func label(typ []byte) string {
	if len(typ) == 0 || len(typ) > 32 {
		return "a part's"
	}
	return string(typ)
}

// hasType: a "type" member is s.
func (p *part) hasType(s string) bool {
	if p.typ != nil && string(p.typ) == s {
		return true
	}
	for _, t := range p.moreTypes {
		if string(t) == s {
			return true
		}
	}
	return false
}

// rawString is the characters of raw, a JSON string with its quotes: a
// piece of raw itself, decoded only when it holds an escape; nil when raw
// is not a string.
func rawString(raw []byte) []byte {
	if len(raw) < 2 || raw[0] != '"' {
		return nil
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return []byte(s)
}

// isURL: raw is a JSON string a provider may read as a URL to fetch: one
// with a scheme other than data: (inline content, nothing to fetch), or
// scheme-relative (//host/…). Base64, which some parts carry without a
// data: prefix, has no colon (a JPEG's starts "/9j/").
//
// The value is read as a provider's URL parser reads it, not as it is
// written: WHATWG's (Node, browsers) and Python's urlsplit strip leading
// and trailing C0 controls and spaces and delete every tab, newline and
// carriage return, so " http://x", "\u0001http://x" and "h\ttp://x" are
// http://x to them, and vLLM fetches what urlparse gives an http scheme.
// Only the head is decoded (urlHead).
func isURL(raw []byte) bool {
	if len(raw) < 3 || raw[0] != '"' {
		return false // not a string, or empty
	}
	head := urlHead(raw)
	if strings.HasPrefix(head, "//") || strings.HasPrefix(head, `\\`) || strings.HasPrefix(head, `/\`) || strings.HasPrefix(head, `\/`) {
		return true
	}
	scheme, _, ok := strings.Cut(head, ":")
	if !ok || scheme == "" || len(scheme) > 16 || strings.EqualFold(scheme, "data") {
		return false
	}
	for i, c := range scheme {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// urlHeadRunes is how many characters of a value isURL looks at once the
// leading controls and spaces are gone: a scheme of 16 and its colon.
const urlHeadRunes = 20

// urlHead decodes raw, a JSON string with its quotes, as far as it takes to
// have urlHeadRunes characters after WHATWG's preprocessing (leading C0
// controls and spaces dropped, tabs, newlines and carriage returns deleted
// anywhere) and returns them, or as many as raw holds. It reads
// escapes itself, so that a value of megabytes (an image's base64) is not
// decoded whole, however many controls or escapes precede its head.
func urlHead(raw []byte) string {
	var b strings.Builder
	i, end := 1, len(raw)-1
	for i < end && b.Len() < urlHeadRunes {
		c := rune(raw[i])
		n := 1
		if raw[i] == '\\' && i+1 < end {
			n = 2
			switch raw[i+1] {
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'u':
				if i+6 > end {
					return b.String()
				}
				v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
				if err != nil {
					return b.String()
				}
				c, n = rune(v), 6
			default: // \" \\ \/
				c = rune(raw[i+1])
			}
		} else if raw[i] >= utf8.RuneSelf {
			c, n = utf8.DecodeRune(raw[i:end])
		}
		i += n
		switch {
		case c == '\t' || c == '\n' || c == '\r':
		case c <= ' ' && b.Len() == 0:
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// stringEnd is the index after the JSON string that starts at i.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
