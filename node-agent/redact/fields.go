package redact

import (
	"bufio"
	"bytes"
	"encoding/json"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// MinFieldLen is the shortest string value inside a credential file that is
// redacted on its own. Shorter values ("oauth", "Bearer", "true") are
// labels, not secrets, and would mangle ordinary text; every token format
// the CLIs use is far longer.
const MinFieldLen = 8

// FieldValues returns every string value of at least MinFieldLen bytes
// inside data when data is a JSON, TOML or INI document (a credential file:
// Codex's auth.json, Claude Code's .credentials.json, OpenCode's auth.json,
// a config.toml, a .netrc-like key=value file), sorted and without
// duplicates. It returns nil for anything else (a plain token). Keys are
// not values: a key is the file's format, not its secret.
//
// A refresh token inside auth.json that an agent prints on its own
// (`jq -r .tokens.refresh_token auth.json`) is then redacted like the whole
// file would be.
func FieldValues(data []byte) []string {
	seen := map[string]bool{}
	add := func(s string) {
		s = strings.TrimSpace(s)
		if len(s) >= MinFieldLen {
			seen[s] = true
		}
	}
	trimmed := bytes.TrimSpace(data)
	var doc any
	switch {
	case len(trimmed) == 0:
		return nil
	case (trimmed[0] == '{' || trimmed[0] == '[') && json.Unmarshal(trimmed, &doc) == nil:
		walk(doc, add)
	case toml.Unmarshal(trimmed, &doc) == nil && isTable(doc):
		walk(doc, add)
	default:
		iniValues(trimmed, add)
	}
	if len(seen) == 0 {
		return nil
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func isTable(doc any) bool {
	m, ok := doc.(map[string]any)
	return ok && len(m) > 0
}

// walk calls add for every string inside a decoded JSON or TOML value.
func walk(v any, add func(string)) {
	switch x := v.(type) {
	case string:
		add(x)
	case map[string]any:
		for _, e := range x {
			walk(e, add)
		}
	case []any:
		for _, e := range x {
			walk(e, add)
		}
	}
}

// iniValues calls add for the value of every "key = value" or
// "key: value" line (INI, .env, properties); quotes around a value are
// dropped. Sections, comments and lines without a separator are skipped.
func iniValues(data []byte, add func(string)) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), len(data)+1)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		i := strings.IndexAny(line, "=:")
		if i <= 0 {
			continue
		}
		v := strings.TrimSpace(line[i+1:])
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		add(v)
	}
}
