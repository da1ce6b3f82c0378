package fakeprovider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// MaxRequestBytes bounds a request body; the CLIs send the whole
// conversation each time, which stays far below this for a script.
const MaxRequestBytes = 32 << 20

// Options configure a Provider.
type Options struct {
	// Script answers requests to the provider's root ("/v1/...").
	Script *Script
	// Scripts answer requests under "/s/NAME/" ("/s/NAME/v1/..."), so one
	// provider serves a suite of fixtures: a run names
	// http://HOST:PORT/s/NAME as its provider URL. Without Script they
	// answer at the root too, each request from the script whose
	// Script.Prompt it carries (the longest, when several do): that is how
	// a HarnessSuite, whose agents have one provider URL for every
	// fixture, runs against one provider.
	Scripts map[string]*Script
	// Log, when set, gets one line per request.
	Log io.Writer
}

// Provider serves the scripted dialects over HTTP.
type Provider struct {
	opts    Options
	mu      sync.Mutex
	recs    []Record
	replies int
}

// Record is what the provider remembers of one request: enough for a test
// to see what a CLI asked and what it was told, and never a credential.
type Record struct {
	// Dialect is anthropic, responses, chat or gemini; empty for a 404.
	Dialect string
	Method  string
	Path    string
	// Script is the script's name under /s/, empty for the root script.
	Script string
	// Model is the model the request named.
	Model string
	// Tools are the tool names offered.
	Tools []string
	// Results counts the tool results in the conversation.
	Results int
	// Action is what the reply did (write, shell, mcp, answer).
	Action ActionKind
	// Tool is the tool the reply called.
	Tool string
	// AuthHeader names the header that carried a credential, and KeySHA256
	// is the first 16 hex digits of its value's SHA-256: a test can see that
	// the planted key arrived without the provider keeping it.
	AuthHeader string
	KeySHA256  string
	// Status is the HTTP status of the reply; Error says why it failed or
	// why the script could not be followed.
	Status int
	Error  string
	// Usage is what the reply said it served (zero for a failed request):
	// a test sums these to check a run's counted usage.
	Usage Usage
}

// Usage is a reply's token figures as the API's UsageStatus counts them:
// input without the cache, output, cache reads and writes. Each reply of a
// provider gets its own figures (see nextUsage), so that a test's sums catch
// a reply counted twice, missed or read into the wrong field.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
	// Model is the model the reply said answered.
	Model string
}

// AnsweredModel is the model the provider says answered a request for
// requested: a dated snapshot of it, as real providers resolve an alias
// ("claude-sonnet-4-5" answered by "claude-sonnet-4-5-20250929"). It differs
// from what was asked, so that a test sees the answering model was read from
// the reply, not copied from the request.
func AnsweredModel(requested string) string {
	if requested == "" {
		requested = "fake-model"
	}
	return requested + AnsweredSuffix
}

// AnsweredSuffix is what AnsweredModel appends.
const AnsweredSuffix = "-20261201"

// nextUsage is the figures of the provider's n-th reply: distinct per
// reply, non-trivial, and different from one field to the next. Only
// Anthropic reports cache writes.
func (p *Provider) nextUsage(dialect string) Usage {
	p.mu.Lock()
	p.replies++
	n := int64(p.replies)
	p.mu.Unlock()
	u := Usage{Input: 1000 + 37*n, Output: 40 + 13*n, CacheRead: 300 + 11*n}
	if dialect == anthropicDialect.name {
		u.CacheWrite = 20 + 7*n
	}
	return u
}

// New returns a provider for opts.
func New(opts Options) *Provider { return &Provider{opts: opts} }

// Requests returns a copy of the requests served so far.
func (p *Provider) Requests() []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Record(nil), p.recs...)
}

// ServeHTTP routes a request to its dialect.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := Record{Method: r.Method, Path: r.URL.Path}
	defer func() { p.record(rec) }()
	script, path, name, ok := p.script(r.URL.Path)
	rec.Script = name
	byPrompt := !ok && !strings.HasPrefix(r.URL.Path, "/s/") && len(p.opts.Scripts) > 0
	if !ok && !byPrompt {
		rec.Status, rec.Error = http.StatusNotFound, "no such script"
		http.Error(w, "no such script", rec.Status)
		return
	}
	// WebSocket upgrades (Codex tries one for /v1/responses) are refused
	// with 404, which every CLI takes as "use plain HTTP".
	d := route(r.Method, path)
	if d == nil || strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		rec.Status = http.StatusNotFound
		http.NotFound(w, r)
		return
	}
	rec.Dialect = d.name
	rec.AuthHeader, rec.KeySHA256 = credentialOf(r)
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err == nil && len(body) > MaxRequestBytes {
		err = fmt.Errorf("request body over %d bytes", MaxRequestBytes)
	}
	if err != nil {
		rec.Status, rec.Error = http.StatusBadRequest, err.Error()
		http.Error(w, err.Error(), rec.Status)
		return
	}
	if byPrompt {
		if name, script = p.scriptByPrompt(body); script == nil {
			rec.Status, rec.Error = http.StatusNotFound, "no fixture's prompt is in this request"
			http.Error(w, "no fixture's prompt is in this request: name the fixture in the URL (/s/NAME)", rec.Status)
			return
		}
		rec.Script = name
	}
	d.serve(&exchange{w: w, r: r, path: path, body: body, script: script, rec: &rec, usage: p.nextUsage(d.name)})
}

