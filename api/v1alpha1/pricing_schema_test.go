package v1alpha1_test

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestPricingSchema: the API server takes a well-formed price table and
// refuses prices that are not decimals, a currency that is not a code, an
// empty table and a model priced twice.
func TestPricingSchema(t *testing.T) {
	ctx := context.Background()
	good := harnessv1.ModelPrice{Model: "claude-opus-4-8*", Input: "15", Output: "75", CacheRead: "1.50", CacheWrite: "18.75"}
	mk := func(name string, p *harnessv1.PolicyPricing) error {
		pol := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: harnessv1.HarnessPolicySpec{Pricing: p}}
		err := k8s.Create(ctx, pol)
		if err == nil {
			t.Cleanup(func() { _ = k8s.Delete(ctx, pol) })
		}
		return err
	}
	if err := mk("pricing-good", &harnessv1.PolicyPricing{Currency: "USD", Models: []harnessv1.ModelPrice{good, {Model: "gpt-5.5", Input: "1.25", Output: "10"}}}); err != nil {
		t.Fatalf("a good table was refused: %v", err)
	}
	for name, p := range map[string]*harnessv1.PolicyPricing{
		"pricing-minus":    {Currency: "USD", Models: []harnessv1.ModelPrice{{Model: "m", Input: "-1", Output: "1"}}},
		"pricing-exp":      {Currency: "USD", Models: []harnessv1.ModelPrice{{Model: "m", Input: "1e3", Output: "1"}}},
		"pricing-comma":    {Currency: "USD", Models: []harnessv1.ModelPrice{{Model: "m", Input: "1", Output: "1,5"}}},
		"pricing-currency": {Currency: "dollars", Models: []harnessv1.ModelPrice{good}},
		"pricing-empty":    {Currency: "USD"},
		"pricing-twice":    {Currency: "USD", Models: []harnessv1.ModelPrice{good, good}},
	} {
		if err := mk(name, p); err == nil || !apierrors.IsInvalid(err) {
			t.Errorf("%s: %v, want Invalid", name, err)
		}
	}
}
