package v1alpha1

import (
	"strings"
	"testing"
)

func TestPricingCost(t *testing.T) {
	p := &PolicyPricing{Currency: "USD", Models: []ModelPrice{
		{Model: "claude-opus-4-8*", Input: "15", Output: "75", CacheRead: "1.5", CacheWrite: "18.75"},
		{Model: "claude-opus-4-8-20261201", Input: "5", Output: "25"},
		{Model: "claude*", Input: "1", Output: "2"},
		{Model: "gpt-5.5", Input: "1.25", Output: "10"},
	}}
	for name, tc := range map[string]struct {
		parts []ModelTokens
		want  string
		err   string
	}{
		// Exact name over prefixes; unset cache prices are the input's.
		"exact": {parts: []ModelTokens{{Model: "claude-opus-4-8-20261201", Input: 1_000_000, Output: 2_000_000, CacheRead: 1_000_000, CacheWrite: 1}},
			want: "60.000005 USD"},
		// The longest prefix: 1037*15 + 40*75 + 311*1.5 + 27*18.75 per million.
		"prefix": {parts: []ModelTokens{{Model: "claude-opus-4-8-20250101", Input: 1037, Output: 40, CacheRead: 311, CacheWrite: 27}},
			want: "0.019528 USD"},
		"two models summed": {parts: []ModelTokens{{Model: "gpt-5.5", Input: 800_000, Output: 100_000}, {Model: "claude-x", Input: 1_000_000}},
			want: "3.000000 USD"},
		"no price": {parts: []ModelTokens{{Model: "gemini-2.5-pro", Input: 10}}, err: `no price for model "gemini-2.5-pro"`},
		"nothing":  {want: "0.000000 USD"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := p.Cost(tc.parts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || got != "" {
					t.Fatalf("cost %q, error %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("cost %q (%v), want %q", got, err, tc.want)
			}
		})
	}
	policies := []HarnessPolicy{{}, {}, {}}
	policies[0].Name, policies[1].Name, policies[2].Name = "z", "b", "a"
	policies[0].Spec.Pricing = &PolicyPricing{Currency: "EUR"}
	policies[1].Spec.Pricing = &PolicyPricing{Currency: "USD"}
	if got, name := PricingOf(policies); got == nil || got.Currency != "USD" || name != "b" {
		t.Errorf("PricingOf: %+v from %q, want b's", got, name)
	}
}
