package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// selects must say what a nodeSelector built by labels.SelectorFromSet says.
func TestSelectsIsSelectorFromSet(t *testing.T) {
	node := map[string]string{"pool": "a", "zone": "z1", "empty": ""}
	for _, sel := range []map[string]string{
		nil, {}, {"pool": "a"}, {"pool": "b"}, {"pool": "a", "zone": "z1"}, {"pool": "a", "zone": "z2"},
		{"missing": ""}, {"empty": ""}, {"empty": "x"}, {"pool": ""},
	} {
		want := labels.SelectorFromSet(sel).Matches(labels.Set(node))
		if got := selects(sel, node); got != want {
			t.Errorf("selects(%v) = %v, labels.SelectorFromSet says %v", sel, got, want)
		}
		if got, want := selects(sel, nil), labels.SelectorFromSet(sel).Matches(labels.Set(nil)); got != want {
			t.Errorf("selects(%v) on a node without labels = %v, labels.SelectorFromSet says %v", sel, got, want)
		}
	}
}
