package redact

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
)

// The rules' helpers that stand in for a plain search must agree with it on
// every input: a newline anywhere in a word, and the borrow of the word
// trick (a 0x0b just above a newline).
func TestLastNewlineIsLastIndexByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("ab\n\x0b\x0a\x00\xff")
	for n := 0; n < 2000; n++ {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if rng.IntN(3) == 0 {
			b = bytes.ReplaceAll(b, []byte("\n"), []byte("x"))
		}
		if got, want := lastNewline(b), bytes.LastIndexByte(b, '\n'); got != want {
			t.Fatalf("lastNewline(%q) = %d, want %d", b, got, want)
		}
	}
}

func TestHasRunIsALongestRunAtLeast(t *testing.T) {
	longest := func(b []byte) int {
		best, run := 0, 0
		for _, c := range b {
			if isTok[c] {
				run++
				best = max(best, run)
			} else {
				run = 0
			}
		}
		return best
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20000; i++ {
		b := make([]byte, rng.IntN(120))
		tokRate := rng.IntN(10) // from mostly separators to mostly tokens
		for j := range b {
			if rng.IntN(10) < tokRate {
				b[j] = "aZ9_.-"[rng.IntN(6)]
			} else {
				b[j] = " \n\"{:"[rng.IntN(5)]
			}
		}
		n := 1 + rng.IntN(40)
		if got, want := hasRun(b, n), longest(b) >= n; got != want {
			t.Fatalf("hasRun(%q, %d) = %v, want %v", b, n, got, want)
		}
	}
}

// defaultRules decodes gitleaks' default configuration with go-toml rather
// than through viper, as gitleaks does: the two must give the same
// ViperConfig, or the rules would not be gitleaks' own.
func TestDefaultConfigDecodesAsViperDoes(t *testing.T) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(config.DefaultConfig)); err != nil {
		t.Fatal(err)
	}
	var want config.ViperConfig
	if err := v.Unmarshal(&want); err != nil {
		t.Fatal(err)
	}
	got, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Rules) < 100 {
		t.Fatalf("viper read %d rules from gitleaks' configuration: not it", len(want.Rules))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("go-toml and viper decode gitleaks' configuration differently (%d and %d rules)", len(got.Rules), len(want.Rules))
	}
}
