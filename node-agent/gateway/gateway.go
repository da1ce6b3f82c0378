// Package gateway is a run's model gateway: an HTTP reverse proxy, outside
// the sandbox, between the agent's CLI and its model provider. The CLI is
// given a plain-HTTP base URL in the sandbox and a placeholder key; the
// gateway drops every credential the request carries, sets the run's real
// key in the header the provider expects, and forwards the request over TLS
// (verifying the provider's certificate) to the one provider the run names.
// The key never enters the sandbox.
//
// On the way back it streams the response through as it arrives and counts
// what the provider says it served (package usage). It ends the run (Stop)
// when a limit of requests or tokens is reached, when the provider's
// certificate does not verify, and when the provider still fails after its
// retries.
package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// KeyHeader is how a provider takes its API key.
type KeyHeader string

// The providers' key headers.
const (
	// XAPIKey is Anthropic's API-key header.
	XAPIKey KeyHeader = "X-Api-Key"
	// Bearer is "Authorization: Bearer KEY": OpenAI, and Anthropic's auth
	// and OAuth tokens.
	Bearer KeyHeader = "Authorization"
	// XGoogAPIKey is Gemini's API-key header.
	XGoogAPIKey KeyHeader = "X-Goog-Api-Key"
)

// credentialHeaders are dropped from every request, whatever the agent put
// there: the only credential that reaches the provider is the run's.
var credentialHeaders = []string{
	"Authorization", "Proxy-Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key",
	"Cookie", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
}

// overrideHeaders ask a server (Google's front end among them) to take a
// POST for another method: the gateway judges each request by its method
// and path, so the provider must see the same. Dropped from every request.
var overrideHeaders = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// ScopeHeaders choose which of its organizations or projects a key acts
// for: with a user's key that belongs to several, the agent could bill or
// use another than the run's. The gateway drops the agent's and sets those
// the run selected (Options.Scope).
var ScopeHeaders = []string{"OpenAI-Organization", "OpenAI-Project", "X-Goog-User-Project"}

// credentialParams are the query parameters that carry a credential or
// pick a key's project (Google's APIs: ?key=, ?access_token=,
// ?userProject=), dropped from every request.
var credentialParams = []string{"key", "access_token", "userProject"}

// MaxRequestBytes bounds a request body, which the gateway holds to retry
// it; at most MaxHeldBodies are held at once per run (more requests wait),
// so one run's agent holds at most 64 MiB of the node-agent's memory this
// way, whatever it sends (a whole long conversation is a few MiB).
const (
	MaxRequestBytes = 16 << 20
	MaxHeldBodies   = 4
)

// DefaultBodyTimeout bounds the time a request's body may take to arrive
// once it holds its slots. The node's slots are shared by every run on the
// node: an agent that sends a request's headers and then its body slowly,
// or never, would otherwise hold them for its whole episode, and two such
// runs every slot of the node, keeping every other run's agent from its
// provider. A CLI writes its body at once, over a unix socket on the same
// node (16 MiB in milliseconds).
const DefaultBodyTimeout = 30 * time.Second

// maxHeldAnswers bounds the bytes of answers a run's usage parsers hold at
// once (usage.Budget): an event is held whole to be read, up to 4 MiB, and
// a run has up to MaxInFlight answers streaming. 16 MiB is four of the
// largest events at once; a provider's usage events are a few KiB, and
// Responses' closing event, which holds the whole answer, seldom a MiB.
const maxHeldAnswers = 16 << 20

// MaxInFlight bounds a run's model requests with the provider at once (a
// CLI sends a few at a time: its main loop and its subagents).
const MaxInFlight = 16

// Reasons a gateway ends a run (Stop.Reason), documented with the API's.
const (
	ReasonRequestLimit        = harnessv1.ReasonGatewayRequestLimit
	ReasonTokenLimit          = harnessv1.ReasonGatewayTokenLimit
	ReasonProviderCertificate = harnessv1.ReasonProviderCertificateInvalid
	ReasonProviderUnavailable = harnessv1.ReasonProviderUnavailable
	ReasonProviderRefused     = harnessv1.ReasonProviderRefusedCredential
)

// Stop is why the gateway ended the run.
type Stop struct {
	Reason  string
	Message string
	// Infrastructure: the provider or its configuration failed, not the
	// agent (a retry of the run may pass).
	Infrastructure bool
}

func (s *Stop) Error() string { return s.Message }

// Retry says how a 429 or 5xx answer, or a connection that could not be
// made, is retried.
type Retry struct {
	// Attempts is the number of tries of one request (1: no retry).
	Attempts int
	// Base is the first backoff, doubled at each retry (with jitter) up to
	// Max. A provider's own wait (Retry-After, retry-after-ms, Google's
	// RetryInfo) is kept to
	// the letter: one longer than Max is not waited here, the answer goes
	// to the CLI at once, whose own retries honour it.
	Base, Max time.Duration
}

// DefaultRetry is four tries, 0.5 s, 1 s, 2 s apart (or as the provider's
// Retry-After says, if that is at most 8 s).
var DefaultRetry = Retry{Attempts: 4, Base: 500 * time.Millisecond, Max: 8 * time.Second}

