package redact

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Credential files as the CLIs write them (shapes from the CLIs' own
// files; values made up). Each refresh token is printed alone, as
// `jq -r .tokens.refresh_token auth.json` would.
var credentialFiles = []struct {
	name, file string
	fields     []string // values that must be redacted on their own
}{
	{
		name: "codex auth.json",
		file: `{
  "OPENAI_API_KEY": null,
  "tokens": {
    "id_token": "eyJhbGciOiJub25lIn0.eyJlbWFpbCI6ImFAYi5jIn0.c2ln",
    "access_token": "codex-access-Zq8T2kPw9sLmXv4R",
    "refresh_token": "rt_codexRefresh-7Hf3Kd9QpLz2",
    "account_id": "acct-3c1f9e2b"
  },
  "last_refresh": "2026-11-30T10:00:00Z"
}`,
		fields: []string{"rt_codexRefresh-7Hf3Kd9QpLz2", "codex-access-Zq8T2kPw9sLmXv4R", "acct-3c1f9e2b"},
	},
	{
		name:   "claude code .credentials.json",
		file:   `{"claudeAiOauth":{"accessToken":"cc-at-Hq2mV8xLp0Rt","refreshToken":"cc-rt-Wn5zJ3kYb7Qd","expiresAt":1893456000000,"scopes":["user:inference"],"subscriptionType":"pro"}}`,
		fields: []string{"cc-rt-Wn5zJ3kYb7Qd", "cc-at-Hq2mV8xLp0Rt"},
	},
	{
		name:   "opencode auth.json",
		file:   `{"anthropic":{"type":"oauth","refresh":"oc-refresh-Pq4Lm9Zx2","access":"oc-access-Tg6Hs1Vb8","expires":1893456000000}}`,
		fields: []string{"oc-refresh-Pq4Lm9Zx2", "oc-access-Tg6Hs1Vb8"},
	},
	{
		name:   "toml",
		file:   "[auth]\nrefresh_token = \"toml-refresh-Kx81Lq\"\nmode = \"oauth\"\n",
		fields: []string{"toml-refresh-Kx81Lq"},
	},
	{
		name:   "ini",
		file:   "[default]\naws_access_key_id = ini-key-id-9Qw2\naws_secret_access_key = 'ini-secret-Pz7Xr3'\n",
		fields: []string{"ini-key-id-9Qw2", "ini-secret-Pz7Xr3"},
	},
}

func TestCredentialFileFieldsAreRedactedAlone(t *testing.T) {
	for _, tc := range credentialFiles {
		t.Run(tc.name, func(t *testing.T) {
			// NoRules: only the field-by-field logic may catch these.
			r := newRedactor(t, Options{Secrets: []string{tc.file}, NoRules: true})
			for _, f := range tc.fields {
				for _, chunk := range []int{1, 7, 4096} {
					out := string(writeInChunks(t, r, []byte("refresh: "+f+"\n"), chunk))
					if strings.Contains(out, f) {
						t.Errorf("field %q printed alone survived (chunks of %d): %q", f, chunk, out)
					}
				}
			}
			if out := r.String(tc.file); strings.Contains(out, tc.fields[0]) {
				t.Errorf("the whole file leaked its field: %q", out)
			}
		})
	}
}

func TestFieldValues(t *testing.T) {
	cases := map[string][]string{
		"plain token":     nil,
		"sk-plain-abcdef": nil,
		`{"a":"short","b":"longer-value","c":["in-a-list-x"],"d":{"e":"nested-value"},"n":12345678}`: {"in-a-list-x", "longer-value", "nested-value"},
		"key = \"toml-value-1\"\n[t]\nk2 = 'toml-value-2'\n":                                         {"toml-value-1", "toml-value-2"},
		"# comment\n[s]\nuser=someone-long\npass: \"p4ssw0rd-x\"\nnovalue\n":                         {"p4ssw0rd-x", "someone-long"},
	}
	for in, want := range cases {
		if diff := cmp.Diff(want, FieldValues([]byte(in))); diff != "" {
			t.Errorf("FieldValues(%q) (-want +got):\n%s", in, diff)
		}
	}
}
