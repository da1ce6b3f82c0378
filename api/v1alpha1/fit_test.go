package v1alpha1_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// huge is longer than any bound of the schema, in characters and in bytes,
// and multi-byte, so a cut in the middle of a character shows.
var huge = strings.Repeat("é", 40000)

// fill sets every plain string of v (a struct, reached through pointers,
// structs and slices) to huge, every []string to 20 huge items, and every
// slice of structs to 100 filled items: whatever a status field holds, it
// is there, beyond its bound. Typed strings (enums) are left empty;
// metav1 types (conditions, times) are the caller's.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct && v.Type().Elem().PkgPath() == reflect.TypeFor[harnessv1.HarnessRunStatus]().PkgPath() {
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	case reflect.String:
		if v.Type() == reflect.TypeFor[string]() {
			v.SetString(huge)
		}
	case reflect.Slice:
		switch el := v.Type().Elem(); {
		case el == reflect.TypeFor[string]():
			s := reflect.MakeSlice(v.Type(), 20, 20)
			for i := range 20 {
				s.Index(i).SetString(huge)
			}
			v.Set(s)
		case el.Kind() == reflect.Struct && el.PkgPath() == reflect.TypeFor[harnessv1.HarnessRunStatus]().PkgPath():
			s := reflect.MakeSlice(v.Type(), 100, 100)
			for i := range 100 {
				fill(s.Index(i))
			}
			v.Set(s)
		}
	}
}

func hugeConditions(n int) []metav1.Condition {
	var cs []metav1.Condition
	for i := range n {
		cs = append(cs, metav1.Condition{Type: fmt.Sprintf("Cond%d", i), Status: metav1.ConditionFalse, Reason: "Huge",
			Message: strings.Repeat("m", 100000), LastTransitionTime: metav1.Now()})
	}
	return cs
}

// A status with every string beyond its bound is rejected by the real API
// server as it is, and accepted once fitted: a run can always be given its
// terminal status, whatever an agent or a check printed.
func TestFittedStatusIsAcceptedByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	obj := run(t, "fit-huge-status", nil)
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var r harnessv1.HarnessRun
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), &r); err != nil {
		t.Fatal(err)
	}
	var st harnessv1.HarnessRunStatus
	fill(reflect.ValueOf(&st).Elem())
	st.Phase, st.Verdict, st.FailureClass = harnessv1.RunFailed, harnessv1.VerdictFail, harnessv1.FailureCheck
	st.Conditions = hugeConditions(20)
	for i := range st.Checks {
		st.Checks[i].Name = fmt.Sprintf("check-%d-%s", i, strings.Repeat("c", 200))
	}
	for i := range st.Artifacts {
		st.Artifacts[i].Path = fmt.Sprintf("a%d-%s", i, strings.Repeat("p", 600))
	}

	unfit := r.DeepCopy()
	unfit.Status = *st.DeepCopy()
	if err := k8s.Status().Update(ctx, unfit); err == nil {
		t.Fatal("the API server accepted the unfitted status: the test proves nothing")
	}

	st.Fit()
	r.Status = st
	if err := k8s.Status().Update(ctx, &r); err != nil {
		t.Fatalf("the API server rejected the fitted status: %v", err)
	}
	var got harnessv1.HarnessRun
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != harnessv1.RunFailed || !strings.HasSuffix(got.Status.Message, "[truncated]") {
		t.Errorf("stored phase %q, message ends %q: want Failed and a message that says it was cut",
			got.Status.Phase, got.Status.Message[max(0, len(got.Status.Message)-20):])
	}
}

func TestFittedNodeStatusIsAcceptedByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	node := &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: "fit-huge-node"}}
	if err := k8s.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	var st harnessv1.HarnessNodeStatus
	fill(reflect.ValueOf(&st).Elem())
	st.LeaseNamespace = huge
	st.Adapters = nil
	for _, a := range []harnessv1.Adapter{harnessv1.AdapterCodex, harnessv1.AdapterExec} {
		st.Adapters = append(st.Adapters, harnessv1.AdapterInfo{Name: a, Version: huge})
	}
	for i := range st.SandboxModes {
		st.SandboxModes[i].Mode = fmt.Sprintf("mode%d", i)
	}
	st.Conditions = hugeConditions(10)
	unfit := node.DeepCopy()
	unfit.Status = *st.DeepCopy()
	if err := k8s.Status().Update(ctx, unfit); err == nil {
		t.Fatal("the API server accepted the unfitted node status: the test proves nothing")
	}
	st.Fit()
	node.Status = st
	if err := k8s.Status().Update(ctx, node); err != nil {
		t.Fatalf("the API server rejected the fitted node status: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{strings.Repeat("a", 30), 20, "aaaaa …[truncated]"},
		{"é" + strings.Repeat("é", 20), 18, "é …[truncated]"},
		{"ab\xffcd", 10, "ab\uFFFDcd"},
		{"abcdef", 3, "abc"},
	} {
		got := harnessv1.Truncate(tc.in, tc.n)
		if got != tc.want || len(got) > tc.n {
			t.Errorf("Truncate(%q, %d) = %q, want %q within %d bytes", tc.in, tc.n, got, tc.want, tc.n)
		}
	}
}