// Options configure a gateway.
type Options struct {
	// Upstream is the provider's base URL: https, or http only on the
	// node's loopback (a local model server). A request's path is joined
	// to it.
	Upstream string
	// Header is where the key goes, and Key is the run's key; both empty
	// for a provider that takes none.
	Header KeyHeader
	Key    []byte
	// RootCAs verify the provider's certificate; nil is the system's pool.
	RootCAs *x509.CertPool
	// Scope sets ScopeHeaders (by name) as the run selected them; every
	// other value of them is dropped.
	Scope map[string]string
	// MaxRequests and MaxTokens end the run when reached (0: no limit).
	MaxRequests, MaxTokens int64
	// Budgets name the spend rules charged from the run's count (the
	// namespace's or the suite's token budget): as under MaxTokens, an
	// answer whose tokens cannot be counted ends the run, or the budget
	// would be charged less than the provider served.
	Budgets []string
	// AllowProviderTools forwards requests that ask the provider to reach
	// the network for the agent (providertools.go); without it they get
	// 403.
	AllowProviderTools bool
	// Deadline is the end of the run's episode: no retry waits past it.
	Deadline time.Time
	// Retry is the retry policy (zero: DefaultRetry).
	Retry Retry
	// OnStop is called once, when the gateway ends the run.
	OnStop func(*Stop)
	// MaxHeldBodies bounds the request bodies this run holds at once
	// (0, or more than MaxHeldBodies: MaxHeldBodies): the executor gives
	// each run its share of NodeBodies.
	MaxHeldBodies int
	// NodeBodies, shared by every run's gateway on the node, bounds the
	// request bodies held at once across runs (NewNodeBodies), so that
	// many hostile agents together cannot grow the node-agent past its
	// memory limit; nil bounds each run alone.
	NodeBodies NodeBodies
	// BodyTimeout bounds the time a request's body may take to arrive
	// once the request holds its slots (0: DefaultBodyTimeout).
	BodyTimeout time.Duration
	// Dial connects to the provider; nil is a plain net.Dialer. The
	// node-agent gives egress.Inside's, so that the gateway reaches no
	// inside address (loopback but the providerURL's port, private,
	// cluster, metadata) that the run's egress may not: a refusal there
	// (egress.ErrInside) ends the run with PolicyViolation, unretried.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func heldBodies(n int) int {
	if n <= 0 || n > MaxHeldBodies {
		return MaxHeldBodies
	}
	return n
}

// NodeBodies are the node's slots of held request bodies.
type NodeBodies chan struct{}

// NewNodeBodies bounds the node's held request bodies to about maxBytes
// (at least one run's worth), in slots of MaxRequestBytes.
func NewNodeBodies(maxBytes int64) NodeBodies {
	return make(NodeBodies, max(maxBytes/MaxRequestBytes, MaxHeldBodies))
}

// Gateway serves one run's model requests.
type Gateway struct {
	opts     Options
	upstream *url.URL
	proxy    *httputil.ReverseProxy
	// keyPats are the forms of the run's key masked in every answer.
	keyPats  [][]byte
	tally    usage.Tally
	requests atomic.Int64
	// refusedTools counts the requests refused for a network tool.
	refusedTools atomic.Int64
	// cutShort: the agent cut an answer before its closing token figures
	// (countingBody), so what it was served is not known.
	cutShort atomic.Bool
	// failing is the provider's failures since the last request it
	// answered, those that went to the CLI after the gateway's tries (nil
	// when it answered last); handedOver counts such requests in all.
	failingMu  sync.Mutex
	failing    *failure
	handedOver atomic.Int64
	// served: a model answer ended whole at least once in this run, so
	// the provider URL serves a model (a later 404 is not the URL's).
	served atomic.Bool

	stopOnce sync.Once
	stopped  atomic.Pointer[Stop]
	// held are the slots of request bodies held at once.
	held chan struct{}
	// inFlight are the slots of requests with the provider at once.
	inFlight chan struct{}
	// answers bounds what the run's usage parsers hold at once.
	answers *usage.Budget
}

// releaseKey carries a request's release of its held body to the
// retrier, which lets it go once the provider has answered.
type releaseKey struct{}

// CheckUpstream refuses a provider URL the gateway would not send a key to:
// not http(s), a user or a query in it, or plain http beyond the node's
// loopback (the key would cross the network in clear).
func CheckUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("provider URL %q: %w", raw, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("provider URL %q: not an http(s) URL", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("provider URL %q: the model gateway takes a base URL without a user, query or fragment", raw)
	}
	if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("provider URL %q: the model gateway sends the run's key only over https, or plain http on this node's loopback", raw)
	}
	return u, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// New returns the gateway of one run.
func New(opts Options) (*Gateway, error) {
	up, err := CheckUpstream(opts.Upstream)
	if err != nil {
		return nil, err
	}
	// A key read from a file (kubectl create secret --from-file) usually
	// ends in a newline: white space around a header's value is no part of
	// it (RFC 9110), and a control character inside cannot be sent at all.
	opts.Key = bytes.TrimSpace(opts.Key)
	if bytes.ContainsFunc(opts.Key, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return nil, errors.New("the run's model key holds a control character, which no HTTP header can carry")
	}
	switch {
	case len(opts.Key) == 0 && opts.Header != "":
		return nil, fmt.Errorf("the model gateway has no key for header %s", opts.Header)
	case len(opts.Key) == 0:
		// A provider that needs no key (a local model server): the
		// gateway still counts, bounds and strips what the agent sends.
	case opts.Header != XAPIKey && opts.Header != Bearer && opts.Header != XGoogAPIKey:
		return nil, fmt.Errorf("unknown key header %q", opts.Header)
	}
	scope := map[string]string{}
	for h, v := range opts.Scope {
		v = strings.TrimSpace(v)
		switch {
		case !slices.ContainsFunc(ScopeHeaders, func(s string) bool { return strings.EqualFold(s, h) }):
			return nil, fmt.Errorf("%q is not a header that scopes a key (%s)", h, strings.Join(ScopeHeaders, ", "))
		case v == "" || strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }):
			return nil, fmt.Errorf("the run's %s is empty or holds a control character, which no HTTP header can carry", h)
		}
		scope[h] = v
	}
	opts.Scope = scope
	if opts.Retry.Attempts == 0 {
		opts.Retry = DefaultRetry
	}
	g := &Gateway{opts: opts, upstream: up, keyPats: keyPatterns(opts.Key), held: make(chan struct{}, heldBodies(opts.MaxHeldBodies)), inFlight: make(chan struct{}, MaxInFlight),
		answers: usage.NewBudget(maxHeldAnswers)}
	dial := opts.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	base := &http.Transport{
		// The provider directly: never the node's own proxy settings.
		Proxy:                 nil,
		DialContext:           dial,
		TLSClientConfig:       &tls.Config{RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 10 * time.Minute,
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      &retrier{g: g, base: base},
		FlushInterval:  -1,
		ModifyResponse: g.answer,
		ErrorHandler:   g.fail,
	}
	return g, nil
}

// Tally is the run's usage so far.
func (g *Gateway) Tally() *usage.Tally { return &g.tally }