func (p *Provider) record(rec Record) {
	p.mu.Lock()
	p.recs = append(p.recs, rec)
	p.mu.Unlock()
	if p.opts.Log != nil {
		line := fmt.Sprintf("%s %s dialect=%s status=%d", rec.Method, rec.Path, rec.Dialect, rec.Status)
		if rec.Model != "" {
			line += " model=" + rec.Model
		}
		if rec.Action != "" {
			line += fmt.Sprintf(" results=%d action=%s", rec.Results, rec.Action)
		}
		if rec.Tool != "" {
			line += " tool=" + rec.Tool
		}
		if rec.Error != "" {
			line += " error=" + strconv.Quote(rec.Error)
		}
		_, _ = fmt.Fprintln(p.opts.Log, line)
	}
}

// script picks the script for path and returns the path below its prefix.
func (p *Provider) script(path string) (*Script, string, string, bool) {
	if rest, ok := strings.CutPrefix(path, "/s/"); ok {
		name, sub, _ := strings.Cut(rest, "/")
		s, ok := p.opts.Scripts[name]
		return s, "/" + sub, name, ok
	}
	return p.opts.Script, path, "", p.opts.Script != nil
}

// scriptByPrompt finds the script whose fixture prompt one of the request
// body's JSON strings holds; the longest prompt wins, since one fixture's
// prompt may begin with another's. Strings are compared decoded, so the
// CLIs' different JSON escapes do not matter.
func (p *Provider) scriptByPrompt(body []byte) (string, *Script) {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return "", nil
	}
	var strs []string
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			strs = append(strs, t)
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(v)
	bestName, best := "", (*Script)(nil)
	for name, s := range p.opts.Scripts {
		if s.Prompt == "" || (best != nil && (len(s.Prompt) < len(best.Prompt) || (len(s.Prompt) == len(best.Prompt) && name > bestName))) {
			continue
		}
		for _, str := range strs {
			if strings.Contains(str, s.Prompt) {
				bestName, best = name, s
				break
			}
		}
	}
	return bestName, best
}

// credentialOf names the header carrying a credential and a short digest
// of its value.
func credentialOf(r *http.Request) (string, string) {
	for _, h := range []string{"X-Api-Key", "X-Goog-Api-Key", "Authorization"} {
		v := r.Header.Get(h)
		if v == "" {
			continue
		}
		v = strings.TrimPrefix(v, "Bearer ")
		sum := sha256.Sum256([]byte(v))
		return strings.ToLower(h), hex.EncodeToString(sum[:8])
	}
	if v := r.URL.Query().Get("key"); v != "" {
		sum := sha256.Sum256([]byte(v))
		return "key", hex.EncodeToString(sum[:8])
	}
	return "", ""
}

// KeyDigest is how Record.KeySHA256 spells a credential value.
func KeyDigest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:8])
}

// exchange is one request being served.
type exchange struct {
	w      http.ResponseWriter
	r      *http.Request
	path   string
	body   []byte
	script *Script
	rec    *Record
	// usage is what the reply reports, once it is sent.
	usage Usage
}

// next runs the script for t and records the outcome.
func (x *exchange) next(t Turn) Action {
	x.rec.Tools, x.rec.Results = t.Tools, len(t.Results)
	a, err := x.script.Next(t)
	if err != nil {
		x.rec.Error = err.Error()
	}
	x.rec.Action, x.rec.Tool = a.Kind, a.Tool
	return a
}

// fail answers with an error status and records why.
func (x *exchange) fail(status int, err error) {
	x.rec.Status, x.rec.Error = status, err.Error()
	http.Error(x.w, err.Error(), status)
}

// writeBody sends a complete body with Content-Length: every CLI accepts
// a whole SSE stream sent at once, and nothing is left half-written.
func (x *exchange) writeBody(contentType string, body []byte) {
	x.rec.Status = http.StatusOK
	x.rec.Usage = x.usage
	x.rec.Usage.Model = AnsweredModel(x.rec.Model)
	x.w.Header().Set("Content-Type", contentType)
	x.w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	x.w.WriteHeader(http.StatusOK)
	_, _ = x.w.Write(body)
}

// SSE builds a text/event-stream body.
type SSE struct{ buf bytes.Buffer }

// Event appends one event; an empty name writes a data-only event.
func (s *SSE) Event(name string, data []byte) {
	if name != "" {
		fmt.Fprintf(&s.buf, "event: %s\n", name)
	}
	fmt.Fprintf(&s.buf, "data: %s\n\n", data)
}

// Bytes is the stream so far.
func (s *SSE) Bytes() []byte { return s.buf.Bytes() }

// dialect is one wire protocol.
type dialect struct {
	name  string
	serve func(x *exchange)
}

// route finds the dialect of a request.
func route(method, path string) *dialect {
	if method != http.MethodPost {
		return nil
	}
	switch {
	case path == "/v1/messages":
		return &anthropicDialect
	case path == "/v1/responses":
		return &responsesDialect
	case path == "/v1/chat/completions":
		return &chatDialect
	case strings.HasPrefix(path, "/v1beta/models/") &&
		(strings.HasSuffix(path, ":streamGenerateContent") || strings.HasSuffix(path, ":generateContent")):
		return &geminiDialect
	}
	return nil
}
