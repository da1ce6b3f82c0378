package main

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API server refuses cancel's patch, whose metadata.uid is the run it
// read, with Invalid on metadata.uid ("field is immutable") when the run
// under that name was made again (seen against the real API server; the
// race itself cannot be timed from outside).
func TestUIDChangedIsToldApart(t *testing.T) {
	gk := schema.GroupKind{Group: "harnessfacts.io", Kind: "HarnessRun"}
	changed := apierrors.NewInvalid(gk, "x", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "old", "field is immutable")})
	other := apierrors.NewInvalid(gk, "x", field.ErrorList{field.Invalid(field.NewPath("spec", "cancel"), false, "cannot go back")})
	if !uidChanged(changed) || uidChanged(other) || uidChanged(apierrors.NewNotFound(schema.GroupResource{Resource: "harnessruns"}, "x")) {
		t.Errorf("uidChanged: %v %v", uidChanged(changed), uidChanged(other))
	}
}