// RefusedProviderTools is the number of requests refused because they
// asked the provider to reach the network.
func (g *Gateway) RefusedProviderTools() int64 { return g.refusedTools.Load() }

// failure is a span of the provider's failures with no answer between.
type failure struct {
	first, last time.Time
	requests    int
	// rateLimited: a 429 was among them. An agent can cause one itself
	// (one large request spends the key's window), so rate limits count
	// only when they last (rateLimitSpan, rateLimitRequests).
	rateLimited bool
	// refused: the last of them refused the run's credential or its
	// account (refusal), which no retry of the CLI's mends; refusals
	// counts those in a row.
	refused  bool
	refusals int
	what     string // the last failure, for the message
}

// refusalsToStop is how many refusals in a row, with no answer between,
// end the run: a CLI may retry a refused key for minutes (Claude Code
// tries ten times over about three), and a key refused thrice is not
// taken on the fourth.
const refusalsToStop = 3

// A span of rate limits judges the run only once it held for a minute
// across three requests of the agent's (its CLI's own retries, waiting as
// told): a provider limited by others' use (a key shared by a suite's
// runs), not one request of the agent's own.
const (
	rateLimitSpan     = time.Minute
	rateLimitRequests = 3
)

// ProviderFailing is why the provider, not the agent, is what the run shows
// if the agent does not pass, or nil: the agent's last model requests had
// the provider's failure for their answer (the CLI had it, the run went
// on), with no answer since, and the failure held: a 5xx or an unreachable
// provider after the gateway's tries, or rate limits for rateLimitSpan
// across rateLimitRequests requests.
func (g *Gateway) ProviderFailing() *Stop {
	g.failingMu.Lock()
	defer g.failingMu.Unlock()
	f := g.failing
	if f == nil {
		return nil
	}
	if f.refused {
		return g.refusedStop(f)
	}
	if f.rateLimited && (f.requests < rateLimitRequests || f.last.Sub(f.first) < rateLimitSpan) {
		return nil
	}
	return &Stop{Reason: ReasonProviderUnavailable, Infrastructure: true,
		Message: fmt.Sprintf("the provider %s failed the agent's last %d model requests, over %s with no answer between (the last: %s); each failure went to the agent's CLI",
			g.upstream.Redacted(), f.requests, f.last.Sub(f.first).Round(time.Second), f.what)}
}

// refusedStop is why a span ending in refusals ends the run.
func (g *Gateway) refusedStop(f *failure) *Stop {
	return &Stop{Reason: ReasonProviderRefused, Infrastructure: true,
		Message: fmt.Sprintf("the provider %s refused the run's credential or its account at the agent's last %d model requests, with no answer between (the last: %s); each refusal went to the agent's CLI",
			g.upstream.Redacted(), f.requests, f.what)}
}

// providerFailed notes a failure handed to the CLI; providerAnswered ends
// the span. The refusalsToStop-th refusal in a row ends the run.
func (g *Gateway) providerFailed(what string, rateLimited, refused bool) {
	g.handedOver.Add(1)
	now := time.Now()
	g.failingMu.Lock()
	if g.failing == nil {
		g.failing = &failure{first: now}
	}
	f := g.failing
	f.last, f.what = now, what
	f.requests++
	f.rateLimited = f.rateLimited || rateLimited
	f.refused = refused
	if refused {
		f.refusals++
	} else {
		f.refusals = 0
	}
	var stop *Stop
	if f.refusals >= refusalsToStop {
		stop = g.refusedStop(f)
	}
	g.failingMu.Unlock()
	if stop != nil {
		g.stop(stop)
	}
}

func (g *Gateway) providerAnswered() {
	g.failingMu.Lock()
	g.failing = nil
	g.failingMu.Unlock()
}

// ProviderErrorsHandedOver is the number of model requests whose provider
// failure (after the gateway's tries) went to the agent's CLI as its answer.
func (g *Gateway) ProviderErrorsHandedOver() int64 { return g.handedOver.Load() }

// Stopped is why the gateway ended the run, nil while it has not.
func (g *Gateway) Stopped() *Stop { return g.stopped.Load() }

func (g *Gateway) stop(s *Stop) {
	g.stopOnce.Do(func() {
		g.stopped.Store(s)
		if g.opts.OnStop != nil {
			g.opts.OnStop(s)
		}
	})
}

// allowed says whether a request of method to path p is a call of the
// model API: the gateway carries the run's key to nothing else of the
// provider's API (files, batches, keys, fine-tuning, admin). Generation
// is POST only: a GET of /v1/chat/completions lists the completions the
// key's project stored, other runs' prompts and answers among them.
// Models are described by GET only.
func allowed(method, p string) bool {
	switch p {
	case "/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/responses/compact", "/v1/chat/completions":
		return method == http.MethodPost
	case "/v1/models", "/v1beta/models":
		return method == http.MethodGet
	}
	for _, prefix := range []string{"/v1/models/", "/v1beta/models/"} {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok || rest == "" || strings.Contains(rest, "/") {
			continue
		}
		// A model itself (its description), or one of the methods the
		// CLIs call on it. Not the others: Gemini's batchGenerateContent
		// and predictLongRunning start jobs that outlive the run, and
		// none of embedContent, predict and the rest would be counted
		// (usage reads generateContent's answers).
		model, m, found := strings.Cut(rest, ":")
		switch {
		case model == "":
		case !found:
			return method == http.MethodGet
		case slices.Contains(geminiMethods, m):
			return method == http.MethodPost
		}
	}
	return false
}

// geminiMethods are the model methods the gateway forwards: the two the
// CLIs generate with, and countTokens (free), which Gemini CLI calls.
var geminiMethods = []string{"generateContent", "streamGenerateContent", "countTokens"}

