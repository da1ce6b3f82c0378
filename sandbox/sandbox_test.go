package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestChoosePolicy(t *testing.T) {
	down := []Availability{{Mode: ModeBwrap, Reason: "bwrap not found"}, {Mode: ModePlain, Available: true}}
	if _, _, err := choose(PolicyRequired, Options{}, down); !errors.Is(err, ErrNoSandbox) || !strings.Contains(err.Error(), "bwrap not found") {
		t.Errorf("Required without a sandbox: %v", err)
	}
	r, _, err := choose(PolicyAllowFallback, Options{}, down)
	if err != nil || r.Mode() != ModePlain || !strings.Contains(r.(*PlainRunner).Reason, "bwrap not found") {
		t.Errorf("AllowFallback without a sandbox: %v, %v", r, err)
	}
	if _, _, err := choose("Sometimes", Options{}, down); err == nil {
		t.Errorf("an unknown policy was accepted")
	}
}

func TestSpecValidate(t *testing.T) {
	ok := Spec{Argv: []string{"x"}, Dir: "/run", Env: []string{"A=b", "C="}}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Spec{
		"empty argv":    {Dir: "/"},
		"relative dir":  {Argv: []string{"x"}, Dir: "run"},
		"bad env":       {Argv: []string{"x"}, Dir: "/", Env: []string{"SECRETVALUEWITHOUTKEY"}},
		"relative path": {Argv: []string{"x"}, Dir: "/", Hidden: []string{"home"}},
		"negative uid":  {Argv: []string{"x"}, Dir: "/", UID: -1},
		// A NUL would end an argument early, and in bwrap's --args it
		// would start an option of its own.
		"NUL in an argument": {Argv: []string{"x", "a\x00--share-net"}, Dir: "/"},
		"NUL in a value":     {Argv: []string{"x"}, Dir: "/", Env: []string{"K=SECRETVALUEWITHOUTKEY\x00--share-net"}},
		"NUL in a path":      {Argv: []string{"x"}, Dir: "/", ReadOnly: []string{"/a\x00--share-net"}},
		"NUL in the dir":     {Argv: []string{"x"}, Dir: "/a\x00b"},
	} {
		err := s.validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "SECRETVALUEWITHOUTKEY") {
			t.Errorf("%s: error repeats the whole entry: %v", name, err)
		}
	}
	if got := (Spec{}).Limits.WithDefaults(); got.MemoryBytes != 2<<30 || got.MaxProcesses != DefaultMaxProcesses {
		t.Errorf("defaults %+v", got)
	}
	if uid, gid := (Spec{}).ids(); uid != 65534 || gid != 65534 {
		t.Errorf("default ids %d:%d", uid, gid)
	}
}
