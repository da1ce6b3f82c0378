package v1alpha1

import (
	"fmt"
	"math/big"
	"sort"
	"strings"
)

// PricingOf is the price table of the policies given (those that select a
// run's namespace): the first by name that has one, nil for none.
func PricingOf(policies []HarnessPolicy) (*PolicyPricing, string) {
	sorted := make([]*HarnessPolicy, len(policies))
	for i := range policies {
		sorted[i] = &policies[i]
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, p := range sorted {
		if p.Spec.Pricing != nil {
			return p.Spec.Pricing, p.Name
		}
	}
	return nil, ""
}

// ModelTokens are the tokens one model served.
type ModelTokens struct {
	Model                                string
	Input, Output, CacheRead, CacheWrite int64
}

// PriceFor is the table's entry for model: an exact name, else the longest
// "*" prefix that covers it; nil when none does.
func (p *PolicyPricing) PriceFor(model string) *ModelPrice {
	var best *ModelPrice
	for i := range p.Models {
		m := &p.Models[i]
		if m.Model == model {
			return m
		}
		if prefix, ok := strings.CutSuffix(m.Model, "*"); ok && strings.HasPrefix(model, prefix) &&
			(best == nil || len(m.Model) > len(best.Model)) {
			best = m
		}
	}
	return best
}

// costDecimals is how many decimals an estimated cost keeps.
const costDecimals = 6

// Cost prices parts with the table: "<decimal> <currency>" (rounded to
// six decimals), or "" with the reason when a model has no price (no part
// is priced then: a sum over part of the tokens would read as the whole).
func (p *PolicyPricing) Cost(parts []ModelTokens) (string, error) {
	total := new(big.Rat)
	million := big.NewRat(1_000_000, 1)
	for _, part := range parts {
		price := p.PriceFor(part.Model)
		if price == nil {
			return "", fmt.Errorf("the price table has no price for model %q", part.Model)
		}
		for _, f := range []struct {
			tokens int64
			price  string
		}{{part.Input, price.Input}, {part.Output, price.Output}, {part.CacheRead, or(price.CacheRead, price.Input)}, {part.CacheWrite, or(price.CacheWrite, price.Input)}} {
			if f.tokens == 0 {
				continue
			}
			r, ok := new(big.Rat).SetString(f.price)
			if !ok || r.Sign() < 0 {
				return "", fmt.Errorf("price %q of model %q is not a decimal", f.price, price.Model)
			}
			r.Mul(r, big.NewRat(f.tokens, 1))
			total.Add(total, r.Quo(r, million))
		}
	}
	return total.FloatString(costDecimals) + " " + p.Currency, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