// ServeHTTP forwards one request of the agent's CLI.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s := g.Stopped(); s != nil {
		http.Error(w, "the model gateway ended this run: "+s.Message, http.StatusTooManyRequests)
		return
	}
	// The path as sent, unescaped once and clean: no "..", no encoded
	// slash, so what is checked is what the provider gets.
	p := r.URL.Path
	if r.URL.RawPath != "" || path.Clean(p) != p || !allowed(http.MethodPost, p) && !allowed(http.MethodGet, p) {
		http.Error(w, fmt.Sprintf("the model gateway forwards only the model API (messages, responses, chat completions, models), not %q", p), http.StatusForbidden)
		return
	}
	if len(r.Header.Values("Upgrade")) > 0 {
		// No protocol upgrade of any kind: a switched connection is a raw
		// tunnel to the provider, with the run's key on its request and
		// nothing of it counted or limited. Codex tries a WebSocket first;
		// a 404 makes it use plain HTTP. (Only the exact "websocket" was
		// refused before; "websocket, x", "h2c" or any other token went
		// through httputil.ReverseProxy's upgrade path.)
		http.NotFound(w, r)
		return
	}
	// After the upgrade's 404, which Codex's WebSocket GET must get.
	if !allowed(r.Method, p) {
		http.Error(w, fmt.Sprintf("the model gateway forwards no %s of %q", r.Method, p), http.StatusMethodNotAllowed)
		return
	}
	// At most MaxInFlight of the run's requests are with the provider at
	// once; more wait. Tokens are counted when an answer ends, so this is
	// also what a run can spend past its token limit (MaxInFlight answers),
	// and one run cannot take the provider's rate limit, which the runs
	// sharing a key share, with the 64 connections its socket serves.
	select {
	case g.inFlight <- struct{}{}:
		defer func() { <-g.inFlight }()
	case <-r.Context().Done():
		return
	}
	// A request that waited is judged by the limits as they are now.
	if s := g.Stopped(); s != nil {
		http.Error(w, "the model gateway ended this run: "+s.Message, http.StatusTooManyRequests)
		return
	}
	if n := g.requests.Add(1); g.opts.MaxRequests > 0 && n > g.opts.MaxRequests {
		g.stop(&Stop{Reason: ReasonRequestLimit, Message: fmt.Sprintf("the agent's model requests reached the run's limit of %d (HarnessPolicy gateway.maxRequestsPerRun)", g.opts.MaxRequests)})
		http.Error(w, "the model gateway's request limit for this run is reached", http.StatusTooManyRequests)
		return
	}
	if g.opts.MaxTokens > 0 && g.tally.Counts().Total() >= g.opts.MaxTokens {
		g.stop(g.tokenStop())
		http.Error(w, "the model gateway's token limit for this run is reached", http.StatusTooManyRequests)
		return
	}
	if g.mustCount() && g.cutShort.Load() {
		// The cut answer itself did not end the run (the agent's own end
		// cuts its last answer), but an agent that goes on could cut each
		// answer once it has the text it wants, before the provider's
		// figures, and spend without limit.
		g.stop(&Stop{Reason: ReasonTokenLimit, Message: fmt.Sprintf("the agent cut an answer short before the provider's closing token figures and went on with another model request: "+
			"the tokens it was served could not be counted, so %s could not be held: %d counted before it",
			g.countLimit(), g.tally.Counts().Total())})
		http.Error(w, "the model gateway's token count for this run cannot be kept: an earlier answer was cut short before its token figures", http.StatusTooManyRequests)
		return
	}
	// The body is held (bounded, for the run and for the node) so that a
	// retry can send it again.
	select {
	case g.held <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	node := g.opts.NodeBodies
	if node != nil {
		select {
		case node <- struct{}{}:
		case <-r.Context().Done():
			<-g.held
			return
		}
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			if node != nil {
				<-node
			}
			<-g.held
		})
	}
	defer release()
	// The body must arrive within the body timeout: the slots are the
	// node's. The deadline is lifted once it has: a read deadline that
	// passed during a long streamed answer would end the request.
	rc := http.NewResponseController(w)
	bodyTimeout := cmp.Or(g.opts.BodyTimeout, DefaultBodyTimeout)
	if err := rc.SetReadDeadline(time.Now().Add(bodyTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		http.Error(w, "reading the request: "+err.Error(), http.StatusInternalServerError)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			http.Error(w, fmt.Sprintf("the model gateway takes a request's body within %s: the node's other runs share what it holds", bodyTimeout), http.StatusRequestTimeout)
			return
		}
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	_ = rc.SetReadDeadline(time.Time{})
	if len(body) > MaxRequestBytes {
		http.Error(w, fmt.Sprintf("the model gateway takes request bodies of at most %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
		return
	}
	// A generation request is read, once: for the provider's network
	// tools (providertools.go), for a Responses request that would run in
	// the background, and for a streamed Chat Completions request's usage
	// (chatusage.go). One that cannot be read is refused: compressed, or
	// not a JSON object as Go reads it (what a more lenient parser, taking
	// NaN or a byte-order mark, makes of it cannot be known). No CLI sends
	// either.
	d := requestDialect(p)
	var req request
	if d != "" {
		if enc := encoded(r.Header); enc != "" {
			http.Error(w, fmt.Sprintf("the model gateway reads each model request, and cannot read one sent with Content-Encoding %q: send it uncompressed", enc), http.StatusUnsupportedMediaType)
			return
		}
		if req = parseRequest(body); req == nil {
			http.Error(w, fmt.Sprintf("the model gateway forwards only model requests whose body is a JSON object of at most %d members", maxMembers), http.StatusBadRequest)
			return
		}
		if d == usage.Responses && !isFalse(req["background"]) {
			// A background response runs on after its answer, past the
			// run's end, and its usage is never in that answer. Anything
			// but false (or none) is refused: a lenient provider reads
			// "true" or 1 as true.
			http.Error(w, `the model gateway does not forward background responses ("background": true): they run on past the run, uncounted`, http.StatusForbidden)
			return
		}
		tool, err := networkTool(d, req)
		if err != nil {
			http.Error(w, "the model gateway reads each model request for content the provider would fetch, and will not read this one: "+err.Error(), http.StatusBadRequest)
			return
		}
		if tool != "" && !g.opts.AllowProviderTools {
			g.refusedTools.Add(1)
			http.Error(w, refusedToolMessage(tool), http.StatusForbidden)
			return
		}
	}
	asked, agents := false, body
	if d == usage.Chat {
		body, asked = askForUsage(body, req)
	}
	r.Body = http.NoBody
	if len(body) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	// The body is held whole: it goes with its length, not in the
	// chunks the agent may have sent it in.
	r.ContentLength, r.TransferEncoding = int64(len(body)), nil
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	// status.usage.requests counts the model requests, those whose
	// answers are read for usage: not a count of tokens (free) nor a
	// listing of models, which the provider serves without a model.
	if usage.DialectOf(p) != "" {
		g.tally.Request()
	}
	ctx := context.WithValue(r.Context(), releaseKey{}, release)
	if asked {
		ctx = context.WithValue(ctx, askedUsageKey{}, true)
		ctx = context.WithValue(ctx, agentsBodyKey{}, agentsBody(agents, body))
	}
	g.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// requestDialect is the dialect of a model request's body: a generation
// request's, or, for a count of tokens (free, never counted), the
// generation request it counts, which the provider reads the same way (its
// tools, and an MCP connector it would connect to for their definitions).
func requestDialect(p string) usage.Dialect {
	switch {
	case p == "/v1/messages/count_tokens":
		return usage.Anthropic
	case strings.HasSuffix(p, ":countTokens"):
		return usage.Gemini
	}
	return usage.DialectOf(p)
}

// encoded is the first coding other than identity among every
// Content-Encoding header's values, "" when there is none: a second header
// or a list ("identity, br") is how the provider would read it too.
func encoded(h http.Header) string {
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return c
			}
		}
	}
	return ""
}

