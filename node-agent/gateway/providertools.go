package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// A model request can ask the provider itself to reach the network: its
// hosted web search and fetch, its URL context, a remote MCP server it
// connects to. With egress ProviderOnly the agent reaches nothing but its
// provider, and such a tool would make the provider its proxy, fetching
// whatever the agent put in a URL or a query (a workspace's content in an
// attacker's URL), and so would content the provider fetches from a URL
// (an image by URL). Unless the run allows them
// (spec.network.providerTools), the gateway refuses every request that
// names one.

// networkTool names the first tool of a model request of dialect d (read
// as req) that makes the provider reach the network, "" when there is
// none: a tool, or content the provider fetches from a URL (urlContent).
// Gemini also takes the proto's snake_case names.
//
// The error is for a request whose conversation the gateway will not read
// (urlcontent.go): refused whatever the run allows, as an unreadable body.
func networkTool(d usage.Dialect, req request) (string, error) {
	if what, err := urlContent(d, req); what != "" || err != nil {
		return what, err
	}
	return hostedTool(d, req), nil
}

// hostedTool names the first of a request's tools that has the provider
// reach the network, "" when there is none.
func hostedTool(d usage.Dialect, req request) string {
	switch d {
	case usage.Anthropic:
		// Server tools: web_search_20250305, web_fetch_20250910 and their
		// later versions; the MCP connector's mcp_servers.
		if present(req["mcp_servers"]) {
			return "mcp_servers"
		}
		return typedTool(req["tools"], "web_search", "web_fetch")
	case usage.Responses:
		// web_search, web_search_preview and their dated versions; mcp;
		// xAI's x_search and Groq's browser_search in the same form.
		return typedTool(req["tools"], "web_search", "mcp", "x_search", "browser_search")
	case usage.Chat:
		if present(req["web_search_options"]) {
			return "web_search_options"
		}
		// Built-in tools of OpenAI-compatible providers, beside the
		// agent's own "function" tools: Groq's browser_search, xAI's
		// x_search, and web_search in the Chat form.
		if t := typedTool(req["tools"], "web_search", "browser_search", "x_search"); t != "" {
			return t
		}
		// xAI's Live Search in Chat Completions.
		if present(req["search_parameters"]) {
			return "search_parameters"
		}
		// OpenAI's search models (gpt-4o-search-preview,
		// gpt-5-search-api) search the web on every request, asked or not;
		// so do OpenRouter's models named with ":online", and Perplexity's
		// Sonar models (sonar, sonar-pro, sonar-reasoning; through
		// OpenRouter perplexity/sonar…), which fetch what the query names.
		var model string
		if json.Unmarshal(req["model"], &model) == nil {
			// Groq's compound systems (groq/compound, compound-beta,
			// compound-beta-mini) search and visit websites by themselves.
			if m := strings.ToLower(model); strings.Contains(m, "search") || strings.Contains(m, ":online") || strings.Contains(m, "sonar") || strings.Contains(m, "compound") {
				return "search model " + model
			}
		}
		// OpenRouter's web plugin: {"plugins":[{"id":"web"}]}.
		web := false
		arrayMembers(req["plugins"], func(key []byte, v rawValue) bool {
			web = string(key) == "id" && string(rawString(v)) == "web"
			return !web
		})
		if web {
			return "web plugin"
		}
	case usage.Gemini:
		found := ""
		arrayMembers(req["tools"], func(key []byte, v rawValue) bool {
			switch strings.ToLower(strings.ReplaceAll(string(key), "_", "")) {
			// Grounding with Google Maps and Vertex AI's enterprise web
			// grounding reach the network on the provider's side too.
			case "googlesearch", "googlesearchretrieval", "urlcontext", "googlemaps", "enterprisewebsearch":
				if present(v) {
					found = string(key)
				}
			}
			return found == ""
		})
		return found
	}
	return ""
}

// isFalse: a key that is absent, null or false.
func isFalse(v rawValue) bool {
	var b bool
	return !present(v) || json.Unmarshal(v, &b) == nil && !b
}

// present: a key with a value other than null.
func present(v rawValue) bool {
	return len(v) > 0 && string(v) != "null"
}

