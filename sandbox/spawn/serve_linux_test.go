package spawn

import (
	"strings"
	"testing"
)

func TestRequestCheck(t *testing.T) {
	ok := Request{Path: "/usr/bin/bwrap", Argv: []string{"bwrap"}, UID: 100000, GID: 100000, Fds: []int{0, 1, 2, 3}}
	if err := ok.check(4); err != nil {
		t.Fatalf("a good request: %v", err)
	}
	for name, tc := range map[string]struct {
		mod    func(*Request)
		nfiles int
		want   string
	}{
		"root":            {func(r *Request) { r.UID = 0 }, 4, "never runs as root"},
		"root group":      {func(r *Request) { r.GID = 0 }, 4, "never runs as root"},
		"negative uid":    {func(r *Request) { r.UID = -1 }, 4, "never runs as root"},
		"relative path":   {func(r *Request) { r.Path = "bwrap" }, 4, "absolute"},
		"no argv":         {func(r *Request) { r.Argv = nil }, 4, "absolute program path and argv"},
		"fds mismatch":    {func(r *Request) {}, 3, "descriptor numbers for"},
		"repeated fd":     {func(r *Request) { r.Fds = []int{0, 1, 1, 3} }, 4, "repeated"},
		"fd out of range": {func(r *Request) { r.Fds = []int{0, 1, 2, 99} }, 4, "out of range"},
	} {
		r := ok
		r.Fds = append([]int(nil), ok.Fds...)
		tc.mod(&r)
		if err := r.check(tc.nfiles); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}