// askedUsageKey marks a request the gateway made to ask for its usage.
type askedUsageKey struct{}

// agentsBodyKey holds what gives back the body the agent sent, before the
// gateway asked for its usage (agentsBody): sent instead to a provider
// that refuses the ask.
type agentsBodyKey struct{}

// agentsBody returns what rebuilds the body the agent sent from sent, the
// same with the gateway's ask for usage. In the common case (askForUsage
// added the option before the object's last '}') it is cut out of sent
// again when needed, so that no second copy of a body of up to 16 MiB is
// held for every Chat request; else the agent's own is kept.
func agentsBody(agent, sent []byte) func() []byte {
	end, added := bytes.LastIndexByte(agent, '}'), ","+usageOption
	if end >= 0 && len(sent) == len(agent)+len(added) && string(sent[end:end+len(added)]) == added {
		return func() []byte { return slices.Concat(sent[:end], sent[end+len(added):]) }
	}
	return func() []byte { return agent }
}

// refusesUsageAsk says whether resp is a provider's refusal of the
// stream_options the gateway added (a server that refuses what it does
// not know, an older API version: "Unrecognized request argument supplied:
// stream_options"; a server whose request model forbids extra fields,
// FastAPI's and pydantic's 422).
func refusesUsageAsk(resp *http.Response) bool {
	return (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnprocessableEntity) &&
		bytes.Contains(peekBody(resp), []byte("stream_options"))
}

// mustCount says whether every answer's tokens must be counted: a token
// limit or a spend budget depends on the count.
func (g *Gateway) mustCount() bool { return g.opts.MaxTokens > 0 || len(g.opts.Budgets) > 0 }

// countLimit names what the count is for, in a Stop's message.
func (g *Gateway) countLimit() string {
	var what []string
	if g.opts.MaxTokens > 0 {
		what = append(what, fmt.Sprintf("the run's limit of %d tokens (HarnessPolicy gateway.maxTokensPerRun)", g.opts.MaxTokens))
	}
	if len(g.opts.Budgets) > 0 {
		what = append(what, fmt.Sprintf("the token budgets charged from the run's count (%s)", strings.Join(g.opts.Budgets, ", ")))
	}
	return strings.Join(what, " and ")
}

func (g *Gateway) tokenStop() *Stop {
	return &Stop{Reason: ReasonTokenLimit, Message: fmt.Sprintf("the tokens the provider served reached the run's limit of %d (HarnessPolicy gateway.maxTokensPerRun): %d counted",
		g.opts.MaxTokens, g.tally.Counts().Total())}
}

// rewrite points the request at the run's provider, whatever its Host
// header or absolute URL said, and swaps the credentials.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(g.upstream) // also sets Out.Host to the upstream's
	out := pr.Out
	// The query is written again from what Go reads of it: a pair it
	// cannot read (a semicolon in it) is dropped rather than passed on for
	// the provider to read its own way, and so are Google's credential and
	// scope parameters (which the API also takes with a "$").
	q, _ := url.ParseQuery(out.URL.RawQuery)
	for _, k := range credentialParams {
		q.Del(k)
		q.Del("$" + k)
	}
	out.URL.RawQuery = q.Encode()
	// No trailers: a chunked body's trailer fields, which the agent
	// writes, would reach the provider after the body, past the headers
	// dropped and set here (a server that merges them into the headers
	// reads a forged key or scope). No model API takes any.
	out.Trailer = nil
	for _, h := range credentialHeaders {
		out.Header.Del(h)
	}
	for _, h := range overrideHeaders {
		out.Header.Del(h)
	}
	for _, h := range ScopeHeaders {
		out.Header.Del(h)
	}
	for h, v := range g.opts.Scope {
		out.Header.Set(h, v)
	}
	// What the gateway checked it read as JSON (a body that is not a
	// JSON object gets 400): the provider reads it as JSON too, never as
	// another type the agent names (Google's APIs take protobuf).
	if out.Method == http.MethodPost {
		out.Header.Set("Content-Type", "application/json")
	}
	// The transport asks for gzip itself and hands back the plain body,
	// which the usage count reads; the CLI gets it uncompressed.
	out.Header.Del("Accept-Encoding")
	switch {
	case len(g.opts.Key) == 0:
	case g.opts.Header == Bearer:
		out.Header.Set("Authorization", "Bearer "+string(g.opts.Key))
	default:
		out.Header.Set(string(g.opts.Header), string(g.opts.Key))
	}
}

// answer is what the agent gets of the provider's answer: counted, and
// with the run's key masked wherever the provider echoed it (keyscrub.go).
func (g *Gateway) answer(resp *http.Response) error {
	err := g.count(resp)
	scrubAnswer(resp, g.keyPats)
	return err
}