// arrayMembers calls fn with each member of each object in raw, a JSON
// array of a body already read as valid JSON, until fn returns false;
// anything else in raw (not an array, an element not an object) is
// skipped, as the provider would refuse it. Nothing is decoded into a map:
// a 16 MiB array of two million tiny objects decoded into maps took about
// 780 MiB of the node-agent's memory, which every run shares. Keys are
// matched exactly (Go's struct decoding would match "Type" as "type"),
// and each member is seen, every time a key repeats: a provider may read
// the first or the last of them.
func arrayMembers(raw rawValue, fn func(key []byte, val rawValue) bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return
	}
	for i = skipSpace(raw, i+1); i < len(raw) && raw[i] != ']'; {
		if raw[i] == '{' {
			for i = skipSpace(raw, i+1); i < len(raw) && raw[i] == '"'; {
				kEnd := stringEnd(raw, i)
				key := rawString(raw[i:kEnd])
				i = skipSpace(raw, kEnd)
				i = skipSpace(raw, i+1) // past the colon
				vEnd := skipValue(raw, i)
				if !fn(key, raw[i:vEnd]) {
					return
				}
				i = skipSpace(raw, vEnd)
				if i < len(raw) && raw[i] == ',' {
					i = skipSpace(raw, i+1)
				}
			}
			i++ // past the object's brace
		} else {
			i = skipValue(raw, i)
		}
		i = skipSpace(raw, i)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
}

// skipValue is the index after the JSON value that starts at i of b
// (valid JSON), found without recursion.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i) - 1
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a scalar
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i // the end of a scalar
			}
		}
	}
	return i
}

// typedTool is the type of the first tool in raw (a JSON array of objects
// with a "type") that starts with one of prefixes.
func typedTool(raw rawValue, prefixes ...string) string {
	found := ""
	arrayMembers(raw, func(key []byte, v rawValue) bool {
		if string(key) != "type" {
			return true
		}
		typ := string(rawString(v))
		for _, p := range prefixes {
			if strings.HasPrefix(typ, p) {
				found = typ
				return false
			}
		}
		return true
	})
	return found
}

// refusedToolMessage is the 403's body, for the agent's CLI to show.
func refusedToolMessage(tool string) string {
	return fmt.Sprintf("the model gateway refused this request: its %s would have the provider reach the network for the agent, "+
		"past the run's egress ProviderOnly (spec.network.providerTools: Allowed forwards such requests)", tool)
}

// contentKeys are, per dialect, the request's keys that hold the
// conversation: the messages and the system prompt, not the tools' own
// schemas (a "url" parameter there is the agent's tool's).
var contentKeys = map[usage.Dialect][]string{
	usage.Anthropic: {"messages", "system"},
	usage.Chat:      {"messages"},
	usage.Responses: {"input"},
	usage.Gemini:    {"contents", "systemInstruction", "system_instruction", "generateContentRequest", "generate_content_request"},
}

// urlContent names the first part of a request's conversation that the
// provider would fetch from a URL, "" when there is none: an image, a
// document or a file given by URL rather than inline (Anthropic's source
// of type "url"; Chat Completions' image_url and the like other than a
// data: URL; the Responses API's input_image by URL and input_file's
// file_url; Gemini's fileData). The provider fetches it with the agent's
// URL, query and all: the same channel out as a fetch tool. The CLIs send
// images and files inline. Parts are found at any depth (a tool result
// can hold an image), by one pass over the body's bytes (urlcontent.go).
func urlContent(d usage.Dialect, req request) (string, error) {
	for _, k := range contentKeys[d] {
		raw := req[k]
		// Only a value that could name one is scanned: every key that
		// decides has "url", "Uri" or "uri" in its name, or is file_data
		// (keys are read case-sensitively, as the providers read them),
		// or is written with an escape (\u0075rl), which is read as they
		// would.
		if !present(raw) || !containsAny(raw, "url", "Uri", "uri", "file_data", `\u`) {
			continue
		}
		if what, err := scanURLParts(d, raw); what != "" || err != nil {
			return what, err
		}
	}
	return "", nil
}

func containsAny(b []byte, subs ...string) bool {
	for _, s := range subs {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}
