package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestOwnWrites(t *testing.T) {
	o := newOwnWrites()
	run := types.NamespacedName{Namespace: "ns", Name: "r"}
	if o.stale(run, "5") {
		t.Error("a run this controller never wrote is stale")
	}
	o.wrote(run, "10")
	for rv, want := range map[string]bool{"9": true, "10": false, "11": false, "": false, "x": false} {
		if got := o.stale(run, rv); got != want {
			t.Errorf("after a write at 10, version %q stale = %v, want %v", rv, got, want)
		}
	}
	// The cache showing an older version keeps the entry; ours ends it.
	o.observe(run, "9")
	if !o.stale(run, "9") {
		t.Error("an older version seen by the cache ended the entry")
	}
	o.observe(run, "10")
	if o.stale(run, "9") {
		t.Error("the entry outlived the cache showing our write")
	}
	// A newer version (someone else wrote after us) ends it too; so does a
	// version that does not compare, and a delete.
	o.wrote(run, "20")
	o.observe(run, "21")
	if o.stale(run, "19") {
		t.Error("a newer version did not end the entry")
	}
	o.wrote(run, "30")
	o.observe(run, "not-a-number")
	if o.stale(run, "29") {
		t.Error("a version that does not compare did not end the entry")
	}
	o.wrote(run, "40")
	o.forget(run)
	if o.stale(run, "39") {
		t.Error("a deleted run kept its entry")
	}
}