// count tees the response body into a usage parser as it streams by; a
// stream the gateway asked the usage of loses that chunk after it.
func (g *Gateway) count(resp *http.Response) error {
	d := usage.DialectOf(resp.Request.URL.Path)
	if d == "" || resp.StatusCode/100 != 2 {
		return nil
	}
	if ce := strings.TrimSpace(resp.Header.Get("Content-Encoding")); ce != "" && !strings.EqualFold(ce, "identity") && g.mustCount() {
		// The transport asked for gzip only and decodes it: another
		// encoding is the provider's own choice, and its figures cannot
		// be read (the answer goes on to the CLI as it came).
		g.stop(&Stop{Reason: ReasonTokenLimit, Message: fmt.Sprintf("the provider answered a model request in an encoding the gateway did not ask for (Content-Encoding: %s), "+
			"so its token figures could not be read and %s could not be held: %d counted before it",
			errorToken(ce), g.countLimit(), g.tally.Counts().Total())})
	}
	ct := resp.Header.Get("Content-Type")
	resp.Body = &countingBody{rc: resp.Body, p: usage.NewParser(d, ct, g.answers), ctx: resp.Request.Context(), done: g.counted}
	// Whatever its Content-Type says: a provider may stream its events
	// under none (the count reads them all the same), and the filter
	// passes a body without events on as it is.
	if asked, _ := resp.Request.Context().Value(askedUsageKey{}).(bool); asked {
		resp.Body = newUsageChunkFilter(resp.Body)
		// The agent gets fewer bytes than the provider sent.
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	return nil
}

// counted takes one answer's figures. Under a token limit, an answer that
// arrived whole without figures ends the run: its tokens cannot be
// counted, so the limit could not hold (an agent could ask that way on
// purpose). One the agent cut short is counted as uncounted only: the
// agent's own end (a timeout, a kill) cuts its last answer, and that is
// not the run's reason. So is one that carried an error (a stream that
// failed on the provider's side), which is not the agent's doing. One the
// agent cut before its closing figures (cut) is noted, for the next
// request to end the run under a token limit. One whose closing figures
// may have been in a part too large to read (r.Unread, not final) ends it
// at once.
func (g *Gateway) counted(r usage.Reply, whole, cut, final bool) {
	if !r.Failed && whole {
		g.served.Store(true)
	}
	if r.Failed {
		// An error in place of the answer's end, after a 2xx: the
		// provider failed this request as with a 5xx (each went to the
		// agent's CLI), and a run of them is the provider's, not the
		// agent's (ProviderFailing).
		g.providerFailed("an error in the provider's streamed answer, after its 200", false, false)
	} else {
		g.providerAnswered()
	}
	if r.Found && (r.Unread || cut) && !final {
		// Figures were read, but not the answer's closing ones (an
		// event too large to read, or the agent cut the answer before
		// them: an Anthropic stream after message_start, a Gemini one
		// before its end): what they count goes in, and the answer
		// counts as uncounted too (status.usage.uncountedResponses), so
		// that the status says its figures are a lower bound, without a
		// limit as with one.
		r.Found = false
	}
	g.tally.Add(r)
	if cut {
		g.cutShort.Store(true)
	}
	switch {
	case !g.mustCount():
	case whole && !r.Failed && r.Unread && !final:
		g.stop(&Stop{Reason: ReasonTokenLimit, Message: fmt.Sprintf("the provider's answer to a model request was too large to read for its token figures "+
			"(an event over 4 MiB, or more than the %d MiB of answers a run's gateway holds at once to read them), "+
			"so %s could not be held: %d counted before it",
			maxHeldAnswers>>20, g.countLimit(), g.tally.Counts().Total())})
	case !r.Found && whole && !r.Failed:
		g.stop(&Stop{Reason: ReasonTokenLimit, Message: fmt.Sprintf("the provider's answer to a model request carried no token figures "+
			"(a provider that does not report usage, or one that ignored the stream_options the gateway set), "+
			"so %s could not be held: %d counted before it",
			g.countLimit(), g.tally.Counts().Total())})
	case whole && !r.Failed && !final:
		// An Anthropic stream that ended without its message_delta, or a
		// Responses stream without its terminal event but with figures
		// before it: its output went uncounted (message_start's figure
		// is its first token). A provider of these APIs always sends one.
		g.stop(&Stop{Reason: ReasonTokenLimit, Message: fmt.Sprintf("the provider's answer to a model request ended without its closing token figures "+
			"(a Messages stream without message_delta, a Responses stream without response.completed, or a Gemini answer without its finishReason and output figures), so its output could not be counted and "+
			"%s could not be held: %d counted before it",
			g.countLimit(), g.tally.Counts().Total())})
	case g.opts.MaxTokens > 0 && g.tally.Counts().Total() >= g.opts.MaxTokens:
		g.stop(g.tokenStop())
	}
}

// countingBody feeds what is read through it to a parser, and reports the
// reply once, at the end of the body or when it is closed early: whole, or
// cut by the agent before the answer's closing figures (cut).
type countingBody struct {
	rc io.ReadCloser
	p  *usage.Parser
	// ctx is the agent's request's: ended when the agent went away.
	ctx  context.Context
	once sync.Once
	done func(r usage.Reply, whole, cut, final bool)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		_, _ = b.p.Write(p[:n])
	}
	if err != nil {
		// Not the end: the agent went away (its request's context
		// ended), or else the provider's connection failed. An end
		// without the answer's closing figures that came after the agent
		// went away is its cut too (the provider's handler can end the
		// stream as it sees the connection go, before the transport
		// drops it). With them, the provider served the answer whole,
		// whenever the agent closed: an agent that closes each answer
		// as its last event arrives must not keep the gateway from ever
		// seeing one whole (served), which makes a later 404 the
		// request's rather than the provider URL's.
		gone := b.ctx.Err() != nil
		whole := errors.Is(err, io.EOF) && (!gone || b.p.Final())
		b.finish(whole, !whole && gone)
	}
	return n, err
}

// Close before the end: the proxy stopped because writing to the agent
// failed.
func (b *countingBody) Close() error {
	b.finish(false, true)
	return b.rc.Close()
}

func (b *countingBody) finish(whole, byAgent bool) {
	b.once.Do(func() {
		r := b.p.Result()
		b.done(r, whole, byAgent && !b.p.Final() && !r.Failed, b.p.Final())
	})
}

// fail answers a request the provider could not be asked; a certificate
// that does not verify ends the run.
func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, err error) {
	var cert *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &cert) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) {
		g.stop(&Stop{Reason: ReasonProviderCertificate, Infrastructure: true,
			Message: fmt.Sprintf("the provider %s presented a TLS certificate that does not verify: %v", g.upstream.Redacted(), err)})
		http.Error(w, "the model gateway could not verify the provider's certificate", http.StatusBadGateway)
		return
	}
	var s *Stop
	if errors.As(err, &s) {
		http.Error(w, s.Message, http.StatusBadGateway)
		return
	}
	if r.Context().Err() != nil {
		return // the CLI went away
	}
	http.Error(w, "the model gateway could not reach the provider: "+err.Error(), http.StatusBadGateway)
}

// retrier retries a request the provider answered 429 or 5xx, or whose
// connection could not be made, with backoff, within the run's deadline.
// Only then: the provider did no work (an error status carries no model
// output; a failed dial sent nothing), so a second try is no second answer.
// It never tries again before the provider said it may (Retry-After,
// retry-after-ms, or Google's RetryInfo in the error body: bodyWait), nor at all when it said not to (x-should-retry: false)
// or asked for longer than the policy's Max. A request still failing then
// does not end the run: its last answer goes to the CLI, whose own retries
// (Claude Code waits out a Retry-After of 30 s) are part of what the run
// shows, and the gateway remembers the failure (ProviderFailing) until the
// provider answers a later request.
type retrier struct {
	g    *Gateway
	base http.RoundTripper
}

func (t *retrier) RoundTrip(req *http.Request) (*http.Response, error) {
	// The body is no longer needed once the provider has answered.
	if release, ok := req.Context().Value(releaseKey{}).(func()); ok {
		defer release()
	}
	pol := t.g.opts.Retry
	for attempt := 1; ; attempt++ {
		r := req
		if attempt > 1 {
			r = req.Clone(req.Context())
			r.Body = nil
			if req.ContentLength > 0 {
				body, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				r.Body = body
			}
		}
		resp, err := t.base.RoundTrip(r.WithContext(maskInformational(r.Context(), t.g.keyPats)))
		if rebuild, ok := req.Context().Value(agentsBodyKey{}).(func() []byte); ok && err == nil && refusesUsageAsk(resp) {
			// The provider refuses the ask for usage the gateway added:
			// the agent's own request goes once more, as it sent it, and
			// its answer, without figures, counts as uncounted. Not a
			// try of the retry policy: nothing failed on the provider's
			// side.
			_ = resp.Body.Close()
			agent := rebuild()
			ctx := context.WithValue(context.WithValue(req.Context(), askedUsageKey{}, false), agentsBodyKey{}, nil)
			req = req.Clone(ctx)
			req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(agent)), int64(len(agent))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(agent)), nil }
			attempt--
			continue
		}
		if errors.Is(err, egress.ErrInside) {
			t.g.stop(&Stop{Reason: harnessv1.ReasonPolicyViolation,
				Message: fmt.Sprintf("the model gateway did not connect to the provider %s: %v", t.g.upstream.Redacted(), err)})
			return nil, err
		}
		// Only a model request's refusal judges the key: a key may be
		// kept from listing models and not from asking them, and the
		// agent chooses to list them (three refused lists would have
		// ended its run as the key's failure).
		if err == nil && req.Method == http.MethodPost {
			if what, ok := refusal(resp); ok {
				// Not retried, here or by the CLI's retries to any
				// avail: the key or the account is what failed.
				t.g.providerFailed(what, false, true)
				return resp, nil
			}
		}
		retriable := err == nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500) || err != nil && isDialError(err)
		if !retriable {
			// A model answer the gateway reads (a 2xx of a model API)
			// is judged when it ends (counted): a provider that fails
			// after its status line (Anthropic's error event, a
			// Responses stream's response.failed, an in-band error of
			// an OpenAI-compatible router) answered nothing.
			switch {
			case err != nil:
			case req.Method == http.MethodPost && usage.DialectOf(req.URL.Path) != "" && !t.g.served.Load() &&
				(resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed):
				// No model answers there: a provider URL (or a model)
				// the provider does not serve. A run of them is the
				// run's configuration, not the agent's failure. Only
				// before any answer: once one came, the URL serves, and
				// a 404 is the request's (the agent can send its own
				// through the relay, a model named "nope" to turn its
				// Fail into the provider's Error).
				t.g.providerFailed(fmt.Sprintf("%d %s to POST %s (check spec.agent.providerURL and spec.agent.model)",
					resp.StatusCode, http.StatusText(resp.StatusCode), req.URL.Path), false, false)
			case resp.StatusCode/100 != 2 || usage.DialectOf(req.URL.Path) == "":
				t.g.providerAnswered()
			}
			return resp, err
		}
		wait := backoff(pol, attempt)
		asked, hasAsked := providerWait(resp, time.Now())
		if !hasAsked && resp != nil {
			asked, hasAsked = bodyWait(resp)
		}
		if hasAsked {
			wait = asked
		}
		var why string
		switch {
		case resp != nil && strings.EqualFold(strings.TrimSpace(resp.Header.Get("X-Should-Retry")), "false"):
			why = "it said not to retry (x-should-retry: false)"
		case hasAsked && asked > pol.Max:
			why = fmt.Sprintf("it asked for a wait of %s before the next try", asked.Round(time.Millisecond))
		case attempt >= pol.Attempts:
			why = fmt.Sprintf("after %d tries", attempt)
		case !t.g.opts.Deadline.IsZero() && time.Now().Add(wait).After(t.g.opts.Deadline):
			why = fmt.Sprintf("after %d tries: the episode ends before the next", attempt)
		}
		if why != "" {
			what := ""
			if err != nil {
				what = err.Error()
			} else {
				what = "HTTP " + resp.Status
			}
			t.g.providerFailed(what+", "+why, resp != nil && resp.StatusCode == http.StatusTooManyRequests, false)
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
		}
		select {
		case <-time.After(wait):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
}

// refusal says whether the provider's answer refuses the run's credential
// or its account, as the providers document it: 401 (a key not valid or
// revoked: Anthropic's authentication_error, OpenAI's invalid_api_key),
// 402 (Anthropic's billing_error, a router's credits spent), OpenAI's 429
// insufficient_quota (a spent balance, not a rate limit: waiting mends
// nothing) and Gemini's 400 whose ErrorInfo reason is API_KEY_INVALID.
// The agent cannot cause these with the run's key: the gateway replaces
// every credential and scope header it sends. A refusal's body is read up
// to maxErrorPeek and goes on to the CLI whole; what is returned names the
// status and the provider's error code, nothing of its message.
func refusal(resp *http.Response) (string, bool) {
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusPaymentRequired, http.StatusTooManyRequests, http.StatusBadRequest:
	default:
		return "", false
	}
	code := errorCode(peekBody(resp))
	what := "HTTP " + resp.Status
	if code != "" {
		what += " (" + code + ")"
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusPaymentRequired:
		return what, true
	case http.StatusTooManyRequests:
		return what, code == "insufficient_quota"
	default:
		return what, code == "API_KEY_INVALID"
	}
}

// errorCode is the provider's code in an error answer's body (peekBody),
// kept to a short token (errorToken): an ErrorInfo reason (Gemini), else
// OpenAI's code, else the error's type (Anthropic, OpenAI).
func errorCode(peek []byte) string {
	var doc struct {
		Error struct {
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
			Details []struct {
				Reason string `json:"reason"`
			} `json:"details"`
		} `json:"error"`
	}
	if !errorDoc(peek, &doc) {
		return ""
	}
	code := ""
	for _, d := range doc.Error.Details {
		if d.Reason != "" {
			code = d.Reason
			break
		}
	}
	if code == "" {
		var s string
		if json.Unmarshal(doc.Error.Code, &s) == nil {
			code = s
		}
	}
	if code == "" {
		code = doc.Error.Type
	}
	return errorToken(code)
}

// errorToken keeps a provider's error code if it is a short token of
// letters, digits and _.- (as every provider's are), else nothing: the
// code goes into the run's status.
func errorToken(s string) string {
	if len(s) > 64 {
		return ""
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
		default:
			return ""
		}
	}
	return s
}

// isDialError: the connection was never made, so the request was not sent.
// A certificate that does not verify is not retried.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// providerWait is how long the provider asked to wait before the next
// try, if it did: OpenAI's retry-after-ms (milliseconds), else the HTTP
// Retry-After, in seconds or as a date (RFC 9110; Anthropic, OpenAI and
// Google send seconds).
func providerWait(resp *http.Response, now time.Time) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	if ms, err := strconv.ParseFloat(strings.TrimSpace(resp.Header.Get("Retry-After-Ms")), 64); err == nil && ms >= 0 && ms < 1e12 {
		return time.Duration(ms * float64(time.Millisecond)), true
	}
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < 1e9 {
		return time.Duration(s * float64(time.Second)), true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(0, at.Sub(now)), true
	}
	return 0, false
}

// maxErrorPeek is the most of an error answer's body the gateway reads
// for its code or the wait it asks for: providers' error bodies are a few
// hundred bytes.
const maxErrorPeek = 64 << 10

// bodyWait is the wait a Google API asked for in its error body, if it
// did: Gemini sends no Retry-After, but a google.rpc.RetryInfo among the
// error's details, {"@type": ".../google.rpc.RetryInfo", "retryDelay":
// "22s"} (a Duration: seconds, with a fraction, and "s"), on a 429 and
// some 503s; a streamed request's error comes as an array of one such
// object. The body read is put back in front of the rest, for the CLI.
func bodyWait(resp *http.Response) (time.Duration, bool) {
	var e struct {
		Error struct {
			Details []struct {
				Type       string `json:"@type"`
				RetryDelay string `json:"retryDelay"`
			} `json:"details"`
		} `json:"error"`
	}
	if !errorDoc(peekBody(resp), &e) {
		return 0, false
	}
	for _, d := range e.Error.Details {
		if d.Type != "type.googleapis.com/google.rpc.RetryInfo" {
			continue
		}
		v, ok := strings.CutSuffix(strings.TrimSpace(d.RetryDelay), "s")
		if s, err := strconv.ParseFloat(v, 64); ok && err == nil && s >= 0 && s < 1e9 {
			return time.Duration(s * float64(time.Second)), true
		}
	}
	return 0, false
}

// peekBody reads up to maxErrorPeek of an error answer's JSON body and
// puts what it read back in front of the rest, so that the CLI reads the
// answer as it came; nil for another type, or a read that failed.
func peekBody(resp *http.Response) []byte {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.Body == nil || mt != "application/json" {
		return nil
	}
	peek, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorPeek))
	var rest io.Reader = resp.Body
	if err != nil {
		rest = errReader{err}
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(peek), rest), resp.Body}
	if err != nil {
		return nil
	}
	return peek
}

// errorDoc decodes an error answer's body into v: an object, or a
// streamed request's array of one (Gemini's).
func errorDoc(peek []byte, v any) bool {
	if peek = bytes.TrimSpace(peek); len(peek) > 0 && peek[0] == '[' {
		var arr []json.RawMessage
		if json.Unmarshal(peek, &arr) != nil || len(arr) == 0 {
			return false
		}
		peek = arr[0]
	}
	return len(peek) > 0 && json.Unmarshal(peek, v) == nil
}

// errReader reads nothing but its error: after a body's first bytes, the
// error that cut them.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// backoff is the gateway's own wait before the next try: Base doubled per
// try with jitter, at most Max.
func backoff(pol Retry, attempt int) time.Duration {
	d := pol.Base << (attempt - 1)
	d += time.Duration(rand.Int64N(int64(d)/4 + 1))
	return min(d, pol.Max)
}

// Server serves the gateway on ln until Close.
type Server struct {
	srv  *http.Server
	done chan struct{}
}

// Serve starts serving g on ln.
func Serve(g *Gateway, ln net.Listener) *Server {
	s := &Server{srv: &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s
}

// Close stops serving and waits for the server's loop to end.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
